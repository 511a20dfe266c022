"""A user's model function (model=custom): its errors name their cause, and it gets the run's Keras."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.integration.harness import describe, run_many, store_template

pytestmark = pytest.mark.slow

MODELS = "tests.integration.user_models"
RUNS = {
    "tf-error": ["model=custom", f"model._target_={MODELS}.reshape_error", "trainer.epochs=1"],
    # keras=auto picks tf-keras for Model.fit under central_storage: `import keras` is the wrong Keras.
    "imports-keras": ["model=custom", f"model._target_={MODELS}.imports_keras", "strategy=central_storage",
                      "devices.logical_cpus=2", "trainer.epochs=1"],
    "takes-keras-legacy": ["model=custom", f"model._target_={MODELS}.takes_keras", "strategy=central_storage",
                           "devices.logical_cpus=2", "trainer.epochs=1"],
}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("user_models")
    return run_many(root, store_template(root / "template"), RUNS)


def test_tf_error_shows_its_cause_and_the_traceback_file(runs, tmp_path):
    done = runs["tf-error"]
    assert done.proc.returncode == 1 and done.run.info.status == "FAILED", describe(done)
    error = done.run.data.tags["xpdist.error"]
    # The cause TensorFlow gives a few lines below its "Graph execution error:" header.
    assert re.fullmatch(r"InvalidArgumentError: Input to reshape is a tensor with \d+ values, but the requested "
                        r"shape has \d+ \(traceback: (/.+task_error\.txt)\)", error), error
    traceback_file = Path(re.search(r"\(traceback: (.+)\)$", error).group(1))
    assert traceback_file.is_file()
    assert "Graph execution error:" in traceback_file.read_text()
    assert f"xpdist task: {error}" in done.proc.stderr
    assert f"  error: {error}" in done.proc.stdout

    from xpdist.report import build

    report = build(done.xpdist.uri, tmp_path / "report", run_ids=[done.run.info.run_id])
    assert error in report.files["md"].read_text()


def test_a_keras_3_model_in_a_tf_keras_run_says_which_keras_and_how(runs):
    done = runs["imports-keras"]
    assert done.proc.returncode == 1 and done.run.info.status == "FAILED", describe(done)
    error = done.run.data.tags["xpdist.error"]
    assert error.startswith(f"TypeError: model._target_={MODELS}.imports_keras returned a Keras 3 Sequential, "
                            "but this run trains with tf-keras (keras=auto chooses it for strategy=central_storage "
                            "with trainer=fit). Give the function a `keras` parameter"), error
    assert done.proc.stdout.count(error) == 1


def test_a_model_function_gets_the_keras_of_the_run(runs):
    done = runs["takes-keras-legacy"]
    assert done.proc.returncode == 0 and done.run.info.status == "FINISHED", describe(done)
    assert done.run.data.params["keras"] == "legacy"
