"""The auto steps_per_execution and the metric file the task writes for the Hydra process to relay."""

from __future__ import annotations

import pytest

from tests.unit.unit_helpers import plain
from xpdist.core import plan as planning
from xpdist.core.protocol.jobdir import JobDir, MetricFile
from xpdist.tracking import store as tracking
from xpdist.tracking.relay import MetricRelay


def make(tmp_path, *overrides):
    return planning.make_plan(plain(*overrides), tmp_path)


@pytest.mark.parametrize("overrides, expected", [
    (["strategy=one_device"], 20),  # the guide's 100 examples, 5 per step: one call per epoch
    ([], 20),
    (["strategy=one_device", "dataset.num_examples=1000"], 25),  # largest divisor of 200 up to 32
    (["strategy=one_device", "dataset.num_examples=185"], 1),  # 37 steps: prime, above the cap
    (["strategy=one_device", "model=mlp"], 20),
    (["strategy=one_device", "model=cnn", "dataset=synthetic_images"], 1),  # slower on CPU
    (["strategy=mirrored", "devices.logical_cpus=2"], 1),  # Keras 3 fit fails with it
    (["strategy=one_device", "trainer.steps_per_execution=4"], 4),  # an explicit value wins
])
def test_auto_steps_per_execution(tmp_path, overrides, expected):
    p = make(tmp_path, *overrides)
    assert p.steps_per_execution == expected
    assert p.steps_per_epoch % p.steps_per_execution == 0 or "trainer.steps_per_execution=4" in overrides


def test_metric_file_lines_reach_the_run_through_the_relay(tmp_path, store_uri):
    uri = store_uri
    run_id = tracking.create_run(uri, "relay", "r", {"a": "1"}, {})
    path = JobDir(tmp_path).metrics
    metrics = MetricFile(path)
    metrics.add({"loss": 0.5, "epoch_time_s": 1.0}, step=1)
    metrics.add({"batch_loss": 0.25}, step=3)
    assert not path.exists()  # add() only buffers
    metrics.flush()
    with open(path, "a") as out:
        out.write('{"step": 2, "timestamp": 1, "metrics": {"lo')  # a line still being written
    relay = MetricRelay(uri, run_id, path)
    relay.relay()
    client = tracking.client(uri)
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "loss")] == [(1, 0.5)]
    with open(path, "a") as out:
        out.write('ss": 0.125}}\n')
    relay.stop()  # never started: stop() relays the rest
    assert sorted((m.step, m.value) for m in client.get_metric_history(run_id, "loss")) == [(1, 0.5), (2, 0.125)]
    assert [(m.step, m.value) for m in client.get_metric_history(run_id, "batch_loss")] == [(3, 0.25)]
    assert metrics.steps_with("epoch_time_s") == [1]
