"""The advisor's settings, candidates, ranking and recommendation, without running anything."""

from __future__ import annotations

import sys

import pytest

from tests import zygote
from tests.helpers import xpdist_env
from xpdist.core.errors import ConfigError
from xpdist.advisor import advise
from xpdist.advisor import plan as advise_plan


def test_the_advisors_keys_are_split_from_the_runs_overrides():
    settings, overrides = advise_plan.parse(["budget_s=30", "model=cnn", "logical_cpus=[2]", "multi_process=true",
                                             "dataset=synthetic_images"])
    assert settings.budget_s == 30 and settings.logical_cpus == [2] and settings.multi_process
    assert overrides == ["model=cnn", "dataset=synthetic_images"]
    settings, _ = advise_plan.parse(["dataset.per_replica_batch_size=16"])
    assert settings.batch == 16  # the first round's batch; the candidates set it


@pytest.mark.parametrize("word,key", [("budget_s=0", "budget_s"), ("probe_epochs=1", "probe_epochs"),
                                      ("budget_s=soon", "budget_s"), ("logical_cpus=[1]", "logical_cpus"),
                                      ("strategy=mirrored", "strategy"), ("cross_ops=hierarchical", "cross_ops"),
                                      ("dataset.per_replica_batch_size=8,16", "dataset.per_replica_batch_size"),
                                      ("cluster.workers=2", "cluster.workers"), ("-m", "advise")])
def test_bad_advisor_input_names_the_key(word, key):
    with pytest.raises(ConfigError) as err:
        advise_plan.parse([word])
    assert err.value.key == key


def test_cpu_candidates_cover_every_one_process_strategy_then_batches_of_the_two_fastest():
    settings = advise_plan.Settings(batch=64, logical_cpus=[2, 4], multi_process=True)
    rows = []
    seen = []
    for candidate in advise_plan.candidates(settings, rows):
        seen.append(candidate.label)
        eps = {"default": 900.0, "mirrored": 1000.0}.get(candidate.strategy, 100.0) + (candidate.replicas == 4)
        rows.append({"label": candidate.label, "status": "FINISHED", "examples_per_sec": eps,
                     "replicas": candidate.replicas, "per_replica_batch": candidate.per_replica_batch,
                     "overrides": candidate.overrides})
    assert seen[:2] == ["default-b64", "one_device-b64"]
    assert "mirrored-hierarchical-2cpu-b64" in seen and "central_storage-4cpu-b64" in seen
    assert "multi_worker_mirrored-2workers-b64" in seen
    assert not any("nccl" in label for label in seen)  # no GPU: NCCL has no CPU kernel
    # the two fastest of round one (mirrored on 4 CPUs: hierarchical, then reduction_to_one_device) at 32 and 128
    assert seen[-4:] == ["mirrored-hierarchical-4cpu-b32", "mirrored-hierarchical-4cpu-b128",
                         "mirrored-reduction_to_one_device-4cpu-b32", "mirrored-reduction_to_one_device-4cpu-b128"]


def test_gpu_candidates_use_nccl_and_every_gpu():
    labels = [c.label for c in advise_plan.first_round(advise_plan.Settings(gpus=4), 32)]
    assert "mirrored-nccl-b32" in labels and not any("cpu" in label for label in labels)


def test_ranking_scaling_efficiency_and_recommendation():
    rows = [
        {"label": "default-b64", "status": "FINISHED", "examples_per_sec": 1000.0, "replicas": 1,
         "per_replica_batch": 64, "overrides": ["strategy=default"], "first_step_s": 3.0},
        {"label": "mirrored-b64", "status": "FINISHED", "examples_per_sec": 1500.0, "replicas": 2,
         "per_replica_batch": 64, "overrides": ["strategy=mirrored", "devices.logical_cpus=2"], "first_step_s": 4.0},
        {"label": "central-b64", "status": "OOM", "examples_per_sec": None, "replicas": 2, "per_replica_batch": 64,
         "overrides": ["strategy=central_storage"]},
    ]
    ranked = advise_plan.rank(rows)
    assert [r["label"] for r in ranked] == ["mirrored-b64", "default-b64", "central-b64"]
    assert ranked[0]["scaling_efficiency"] == pytest.approx(0.75)
    answer = advise_plan.recommend(ranked, ["model=cnn"])
    assert answer["command"] == "python -m xpdist model=cnn strategy=mirrored devices.logical_cpus=2"
    assert "1.50x the best one-device probe" in answer["reason"] and "75%" in answer["reason"]


def test_out_of_memory_errors_are_told_apart():
    for text in ("ResourceExhaustedError: OOM when allocating tensor with shape[64,512,512]",
                 "the task was killed by SIGKILL (out of memory?)", "MemoryError"):
        assert advise._OOM.search(text)
    assert not advise._OOM.search("ValueError: shapes (3,) and (4,) are incompatible")


@pytest.mark.parametrize("words", [["budget_s=-1"], ["strategy=mirrored"], ["model=keras_app", "dataset=digits"],
                                   ["model=nosuch"]])
def test_bad_input_exits_2_with_one_line_and_no_store(tmp_path, words):
    done = zygote.run([sys.executable, "-m", "xpdist", "advise", *words], tmp_path, xpdist_env(), 120, kind="check")
    assert done.returncode == 2, done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("xpdist: error: ")
    assert not (tmp_path / "mlflow.db").exists() and not (tmp_path / "advise").exists()


