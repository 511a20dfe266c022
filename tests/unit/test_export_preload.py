"""The export's preload (xpdist/task/export.py): MLflow's import and first-save costs paid
while training runs, never a hang or an error of its own at the end."""

import logging
import sys
import threading
import types
import warnings

import pytest

from xpdist.task import export

# Keras (and with it TensorFlow) and MLflow's model flavours are imported: about 10 CPU-s, too
# much for the fast tier, whose tests import neither.
pytestmark = pytest.mark.slow


def _ctx(**tf_attrs):
    import keras

    return types.SimpleNamespace(plan=types.SimpleNamespace(keras="keras3"), keras=keras,
                                 tf=types.SimpleNamespace(**tf_attrs))


def test_waits_for_training_then_saves_a_throwaway_model_with_the_runs_requirements():
    began = threading.Event()
    thread = export.preload(_ctx(__version__="2.21.0"), began.is_set)
    thread.join(timeout=0.5)
    assert thread.is_alive()  # training has not begun: nothing is imported on its behalf yet
    began.set()
    thread.join(timeout=120)
    assert not thread.is_alive() and thread.error is None
    assert "mlflow.pyfunc" in sys.modules and "mlflow.keras" in sys.modules


def test_finish_returns_when_training_never_said_it_began_and_mlflow_says_nothing_on_the_tasks_output():
    import mlflow  # noqa: F401  (its import sets up its logger, dropping handlers added before)

    said = []
    handler = logging.Handler()
    handler.emit = said.append
    logger = logging.getLogger("mlflow")  # MLflow's own handler writes to the task's stderr
    logger.addHandler(handler)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            thread = export.preload(_ctx(__version__="2.21.0"), lambda: False)
            thread.finish()
    finally:
        logger.removeHandler(handler)
    assert not thread.is_alive() and thread.error is None
    assert [str(w.message) for w in caught if "mlflow" in w.filename] == []
    assert [r.getMessage() for r in said] == []
    assert logger.level != logging.ERROR  # its level is given back


def test_a_failure_is_kept_for_the_export_to_meet_again_not_raised():
    thread = export.preload(_ctx(), lambda: True)  # no tf.__version__: requirements() fails
    thread.finish()
    assert isinstance(thread.error, AttributeError)
