"""What a run records as params: the summary, and the keys of the options it used, nothing else.

Checked on composed configs through the same functions job.run uses (no TensorFlow, no run).
"""

from __future__ import annotations

import types

from pathlib import Path

import pytest
from hydra.utils import get_method
from omegaconf import OmegaConf

from tests.unit.unit_helpers import plain
from xpdist.core.plan import make_plan
from xpdist.task import models
from xpdist.tracking.params import SUMMARY_PARAMS, run_params


def params_of(*overrides: str) -> dict:
    cfg = plain(*overrides)
    return run_params(OmegaConf.to_container(cfg), make_plan(cfg, Path.cwd()))


def test_a_linear_run_logs_its_own_keys_only():
    params = params_of("model=linear")
    assert set(SUMMARY_PARAMS) <= set(params)
    assert params["model"] == "linear" and params["model.l2"] == "0.0001"
    assert not any(k.startswith(("model.filters", "model.hidden_units", "model.dropout", "model.kwargs"))
                   for k in params)
    assert "dataset.image_shape" not in params and "dataset.path" not in params
    # Groups that change nothing under the default strategy, and where the run is recorded.
    assert not any(k.startswith(("cross_ops.", "communication.", "tracking.")) for k in params)
    assert [k for k in params if k.startswith("cluster.")] == ["cluster._target_"]  # xpdist's own engine: none
    assert "model.name" not in params and params["optimizer.name"] == "sgd"  # no summary param for optimizer
    assert params["seed"] == "42" and params["devices.logical_cpus"] == "1"


def test_each_model_logs_the_keys_of_its_option():
    assert {k for k in params_of("model=cnn", "dataset=digits") if k.startswith("model.")} == \
        {"model.l2", "model.dropout", "model.filters"}
    assert {k for k in params_of("model=mlp") if k.startswith("model.")} == \
        {"model.l2", "model.dropout", "model.hidden_units"}
    assert {k for k in params_of("model=custom") if k.startswith("model.")} == {"model._target_", "model.kwargs"}


def test_cross_ops_keys_only_under_mirrored():
    params = params_of("strategy=mirrored", "cross_ops=hierarchical", "devices.logical_cpus=2")
    assert params["cross_ops"] == "hierarchical" and params["cross_ops.num_packs"] == "1"
    assert not any(k.startswith("communication.") for k in params)


def test_communication_and_cluster_keys_for_a_multi_worker_cluster():
    params = params_of("strategy=multi_worker_mirrored", "communication=ring", "cluster=localhost")
    assert params["communication"] == "ring" and params["communication.timeout_seconds"] == "none"
    assert (params["cluster"], params["cluster.workers"], params["cluster.ps"]) == ("localhost", "2", "0")
    assert not any(k.startswith("cross_ops.") for k in params)


def test_custom_model_gets_only_the_kwargs_given(tmp_path):
    """model._target_ of a user's own function: no kwargs of the example leak into the call."""
    # recording_model returns its arguments: a "Keras" whose Model is dict lets them through
    # custom()'s type check without TensorFlow.
    no_tf = types.SimpleNamespace(Model=dict)
    seen = models.custom(no_tf, plain("model=custom", "model._target_=tests.unit.unit_helpers.recording_model"), (4,), 3)
    assert seen == {"input_shape": (4,), "num_outputs": 3}
    seen = models.custom(no_tf, plain("model=custom", "model._target_=tests.unit.unit_helpers.recording_model",
                                     "+model.kwargs.units=8"), (4,), 3)
    assert seen == {"input_shape": (4,), "num_outputs": 3, "units": 8}
    assert get_method(plain("model=custom").model._target_) is models.example_custom_model


@pytest.mark.parametrize("group", ["model", "dataset", "strategy"])
def test_the_schema_names_exactly_the_options_the_task_dispatches_on(group):
    from xpdist.core.schema import OPTIONS
    from xpdist.task import data_sources, strategies

    registry = {"model": set(models.MODELS), "dataset": set(data_sources.SOURCES),
                "strategy": set(strategies.STRATEGIES)}[group]
    assert set(OPTIONS[group]) == registry
