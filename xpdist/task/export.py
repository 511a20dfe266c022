"""The final model in MLflow's format, so `mlflow.pyfunc.load_model("runs:/<id>/model")` predicts.

The chief writes the MLflow model into the job directory; the driver, which holds the run, logs
it as the run's `model` artifacts.

What writing it first costs is paid while training runs (Preload): importing MLflow and its
model flavour (about 1 s here) and, inside the first `save_model`, MLflow's one-time scan of the
installed packages behind its requirements check (about 0.3 s). Done after the last epoch,
as before, they were the 1.3-1.7 s between the last epoch and the result (measured with
the guide's cnn, 4 epochs of 4,096 examples, on 2 shared cores). Not before the first step:
the import competes with tracing for the interpreter lock.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable, List, Optional

# Rows of the input example stored with the model (and used to infer its signature).
EXAMPLE_ROWS = 5
# Seconds between two looks at whether training has begun, in the preload thread.
PRELOAD_POLL_S = 0.1
# The preload thread's niceness (Linux schedules threads alone): it imports on a core training
# leaves idle. At the process's own priority it took a core from training for 2-3 s and
# halved a short run's steady examples/sec (18,750 -> 9,036 here).
PRELOAD_NICENESS = 19


def requirements(ctx) -> List[str]:
    """The model's pip requirements, the versions this run trained with.

    Explicit: inferring them starts a process that imports TensorFlow again (more than a
    minute here).
    """
    import mlflow

    pinned = [f"tensorflow=={ctx.tf.__version__}", f"mlflow=={mlflow.__version__}"]
    if ctx.plan.keras == "legacy":
        import tf_keras

        return pinned + [f"tf-keras=={tf_keras.__version__}"]
    return pinned + [f"keras=={ctx.keras.__version__}"]


def _flavour(ctx):
    """MLflow's flavour for the run's Keras: mlflow.keras for Keras 3, mlflow.tensorflow for tf-keras."""
    if ctx.plan.keras == "legacy":
        import mlflow.tensorflow

        return mlflow.tensorflow
    import mlflow.keras

    return mlflow.keras


class Preload(threading.Thread):
    """Makes the export's first call cheap: once `began()` is true (training's first step
    is done), imports MLflow and the run's flavour and saves a throw-away pyfunc model with
    the run's requirements, an input example and a signature, through MLflow's public API, so
    that its lazy imports and its installed-package scan are done when the real model is saved.

    A failure here is ignored: save_mlflow_model does the same work again and reports it.
    """

    def __init__(self, ctx, began: Callable[[], bool]):
        super().__init__(name="xpdist-export-preload", daemon=True)
        self._ctx, self._began = ctx, began
        self._go = threading.Event()
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        while not self._began():
            if self._go.wait(PRELOAD_POLL_S):
                break
        with contextlib.suppress(OSError):  # this thread only: training keeps the cores first
            os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), PRELOAD_NICENESS)
        try:
            import mlflow.pyfunc
            import numpy as np
            from mlflow.models import infer_signature

            _flavour(self._ctx)

            def predict(self, context, model_input, params=None):
                return model_input

            # A type hint MLflow accepts without inferring a schema from it (the signature is
            # given); without one PythonModel warns, at class creation, on the task's output.
            # Set by hand: this module's annotations are strings MLflow would resolve in vain.
            predict.__annotations__ = {"model_input": np.ndarray}
            identity = type("Identity", (mlflow.pyfunc.PythonModel,), {"predict": predict})

            example = np.zeros((EXAMPLE_ROWS, 1), "float32")
            # MLflow's notes on this throw-away model (its pickling, its example's validation)
            # would reach the task's output: its logger is quiet meanwhile. Nothing else in the
            # task logs through MLflow before the export, which waits for this thread.
            quiet = logging.getLogger("mlflow")
            level = quiet.level
            quiet.setLevel(logging.ERROR)
            try:
                with tempfile.TemporaryDirectory(prefix="xpdist-preload-") as scratch:
                    mlflow.pyfunc.save_model(f"{scratch}/model", python_model=identity(),
                                             signature=infer_signature(example, example), input_example=example,
                                             pip_requirements=requirements(self._ctx))
            finally:
                quiet.setLevel(level)
        except Exception as err:  # noqa: BLE001  (see the class docstring)
            self.error = err

    def finish(self) -> None:
        """Returns once the preload is done, starting it now if training never said it began."""
        self._go.set()
        self.join()


def preload(ctx, began: Callable[[], bool]) -> Preload:
    """Starts the Preload thread of the run's export."""
    thread = Preload(ctx, began)
    thread.start()
    return thread


def save_mlflow_model(ctx, keras_file: Path, target: Path, preloaded: Optional[Preload] = None) -> None:
    """Saves the model of `keras_file` with the MLflow flavour of its Keras, with a signature
    and an input example taken from the training data.

    The model is read back from the saved .keras file rather than taken from the strategy:
    under multi_worker_mirrored saving reads variables through collectives that every worker
    must join, and the file holds what the run's `model/model.keras` artifact holds.

    Args:
        preloaded: the run's Preload thread, if one was started: waited for, when training
            ended before it did (what it is doing would be done here anyway).
    """
    if preloaded is not None:
        preloaded.finish()
    import numpy as np
    from mlflow.models import infer_signature

    flavour = _flavour(ctx)
    model = ctx.keras.models.load_model(str(keras_file), compile=False)
    if isinstance(ctx.arrays.x_train, np.ndarray):
        example = ctx.arrays.x_train[:EXAMPLE_ROWS].astype("float32")
    else:  # a streamed source (files, a user's function): an example of its shape, no extra pass
        example = np.zeros((EXAMPLE_ROWS, *model.input_shape[1:]), "float32")
    signature = infer_signature(example, model(example, training=False).numpy())
    shutil.rmtree(target, ignore_errors=True)  # a reused job directory
    # mlflow.keras.save_model writes its example before it makes the folder (mlflow/mlflow#16183).
    target.mkdir(parents=True)
    flavour.save_model(model, str(target), signature=signature, input_example=example,
                       pip_requirements=requirements(ctx))
