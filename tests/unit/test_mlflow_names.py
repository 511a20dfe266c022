"""MLflow's naming rules, checked at preflight: the same verdicts as MLflow's own validators.

xpdist/tracking/names.py copies the rules of mlflow/utils/validation.py (whose functions are
private and slow to import); these tests hold the copy to the original on sample names, and
check the one line a bad name gets before anything runs.
"""

from __future__ import annotations

import pytest
from mlflow.exceptions import MlflowException
from mlflow.utils import validation

from tests.unit.test_bad_inputs import refusal
from xpdist.core.errors import ConfigError
from xpdist.tracking import names

MODEL_NAMES = ["digits", "my.model", "my model", "a-b_c", "bad/name:x", "a:b", "a/b", "./m", "..", "m/",
               " ", "x" * 300]
ALIASES = ["champion", "release-1", "prod_2", "v1 bad", "v1", "V12", "latest", "LATEST", "a.b", "é-1", "x" * 256]
EXPERIMENTS = ["xpdist", "", "team/project", "x" * 500, "x" * 501]


def _mlflow_accepts(*validators, name) -> bool:
    try:
        for validate in validators:
            validate(name)
    except MlflowException:
        return False
    return True


def _ours_accept(check, name) -> bool:
    try:
        check(name)
    except ConfigError:
        return False
    return True


@pytest.mark.parametrize("name", MODEL_NAMES)
def test_model_names_as_mlflow_judges_them(name):
    assert _ours_accept(names.check_model_name, name) == _mlflow_accepts(validation._validate_model_name, name=name)


@pytest.mark.parametrize("alias", ALIASES)
def test_aliases_as_mlflow_judges_them(alias):
    mlflow_verdict = _mlflow_accepts(validation._validate_model_alias_name,
                                     validation._validate_model_alias_name_reserved, name=alias)
    assert _ours_accept(names.check_alias, alias) == mlflow_verdict


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_experiment_names_as_mlflow_judges_them(name):
    assert _ours_accept(names.check_experiment, name) == _mlflow_accepts(validation._validate_experiment_name,
                                                                          name=name)


@pytest.mark.parametrize("overrides, says", [
    (["tracking.register_model=bad/name:x"],
     "tracking.register_model=bad/name:x: MLflow's model names cannot contain '/' or ':' (this one has '/' and "
     "':'). Use e.g. tracking.register_model=bad-name-x."),
    (["tracking.register_model=m", "tracking.model_alias='v1 bad'"],
     "tracking.model_alias=v1 bad: MLflow's aliases take letters, digits, '_' and '-' only, not ' '. "
     "Use e.g. tracking.model_alias=v1_bad."),
    (["tracking.register_model=m", "tracking.model_alias=v3"], "tracking.model_alias=v3: MLflow reserves v<number>"),
    (["tracking.experiment=''"], 'tracking.experiment="": MLflow needs an experiment name.'),
    (["tracking.experiment="], 'tracking.experiment="": MLflow needs an experiment name.'),
])
def test_a_name_mlflow_would_refuse_is_one_line_before_training(tmp_path, overrides, says):
    line = refusal(tmp_path, *overrides)
    assert line is not None and line.startswith(says), line
    assert "tracking.uri" not in line


def test_names_mlflow_takes_pass(tmp_path):
    assert refusal(tmp_path, "tracking.register_model=my.model", "tracking.model_alias=release-1",
                   "tracking.experiment=team/project") is None
