"""The final model in MLflow's format, so `mlflow.pyfunc.load_model("runs:/<id>/model")` predicts.

MLflow is imported here only, after training: its import costs about 2 s that would
otherwise come before the first step. The chief writes the MLflow model into the job
directory; the driver, which holds the run, logs it as the run's `model` artifacts.
"""

from __future__ import annotations

import shutil
from pathlib import Path

# Rows of the input example stored with the model (and used to infer its signature).
EXAMPLE_ROWS = 5


def save_mlflow_model(ctx, keras_file: Path, target: Path) -> None:
    """Saves the model of `keras_file` with the MLflow flavour of its Keras, with a signature
    and an input example taken from the training data.

    The model is read back from the saved .keras file rather than taken from the strategy:
    under multi_worker_mirrored saving reads variables through collectives that every worker
    must join, and the file holds what the run's `model/model.keras` artifact holds.
    """
    import mlflow
    from mlflow.models import infer_signature

    keras, tf = ctx.keras, ctx.tf
    model = keras.models.load_model(str(keras_file), compile=False)
    import numpy as np

    if isinstance(ctx.arrays.x_train, np.ndarray):
        example = ctx.arrays.x_train[:EXAMPLE_ROWS].astype("float32")
    else:  # a streamed source (files, a user's function): an example of its shape, no extra pass
        example = np.zeros((EXAMPLE_ROWS, *model.input_shape[1:]), "float32")
    signature = infer_signature(example, model(example, training=False).numpy())
    # Explicit requirements: inferring them starts a process that imports TensorFlow again
    # (more than a minute here).
    requirements = [f"tensorflow=={tf.__version__}", f"mlflow=={mlflow.__version__}"]
    if ctx.plan.keras == "legacy":
        import tf_keras

        requirements.append(f"tf-keras=={tf_keras.__version__}")
        flavour = mlflow.tensorflow
    else:
        requirements.append(f"keras=={keras.__version__}")
        flavour = mlflow.keras
    shutil.rmtree(target, ignore_errors=True)  # a reused job directory
    target.mkdir(parents=True)  # mlflow.keras.save_model writes its example before making the folder
    flavour.save_model(model, str(target), signature=signature, input_example=example,
                       pip_requirements=requirements)
