"""`python -m xpdist --check`: every preflight check and the plan, without TensorFlow, a run or a store."""

from __future__ import annotations

import io

import pytest

from tests.unit.test_cli import assert_rejected
from tests.unit.unit_helpers import plain
from xpdist.core.errors import ConfigError
from xpdist.driver.checks import check
from xpdist.driver.processes import standby


def test_the_plan_of_a_config_that_can_run(tmp_path):
    out = io.StringIO()
    cfg = plain("strategy=mirrored", "cross_ops=hierarchical", "devices.logical_cpus=2", "optimizer.lr_scaling=linear")
    plan = check.run(cfg, tmp_path, out=out)
    lines = out.getvalue().splitlines()
    assert lines[0] == "ok"
    text = out.getvalue()
    assert "mirrored (cross_ops=hierarchical)" in text and "2 on /cpu:0, /cpu:1" in text
    assert f"global batch:  {plan.global_batch_size} (5 per replica x 2)" in text
    assert f"learning rate: {plan.learning_rate:g} (optimizer.lr_scaling=linear)" in text
    assert f"{plan.steps_per_epoch} per epoch x 2 epochs = {plan.steps_per_epoch * 2}" in text
    assert "cluster=local: one task process on this machine" in text
    assert f"sqlite:///{tmp_path / 'mlflow.db'}" in text
    assert not (tmp_path / "mlflow.db").exists()


def test_a_multi_worker_plan_says_where_its_tasks_run(tmp_path):
    out = io.StringIO()
    check.run(plain("strategy=parameter_server", "cluster=localhost", "cluster.workers=2", "cluster.ps=1",
                    "trainer=ctl"), tmp_path, out=out)
    assert "cluster=localhost: a chief, 2 worker(s) and 1 parameter server(s), each a process on 127.0.0.1" \
        in out.getvalue()


def test_a_config_preflight_refuses_is_refused_by_check_too(tmp_path):
    with pytest.raises(ConfigError) as err:
        check.run(plain("cross_ops=hierarchical"), tmp_path, out=io.StringIO())
    assert err.value.key == "cross_ops"


def test_the_flag_is_taken_out_and_hydra_told_to_write_nothing(monkeypatch):
    monkeypatch.setattr(check._State, "enabled", False)
    assert check.take_flag(["strategy=mirrored"]) == ["strategy=mirrored"] and not check.enabled()
    argv = check.take_flag(["strategy=mirrored", "--check", "seed=1"])
    assert check.enabled() and argv == ["strategy=mirrored", "seed=1", *check.QUIET_HYDRA]
    with pytest.raises(ConfigError) as err:
        check.take_flag(["-m", "--check", "strategy=mirrored,one_device"])
    assert err.value.key == "--check"


def test_check_starts_no_standby_task(monkeypatch):
    started = []
    monkeypatch.setattr(standby, "_spawn", lambda: started.append(True))
    standby.start(["--check", "strategy=mirrored"])
    assert started == []
    standby.start(["strategy=mirrored"])
    assert started == [True]


def test_the_cli_prints_ok_and_the_plan_and_creates_nothing(xpdist):
    proc = xpdist.run("--check", "strategy=mirrored", "devices.logical_cpus=2", timeout=120, fork="check")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines()[0] == "ok" and "replicas:      2 on /cpu:0, /cpu:1" in proc.stdout
    assert proc.stderr == ""
    assert sorted(p.name for p in xpdist.workdir.iterdir()) == []


def test_the_default_strategy_says_who_places_its_replica(xpdist):
    proc = xpdist.run("--check", timeout=120, fork="check")
    assert proc.returncode == 0, proc.stderr
    assert "  replicas:      1 on the devices TensorFlow picks\n" in proc.stdout


@pytest.mark.parametrize("overrides, key", [
    (["cross_ops=hierarchical"], "cross_ops"),
    (["tracking.register_model=bad/name:x"], "tracking.register_model"),
    (["strategy=mirrord"], "strategy"),
])
def test_the_cli_refuses_with_the_runs_own_line(xpdist, overrides, key):
    assert_rejected(xpdist, xpdist.run("--check", *overrides, timeout=120, fork="check"), key)
    assert sorted(p.name for p in xpdist.workdir.iterdir()) == []
