"""The task imports TensorFlow and either Keras without Keras's optional integrations
(scikit-learn, pandas, matplotlib, IPython: 1.2-1.6 s of a 4.5 s import here), trains with
it, and can still import those packages afterwards (dataset=digits needs scikit-learn, the
MLflow model export pandas)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.slow

PROGRAM = """
import json, os, sys
from xpdist.task import boot

tf = boot.import_tensorflow(verbose=False)
skipped = [name for name in boot.KERAS_OPTIONAL if name in sys.modules]
keras = tf.keras
model = keras.Sequential([keras.Input(shape=(2,)), keras.layers.Dense(1)])
model.compile(optimizer="sgd", loss="mse")
history = model.fit(tf.data.Dataset.from_tensors(([[1.0, 2.0]], [[1.0]])).repeat(4), epochs=1, verbose=0)
import pandas, sklearn.datasets
print(json.dumps({"imported_with_tf": skipped, "keras": keras.__name__ if hasattr(keras, "__name__") else "",
                  "model": type(model).__module__, "loss": float(history.history["loss"][-1]),
                  "digits": len(sklearn.datasets.load_digits().target), "pandas": pandas.__name__}))
sys.stdout.flush()
os._exit(0)
"""


@pytest.mark.parametrize("legacy", ["0", "1"], ids=["keras3", "tf-keras"])
def test_keras_trains_without_its_optional_integrations(legacy, tmp_path):
    # TMPDIR: AutoGraph's source files, which the os._exit above keeps TensorFlow from deleting
    env = {"TF_USE_LEGACY_KERAS": legacy, "TF_CPP_MIN_LOG_LEVEL": "3", "TMPDIR": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=300,
                          env={**__import__("os").environ, **env})
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["imported_with_tf"] == [], f"imported with TensorFlow: {found['imported_with_tf']}"
    assert found["model"].startswith("tf_keras" if legacy == "1" else "keras")
    assert found["loss"] == found["loss"]  # trained: a number, not NaN
    assert found["digits"] == 1797 and found["pandas"] == "pandas"
