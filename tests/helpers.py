"""Helpers shared by every test tier: run the real CLI in a process of its own against a
temporary MLflow store (forked from a zygote that has imported the driver: tests/zygote.py),
compose the real config, pick a port.

Imported one way only, as `tests.helpers` (tests/ is a package); conftest.py holds fixtures.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from typing import List, Sequence

import portpicker

from tests import zygote

REPO = Path(__file__).resolve().parents[1]
# Small enough to train in seconds on 2 CPU cores. No MLflow model: writing it costs about a
# CPU-second a run (pyfunc, pandas); the tests that read the model or its weights ask for it
# with LOG_MODEL (test_strategies checks the export under every strategy and trainer).
TINY = ["trainer.epochs=2", "trainer.progress=false", "tracking.log_model=false"]
LOG_MODEL = "tracking.log_model=true"


def script_module(filename: str):
    """A script of scripts/ imported as a module, once per process (registered in sys.modules
    before it runs: a script's dataclasses look their module up there)."""
    name = "xpdist_scripts_" + Path(filename).stem
    if name not in sys.modules:
        spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / filename)
        sys.modules[name] = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(sys.modules[name])
    return sys.modules[name]


def xpdist_env(extra: dict | None = None) -> dict:
    env = dict(os.environ)
    env["PYTHONPATH"] = str(REPO) + os.pathsep + env.get("PYTHONPATH", "")
    env.pop("MLFLOW_TRACKING_URI", None)
    env.pop("TF_CONFIG", None)
    # Set and unset in os.environ by this process's own MLflow (its telemetry client), and read
    # by MLflow's import in a command: not the command's to inherit. A zygote recorded it as it
    # was when the zygote started, and refused the commands of a test made while it differed.
    env.pop("_MLFLOW_TELEMETRY_SESSION_ID", None)
    env.update(extra or {})
    return env


class Xpdist:
    """Runs `python -m xpdist` in a working directory of its own; its store is <dir>/mlflow.db."""

    def __init__(self, workdir: Path, env: dict | None = None):
        self.workdir = workdir
        self.uri = f"sqlite:///{workdir / 'mlflow.db'}"
        self.env = dict(env or {})  # every run's environment on top of xpdist_env's

    def run(self, *overrides: str, multirun: bool = False, timeout: float = 300, env: dict | None = None,
            tiny: bool = True, fork: str = "run") -> subprocess.CompletedProcess:
        """The command's exit code and output (subprocess.run's), from a process forked from a
        zygote that has imported what its driver imports (tests/zygote.py: why that is the same
        command): fork="run" (MLflow and the launchers too) for a command that trains, "check"
        (Python, Hydra and the driver only: a zygote that starts sooner) for one that ends
        before training (refused, --check, --cfg), "" for a real `subprocess.run`."""
        cmd: List[str] = [sys.executable, "-m", "xpdist"] + (["-m"] if multirun else [])
        cmd += (TINY if tiny else []) + list(overrides)
        env = xpdist_env({**self.env, **(env or {})})
        if fork:
            return zygote.run(cmd, self.workdir, env, timeout, kind=fork)
        return subprocess.run(cmd, cwd=self.workdir, env=env, capture_output=True, text=True, timeout=timeout)

    def client(self):
        from mlflow.tracking import MlflowClient

        return MlflowClient(tracking_uri=self.uri)

    def runs(self, experiment: str = "xpdist") -> list:
        client = self.client()
        exp = client.get_experiment_by_name(experiment)
        return [] if exp is None else client.search_runs([exp.experiment_id], order_by=["attributes.start_time ASC"])


def store_template(directory: Path) -> Path:
    """An empty, migrated MLflow SQLite store to copy into each run's directory: the CLI then
    opens it (about 1 s) instead of creating it (about 3 s of schema migrations)."""
    from mlflow.tracking import MlflowClient

    directory.mkdir(parents=True, exist_ok=True)
    MlflowClient(tracking_uri=f"sqlite:///{directory / 'mlflow.db'}").search_experiments()
    return directory / "mlflow.db"


def compose(overrides: Sequence[str] = (), config_name: str = "config"):
    """Composes the real config with its hydra node (no TensorFlow, no subprocess).

    Once per distinct override list in a test process (a compose costs 0.1 to 0.4 s, and the
    unit tests, the configuration page's check and the plain configs of unit_helpers ask for
    the same ones again); every call gets its own copy. Composition depends on nothing but
    the files and the overrides (no oc.env in conf/).
    """
    return copy.deepcopy(_composed(tuple(overrides), config_name))


@functools.lru_cache(maxsize=None)
def _composed(overrides: tuple, config_name: str):
    from hydra import compose as hydra_compose, initialize_config_dir

    _register_configs()
    with initialize_config_dir(config_dir=str(REPO / "conf"), version_base="1.3"), _each_config_read_once(), \
            _each_choice_of_groups_merged_once():
        return hydra_compose(config_name=config_name, overrides=list(overrides), return_hydra_config=True)


_READ: dict = {}


