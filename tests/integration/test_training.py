"""Declared training pieces in real runs, read back with MlflowClient (issue 23's proof, small).

- The issue's user program: a binary classifier with one logit (tests/userpkg/data.binary,
  outside xpdist) trained with `loss=binary_crossentropy loss.from_logits=true
  trainer.metrics=[auc] optimizer=adamw schedule=cosine schedule.warmup_epochs=1
  callbacks=[early_stopping]` as written, under mirrored (fit and ctl) and
  multi_worker_mirrored on 2 localhost workers (ctl): FINISHED, auc, val_auc and
  learning_rate at every epoch, and the warmup visible in learning_rate.
- fit and ctl end with the same weights (1e-5) under one_device with a warmup schedule,
  global_clipnorm and weight decay, and two replicas on the same global batch end with
  one_device's weights, mirrored under both trainers and multi_worker_mirrored on 2 localhost
  workers under ctl: the clip acts on the summed gradient (xpdist/task/train/clipping.py), not on
  each replica's share. The parameter-server loop trains that configuration to a finite loss.
  The two 2-worker runs are also checked as a user sees them: params, epochs, every task's log,
  nothing left behind.
- early stopping ends a run FINISHED with the tag xpdist.stopped_early_at_epoch.
Eleven runs, two at a time, three of them 2-worker clusters and one a 3-process cluster: about two and a half minutes on 2 cores.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.helpers import LOG_MODEL
from tests.integration.harness import describe, run_many, store_template
from tests.integration.test_cluster import assert_nothing_left

pytestmark = pytest.mark.slow

BINARY = ["dataset=custom", "dataset._target_=tests.userpkg.data.binary", "dataset.num_examples=256",
          "dataset.num_validation_examples=64", "dataset.per_replica_batch_size=16", "model=mlp",
          "model.hidden_units=[8]", "trainer.epochs=3"]
# The issue's overrides, exactly as a user types them.
ISSUE = ["loss=binary_crossentropy", "loss.from_logits=true", "trainer.metrics=[auc]", "optimizer=adamw",
         "schedule=cosine", "schedule.warmup_epochs=1", "callbacks=[early_stopping]"]
MIRRORED = ["strategy=mirrored", "devices.logical_cpus=2"]
MWMS = ["strategy=multi_worker_mirrored", "cluster=localhost", "cluster.workers=2"]
# The equivalence runs on 2 workers also serve the checks of a 2-worker run as a user sees it
# (formerly test_cluster.py's own MWMS/one_device pair of runs per trainer): ring all-reduce.
RING = ["communication=ring"]
PS = ["strategy=parameter_server", "cluster=localhost", "cluster.workers=2", "cluster.ps=1"]
# fit vs ctl: regression with noise (batch order matters), L2 on the linear model, and every
# optimizer piece that acts on the update. SGD, not Adam: Adam's step does not change when all
# gradients are scaled alike, so global_clipnorm would hardly act. This clip acts at every step
# (the final loss is 1.81 with it, 0.32 without, measured here).
EQUIVALENCE = ["strategy=one_device", "seed=7", "dataset.noise=0.1", "dataset.num_examples=64",
               "dataset.per_replica_batch_size=8", "trainer.epochs=3", "optimizer=sgd", "optimizer.momentum=0.9",
               "optimizer.learning_rate=0.05", "optimizer.weight_decay=0.01", "optimizer.global_clipnorm=0.05",
               "schedule=polynomial", "schedule.warmup_epochs=1", "schedule.warmup_start=0.005", LOG_MODEL]
# validation loss must fall by 10 to count: the first epoch sets the best, the second stops.
STOPS = [*BINARY, "trainer.epochs=4", "callbacks=[early_stopping]", "callbacks.early_stopping.min_delta=10"]

CLUSTER_RUNS = {"issue-mwms-ctl", "equivalence-mwms-ctl", "equivalence-mwms-fit", "equivalence-ps-ctl"}


# Over 60 s (105 s in a full run on 2 quiet cores, 109 s in a venv): eleven CLI runs, two at a
# time, four of them localhost clusters; every test of the module reads them, made once here.
@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("training")
    commands = {
        "issue-mirrored-fit": [*BINARY, *MIRRORED, *ISSUE],
        "issue-mirrored-ctl": [*BINARY, *MIRRORED, *ISSUE, "trainer=ctl"],
        "issue-mwms-ctl": [*BINARY, *MWMS, *ISSUE, "trainer=ctl", f"hydra.run.dir={root}/issue-mwms-ctl/job"],
        "equivalence-fit": EQUIVALENCE,
        "equivalence-ctl": [*EQUIVALENCE, "trainer=ctl"],
        "equivalence-mirrored-fit": [*EQUIVALENCE, *MIRRORED, "dataset.per_replica_batch_size=4"],
        "equivalence-mirrored-ctl": [*EQUIVALENCE, *MIRRORED, "dataset.per_replica_batch_size=4", "trainer=ctl"],
        "equivalence-mwms-ctl": [*EQUIVALENCE, *MWMS, *RING, "dataset.per_replica_batch_size=4", "trainer=ctl",
                                 f"hydra.run.dir={root}/equivalence-mwms-ctl/job"],
        "equivalence-mwms-fit": [*EQUIVALENCE, *MWMS, *RING, "dataset.per_replica_batch_size=4",  # tf-keras (keras=auto)
                                 f"hydra.run.dir={root}/equivalence-mwms-fit/job"],
        "equivalence-ps-ctl": [*EQUIVALENCE, *PS, "trainer=ctl"],
        "early-stop-fit": STOPS,
    }
    done = run_many(root, store_template(root / "template"), commands)
    for name in ("issue-mwms-ctl", "equivalence-mwms-ctl", "equivalence-mwms-fit"):
        done[name].job_dir = root / name / "job"
    return done


def _check_issue_run(done, epochs: int = 3) -> None:
    assert done.proc.returncode == 0 and done.run.info.status == "FINISHED", describe(done)
    params = done.run.data.params
    assert (params["loss.name"], params["loss.from_logits"], params["trainer.metrics"]) == \
        ("binary_crossentropy", "True", "['auc']")
    assert (params["schedule.name"], params["callbacks"]) == ("cosine", "early_stopping")
    stopped = done.run.data.tags.get("xpdist.stopped_early_at_epoch")
    last = int(stopped) if stopped else epochs
    for metric in ("loss", "auc", "val_loss", "val_auc", "learning_rate"):
        history = done.history(metric)
        assert [step for step, _ in history] == list(range(1, last + 1)), (metric, history)
    assert all(0 <= value <= 1 for _, value in done.history("auc") + done.history("val_auc"))
    rates = [value for _, value in done.history("learning_rate")]
    # 8 steps per epoch (256 / 32): the warmup's last step is 7/8 of the peak 1e-3, then cosine decay.
    assert rates[0] == pytest.approx(0.001 * 7 / 8, rel=1e-4), rates
    assert all(b < a for a, b in zip(rates[1:], rates[2:])), rates


@pytest.mark.parametrize("name", ["issue-mirrored-fit", "issue-mirrored-ctl"])
def test_the_issue_program_trains_under_mirrored(runs, name):
    _check_issue_run(runs[name])
    assert runs[name].run.data.params["num_replicas"] == "2"


@pytest.mark.cluster
def test_the_issue_program_trains_under_multi_worker_mirrored_on_localhost(runs):
    done = runs["issue-mwms-ctl"]
    _check_issue_run(done)
    assert (done.run.data.params["num_replicas"], done.run.data.params["cluster"]) == ("2", "localhost")
    assert_nothing_left(done.job_dir)


def test_fit_and_ctl_end_with_the_same_weights_with_warmup_clipping_and_weight_decay(runs):
    fit, ctl = runs["equivalence-fit"], runs["equivalence-ctl"]
    for done in (fit, ctl):
        assert done.run.info.status == "FINISHED", describe(done)
    assert fit.run.data.params["optimizer.global_clipnorm"] == "0.05"
    for metric, rel in (("learning_rate", 1e-6), ("loss", 1e-5)):
        got, want = ctl.history(metric), fit.history(metric)
        assert [s for s, _ in got] == [s for s, _ in want] == [1, 2, 3], metric
        assert [v for _, v in got] == pytest.approx([v for _, v in want], rel=rel), metric
    reference, weights = fit.weights(), ctl.weights()
    assert [w.shape for w in weights] == [w.shape for w in reference] and reference
    for got, want in zip(weights, reference):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", ["equivalence-mirrored-fit", "equivalence-mirrored-ctl",
                                  pytest.param("equivalence-mwms-ctl", marks=pytest.mark.cluster),
                                  pytest.param("equivalence-mwms-fit", marks=pytest.mark.cluster)])
def test_two_replicas_clip_the_summed_gradient_and_end_with_one_devices_weights(runs, name):
    # Clipping each replica's half before the sum ended at loss 1.23 here, one device at 1.81.
    done, reference = runs[name], runs["equivalence-fit"]
    assert done.run.info.status == "FINISHED", describe(done)
    assert (done.run.data.params["num_replicas"], done.run.data.params["global_batch_size"]) == ("2", "8")
    assert reference.run.data.params["global_batch_size"] == "8"  # the same global batch on one device
    assert [v for _, v in done.history("loss")] == pytest.approx([v for _, v in reference.history("loss")], rel=1e-5)
    for got, want in zip(done.weights(), reference.weights()):
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)


@pytest.mark.cluster
@pytest.mark.parametrize("name, keras", [("equivalence-mwms-ctl", "keras3"), ("equivalence-mwms-fit", "legacy")])
def test_two_localhost_workers_make_one_run_with_a_log_per_task_and_leave_nothing(runs, name, keras):
    """A 2-worker run as a user sees it: its params, an epoch logged once each, every task's log,
    and no task process or cluster port left. Model.fit under multi_worker_mirrored runs tf-keras
    (keras=auto); the custom loop, Keras 3."""
    done = runs[name]
    assert done.proc.returncode == 0 and done.run.info.status == "FINISHED", describe(done)
    params = done.run.data.params
    assert (params["cluster"], params["cluster.workers"], params["cluster.ps"]) == ("localhost", "2", "0")
    assert (params["keras"], params["num_replicas"], params["communication"]) == (keras, "2", "ring")
    assert [step for step, _ in done.history("loss")] == [1, 2, 3]
    assert {p.name for p in (done.job_dir / "logs").iterdir()} >= {"worker-0.log", "worker-1.log"}
    assert_nothing_left(done.job_dir)


@pytest.mark.cluster
def test_the_parameter_server_loop_trains_the_same_configuration_to_a_finite_loss(runs):
    done = runs["equivalence-ps-ctl"]
    assert done.run.info.status == "FINISHED", describe(done)
    params = done.run.data.params
    assert (params["strategy"], params["optimizer.global_clipnorm"], params["schedule.name"]) == \
        ("parameter_server", "0.05", "polynomial")
    losses = [v for _, v in done.history("loss")]
    assert len(losses) == 3 and all(np.isfinite(losses)), losses


def test_early_stopping_ends_the_run_finished_with_the_tag(runs):
    done = runs["early-stop-fit"]
    assert done.run.info.status == "FINISHED", describe(done)
    assert done.run.data.tags["xpdist.stopped_early_at_epoch"] == "2"
    assert [step for step, _ in done.history("val_loss")] == [1, 2]