# 96 examples: 2 replicas of 64 are more than the data.
SMALL = ["model=cnn", "model.filters=[8]", "dataset=synthetic_images", "dataset.image_shape=[16,16,3]",
         "dataset.num_examples=96"]


def test_a_candidate_preflight_refuses_is_found_without_a_process(tmp_path):
    """What the probe's own driver would refuse (exit 2) is found by the advisor: the row says
    REJECTED with the same one line, and no probe process is started for it."""
    assert advise._refusal([*SMALL, "strategy=one_device", "trainer.epochs=3"], tmp_path) is None
    refused = advise._refusal([*SMALL, "strategy=mirrored", "devices.logical_cpus=2"], tmp_path)
    assert refused.startswith("dataset.per_replica_batch_size=64") and "96" in refused, refused
    assert advise._refusal([*SMALL, "strategy=nosuch"], tmp_path).startswith("strategy")


def test_a_recommendation_from_probe_epochs_of_few_steps_says_so():
    rows = [{"label": "mirrored-b64", "status": "FINISHED", "examples_per_sec": 9000.0, "replicas": 2,
             "per_replica_batch": 64, "global_batch": 128, "overrides": ["strategy=mirrored"]}]
    few = advise_plan.recommend(advise_plan.rank(rows), [], advise_plan.Settings(num_train=256))
    assert "2 steps, too few" in few["reason"]
    enough = advise_plan.recommend(advise_plan.rank(rows), [], advise_plan.Settings(num_train=2048))
    assert "too few" not in enough["reason"]


def test_probes_trace_steps_of_one_epoch_more_where_it_is_long_enough():
    one = advise_plan.Candidate("one_device-b32", "one_device", ["strategy=one_device"], 1, 32)
    two = advise_plan.Candidate("mirrored-b32", "mirrored", ["strategy=mirrored"], 2, 32)
    ps = advise_plan.Candidate("parameter_server-b32", "parameter_server", ["strategy=parameter_server"], 2, 32)
    # 10 steps an epoch, 3 probe epochs: the 4th epoch's steps 2 to 4, i.e. steps 32 to 34 of the run
    assert advise_plan.probe_length(one, advise_plan.Settings(num_train=320)) == [
        "trainer.epochs=4", "trainer.profile_steps=[32,34]"]
    assert advise_plan.probe_length(two, advise_plan.Settings(num_train=320)) == ["trainer.epochs=3"]  # 5 steps
    assert advise_plan.probe_length(two, advise_plan.Settings(probe_steps=8, probe_epochs=2)) == [
        "trainer.epochs=3", "trainer.profile_steps=[18,20]"]
    assert advise_plan.probe_length(one, advise_plan.Settings()) == ["trainer.epochs=3"]  # steps unknown
    assert advise_plan.probe_length(ps, advise_plan.Settings(probe_steps=50)) == ["trainer.epochs=3"]  # a coordinator


def test_a_step_that_waits_on_input_or_talks_is_named_in_the_recommendation():
    assert advise_plan.why_slow({"input_wait_fraction": 0.62, "communication_fraction": 0.1}).startswith(
        "62% of the step waits on input: raise dataset.prefetch")
    assert advise_plan.why_slow({"input_wait_fraction": 0.1, "communication_fraction": 0.45}).startswith(
        "45% of the step is communication")
    assert advise_plan.why_slow({"input_wait_fraction": 0.1, "communication_fraction": 0.1}) == ""
    assert advise_plan.why_slow({}) == ""  # not traced
    rows = [{"label": "mirrored-b64", "status": "FINISHED", "examples_per_sec": 900.0, "replicas": 2,
             "per_replica_batch": 64, "overrides": ["strategy=mirrored"], "input_wait_fraction": 0.7}]
    answer = advise_plan.recommend(advise_plan.rank(rows), [])
    assert "; even so, 70% of the step waits on input" in answer["reason"]


def test_the_report_shows_an_out_of_memory_candidate_and_mfu_where_known(tmp_path):
    import csv

    from xpdist.advisor import report as advise_report

    rows = [{"label": "a-b8", "status": "FINISHED", "examples_per_sec": 100.0, "replicas": 1, "per_replica_batch": 8,
             "overrides": ["strategy=default"], "mfu": 0.123, "achieved_flops_per_sec": 1e9, "probe_s": 3.0},
            {"label": "b-b8", "status": "OOM", "examples_per_sec": None, "replicas": 2, "per_replica_batch": 8,
             "overrides": ["strategy=mirrored"], "error": "ResourceExhaustedError: OOM when allocating", "probe_s": 2.0}]
    ranked = advise_plan.rank(rows)
    answer = advise_plan.recommend(ranked, ["model=cnn"])
    shown = advise_report.text(ranked, answer)
    assert "12.3%" in shown and "b-b8: ResourceExhaustedError" in shown
    md, table, chart = advise_report.write(ranked, answer, tmp_path)
    assert "| mfu |" in md.read_text() and chart.stat().st_size > 0
    with table.open() as handle:
        assert [r["status"] for r in csv.DictReader(handle)] == ["FINISHED", "OOM"]