@contextlib.contextmanager
def _each_config_read_once():
    """Hydra reads every config of the defaults list again at each compose (a YAML file parsed,
    a schema node copied out of the ConfigStore): a sixth to a fifth of a compose's 0.1 s, and
    the unit tests compose 450-odd distinct override lists. While the tests' own composes run,
    what a config path reads to is kept, and each read gets a copy of it.

    Each compose also deep-copies the repository into a CachingConfigRepository, and with it
    every node of the ConfigStore (Hydra's own groups and the schema): a fifth of a compose,
    9 of the fast tier's 120 test-seconds. That copy is there so that the compose can change
    the repository's sources; nothing changes the store (a read from it is a copy), so the
    copy made here shares the store.

    Reaches inside Hydra (ConfigRepository.load_config, CachingConfigRepository.__init__), for
    the tests alone: Hydra caches a read for one compose only and has no public hook to keep
    it across composes (compose time: hydra-ecosystem/hydra#1543). The files under conf/ and
    the schema do not change while the tests run; the key holds the search path's sources.
    """
    from hydra._internal.config_repository import CachingConfigRepository, ConfigRepository
    from hydra.core.config_store import ConfigStore

    read, caching_init = ConfigRepository.load_config, CachingConfigRepository.__init__

    def load_config(self, config_path: str):
        key = (tuple(source.full_path() for source in self.get_sources()), config_path)
        if key not in _READ:
            _READ[key] = read(self, config_path)
        return copy.deepcopy(_READ[key])

    def init_sharing_the_store(self, delegate):  # Hydra's __init__, its deepcopy given the store
        store = ConfigStore.instance()
        self.delegate = copy.deepcopy(delegate, {id(store): store})
        self.cache = {}

    ConfigRepository.load_config = load_config
    CachingConfigRepository.__init__ = init_sharing_the_store
    try:
        yield
    finally:
        ConfigRepository.load_config, CachingConfigRepository.__init__ = read, caching_init


_DEFAULTS: dict = {}
_MERGED: dict = {}


@contextlib.contextmanager
def _each_choice_of_groups_merged_once():
    """A compose is two steps: the defaults list and the merge of its configs, which depend on the
    overrides that choose, add or delete a config group's option (`strategy=mirrored`); then the
    value overrides (`trainer.epochs=2`), applied to that merged config. The unit tests compose
    about 360 override lists with about 145 different choices of options, and the two first
    steps are nine tenths of a compose's 66 ms. While the tests' own composes run, both are kept
    per choice of options (and search path), and each compose gets a copy of them with its own
    value overrides; the value overrides are applied, checked and recorded in the hydra node by
    Hydra's own code, as before.

    An override is a value override by Hydra's own test (Overrides.__init__ in
    hydra/_internal/defaults_list.py: not a sweep, and a dict or not a config group); the
    others go to Hydra's create_defaults_list as given, so that its checks and errors are its
    own. Reaches inside Hydra (create_defaults_list as config_loader_impl imports it,
    ConfigLoaderImpl._compose_config_from_defaults_list), for the tests alone, for the reason
    of _each_config_read_once (hydra-ecosystem/hydra#1543). tests/unit/test_config.py checks
    that the kept steps compose what Hydra composes without them.
    """
    from hydra._internal import config_loader_impl
    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    defaults_list, merge = config_loader_impl.create_defaults_list, ConfigLoaderImpl._compose_config_from_defaults_list

    def sources(repo) -> tuple:
        return tuple(source.full_path() for source in repo.get_sources())

    def is_value(repo, override) -> bool:
        return not override.is_sweep_override() and (
            isinstance(override.value(), dict) or not repo.group_exists(override.key_or_group))

    def kept_defaults_list(repo, config_name, overrides_list, prepend_hydra, skip_missing):
        values, choices = [], []
        for override in overrides_list:
            (values if is_value(repo, override) else choices).append(override)
        key = (sources(repo), config_name, tuple(o.input_line for o in choices), prepend_hydra, skip_missing)
        if key not in _DEFAULTS:
            _DEFAULTS[key] = defaults_list(repo=repo, config_name=config_name, overrides_list=choices,
                                           prepend_hydra=prepend_hydra, skip_missing=skip_missing)
        found = copy.deepcopy(_DEFAULTS[key])
        found.config_overrides = found.overrides.config_overrides = values
        return found

    def kept_merge(self, defaults, repo):
        key = (sources(repo), repr(defaults))
        if key not in _MERGED:
            _MERGED[key] = merge(self, defaults=defaults, repo=repo)
        return copy.deepcopy(_MERGED[key])

    config_loader_impl.create_defaults_list, ConfigLoaderImpl._compose_config_from_defaults_list = \
        kept_defaults_list, kept_merge
    try:
        yield
    finally:
        config_loader_impl.create_defaults_list, ConfigLoaderImpl._compose_config_from_defaults_list = \
            defaults_list, merge


@functools.lru_cache(maxsize=None)
def _register_configs() -> None:
    """The schema into Hydra's ConfigStore, once per test process: storing its ~60 entries costs
    about a tenth of a second, a quarter of a compose, and nothing takes them out again."""
    from xpdist.core.schema import register_configs

    register_configs()


def closed_port() -> int:
    """A loopback port nothing listens on: portpicker's pick (bound, then released).

    Another process could take it before the test connects; the tests using it expect a
    refused connection, and a port picked from portpicker's range is rarely reused at once.
    """
    return portpicker.pick_unused_port()
