"""docs/models.md holds: a run's model.keras, fetched from MLflow, loads the documented way and
gives one logit per class for inputs prepared as documented."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.helpers import LOG_MODEL, xpdist_env
from tests.integration.harness import describe, run_many, store_template

pytestmark = pytest.mark.slow

COMMON = ["dataset=digits", "model=mlp", "model.hidden_units=[16]", "trainer.epochs=1", LOG_MODEL]
RUNS = {"legacy": COMMON + ["keras=legacy"], "keras3": COMMON + ["keras=keras3"]}
# The docs' loading code, in a fresh process per Keras (TensorFlow picks its Keras once, at import).
PREDICT = """
import sys
import numpy as np
from sklearn.datasets import load_digits

how, path = sys.argv[1], sys.argv[2]
if how == "tf_keras":
    import tf_keras
    model = tf_keras.models.load_model(path)
else:
    import keras
    model = keras.models.load_model(path, compile=how == "keras_compile")
images = load_digits().images[:5, ..., None].astype("float32") / 16.0
logits = np.asarray(model.predict(images, verbose=0))
print("shape", logits.shape, "classes", logits.argmax(axis=1).tolist())
"""


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("models_doc")
    return run_many(root, store_template(root / "template"), RUNS)


@pytest.mark.parametrize("keras, how", [("legacy", "tf_keras"), ("legacy", "keras3_no_compile"),
                                        ("keras3", "keras_compile")])
def test_a_runs_model_loads_as_documented_and_outputs_logits(runs, tmp_path, keras, how):
    done = runs[keras]
    assert done.run.info.status == "FINISHED" and done.run.data.params["keras"] == keras, describe(done)
    path = done.client.download_artifacts(done.run.info.run_id, "model/model.keras", str(tmp_path))
    proc = subprocess.run([sys.executable, "-c", PREDICT, how, path], capture_output=True, text=True, timeout=180,
                          env=xpdist_env({"TF_CPP_MIN_LOG_LEVEL": "3"}))
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "shape (5, 10) classes" in proc.stdout  # a logit for each of the 10 digits
