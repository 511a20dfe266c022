"""docs/models.md holds: a run's model.keras, fetched from MLflow, loads the documented way and
gives one logit per class for inputs prepared as documented."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.helpers import LOG_MODEL, xpdist_env
from tests.integration.harness import describe, run_many, store_template

pytestmark = pytest.mark.slow

COMMON = ["dataset=digits", "model=mlp", "model.hidden_units=[16]", "trainer.epochs=1", LOG_MODEL]
RUNS = {"legacy": COMMON + ["keras=legacy"], "keras3": COMMON + ["keras=keras3"]}
# The docs' loading code, in a fresh process per Keras package (TensorFlow picks its Keras once,
# at import): tf_keras loads the legacy run's model; Keras 3 loads both runs' models, one after
# the other in one process. Each load is `how` as the docs write it.
PREDICT = """
import json, sys
import numpy as np
from sklearn.datasets import load_digits

images = load_digits().images[:5, ..., None].astype("float32") / 16.0
for key, how, path in json.loads(sys.argv[1]):
    if how == "tf_keras":
        import tf_keras
        model = tf_keras.models.load_model(path)
    else:
        import keras
        model = keras.models.load_model(path, compile=how == "keras_compile")
    logits = np.asarray(model.predict(images, verbose=0))
    print("RESULT", json.dumps({"key": key, "shape": list(logits.shape), "classes": logits.argmax(axis=1).tolist()}),
          flush=True)
"""
CASES = [("legacy", "tf_keras"), ("legacy", "keras3_no_compile"), ("keras3", "keras_compile")]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("models_doc")
    return run_many(root, store_template(root / "template"), RUNS)


@pytest.fixture(scope="module")
def predicted(runs, tmp_path_factory):
    """{(keras, how): (exit code, stdout, stderr) of the process that loaded it, "shape" and "classes"}."""
    batches = {"tf_keras": [], "keras": []}
    for keras, how in CASES:
        done = runs[keras]
        if done.run.info.status != "FINISHED":
            continue
        path = done.client.download_artifacts(done.run.info.run_id, "model/model.keras",
                                              str(tmp_path_factory.mktemp(f"{keras}-{how}")))
        batches["tf_keras" if how == "tf_keras" else "keras"].append([f"{keras}/{how}", how, path])
    found = {}
    for batch in (b for b in batches.values() if b):
        proc = subprocess.run([sys.executable, "-c", PREDICT, json.dumps(batch)], capture_output=True, text=True,
                              timeout=300, env=xpdist_env({"TF_CPP_MIN_LOG_LEVEL": "3"}))
        results = {r["key"]: r for r in (json.loads(line[7:]) for line in proc.stdout.splitlines()
                                         if line.startswith("RESULT "))}
        for key, _, _ in batch:
            found[tuple(key.split("/"))] = {"proc": (proc.returncode, proc.stdout[-2000:], proc.stderr[-3000:]),
                                            **results.get(key, {})}
    return found


@pytest.mark.parametrize("keras, how", CASES)
def test_a_runs_model_loads_as_documented_and_outputs_logits(runs, predicted, keras, how):
    done = runs[keras]
    assert done.run.info.status == "FINISHED" and done.run.data.params["keras"] == keras, describe(done)
    found = predicted[(keras, how)]
    assert "shape" in found and found["proc"][0] == 0, found["proc"]
    assert found["shape"] == [5, 10], found  # a logit for each of the 10 digits
