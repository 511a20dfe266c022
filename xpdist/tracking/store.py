"""The MLflow store: runs created, tagged and closed, artifacts logged, SQLite's busy retried.

Only the driver and the report use it; task processes never import MLflow.
MLflow is imported inside the functions that need it, not at the top: `import mlflow` costs
about 2 s, and `python -m xpdist --cfg job`, --help and a rejected config never need it.
"""

from __future__ import annotations

import logging
import os
import subprocess
from pathlib import Path
from typing import Any, Callable, Dict, Iterable, Optional, TypeVar

import tenacity

from xpdist.core.protocol.outcome import Status

T = TypeVar("T")
# Tag holding the one-line error of a FAILED or KILLED run.
ERROR_TAG = "xpdist.error"
# MLflow's own limit on entries per log_batch call.
_BATCH_LIMIT = 100

for _noisy in ("alembic", "mlflow.store.db.utils"):
    logging.getLogger(_noisy).setLevel(logging.WARNING)


class _Forks:
    owner: Optional[int] = None  # the process that guarded the pools; None: not yet guarded
    # Connections a forked process found in its pools: kept, never closed there (closing
    # PostgreSQL's would end the parent's session; SQLite's must not be touched after a fork).
    inherited: list = []


def fork_safe_connections() -> None:
    """A process forked from this one opens database connections of its own.

    MLflow keeps one SQLAlchemy engine per database URI for the whole process (SqlAlchemyStore's
    engine cache, mlflow/mlflow#12982), so a forked job (hydra/launcher=local_parallel) would
    take the sweep process's pooled SQLite or PostgreSQL connections. This is SQLAlchemy's own
    guard for pools that cross os.fork() ("Using Connection Pools with Multiprocessing or
    os.fork()"), on every pool: a connection remembers the process that opened it, and a
    checkout in another process sets it aside and opens a new one. Connections opened before
    the first call belong to the process that made it. Once per process.
    """
    if _Forks.owner is not None:
        return
    from sqlalchemy import event, exc
    from sqlalchemy.pool import Pool

    _Forks.owner = os.getpid()

    @event.listens_for(Pool, "connect")
    def _opened(_dbapi_connection, record) -> None:
        record.info["pid"] = os.getpid()

    @event.listens_for(Pool, "checkout")
    def _checked_out(_dbapi_connection, record, proxy) -> None:
        owner = record.info.setdefault("pid", _Forks.owner)
        if owner != os.getpid():
            _Forks.inherited.append(record.dbapi_connection)
            record.dbapi_connection = proxy.dbapi_connection = None
            raise exc.DisconnectionError(f"connection of process {owner} checked out in process {os.getpid()}")


def resolve_uri(configured: Optional[str], launch_dir: Path) -> str:
    """tracking.uri, else MLFLOW_TRACKING_URI, else sqlite:///<launch dir>/mlflow.db."""
    uri = configured or os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    return f"sqlite:///{(launch_dir / 'mlflow.db').resolve()}"


def _sqlite_locked(err: BaseException) -> bool:
    # MLflow wraps SQLAlchemy's OperationalError in an MlflowException: its message is the
    # only sign that SQLite was busy with another writer (parallel sweep jobs).
    return "database is locked" in str(err).lower()


# Up to 30 tries, a random exponential wait of at most 2 s between them.
_retrying = tenacity.Retrying(retry=tenacity.retry_if_exception(_sqlite_locked),
                              wait=tenacity.wait_random_exponential(multiplier=0.05, max=2.0),
                              stop=tenacity.stop_after_attempt(30), reraise=True)


def _dataset_race(err: BaseException) -> bool:
    # Two runs logging the same data set at once (parallel sweep jobs) both find it missing
    # and insert it: the second insert breaks the store's unique (experiment, name, digest).
    # The transaction is rolled back whole, and a second try finds the data set and links it.
    text = str(err).lower()
    return _sqlite_locked(err) or ("dataset" in text and ("unique constraint" in text or "duplicate key" in text))


_retrying_inputs = _retrying.copy(retry=tenacity.retry_if_exception(_dataset_race))


def retry(fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
    """Calls fn, retrying while SQLite answers "database is locked"."""
    return _retrying(fn, *args, **kwargs)


def client(uri: str):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def ensure_experiment(mlflow_client, name: str, uri: str) -> str:
    """Returns the id of experiment `name`, creating it (race-safe) if needed."""
    from mlflow.exceptions import MlflowException

    found = retry(mlflow_client.get_experiment_by_name, name)
    if found is not None:
        return found.experiment_id
    location = None
    if uri.startswith("sqlite:///"):
        # Artifacts beside the database rather than under whatever the current directory is.
        location = (Path(uri[len("sqlite:///"):]).parent / "mlruns").resolve().as_uri()
    try:
        return retry(mlflow_client.create_experiment, name, artifact_location=location,
                     tags={"mlflow.experimentKind": "custom_model_development"})
    except MlflowException:
        found = retry(mlflow_client.get_experiment_by_name, name)
        if found is None:
            raise
        return found.experiment_id


def git_commit(directory: Path) -> Optional[str]:
    try:
        out = subprocess.run(["git", "rev-parse", "HEAD"], cwd=directory, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def create_run(uri: str, experiment: str, name: str, params: Dict[str, str], tags: Dict[str, str],
               parent_run_id: Optional[str] = None) -> str:
    """Creates a RUNNING run with its params and tags; returns its id."""
    from mlflow.entities import Param

    mlflow_client = client(uri)
    experiment_id = ensure_experiment(mlflow_client, experiment, uri)
    all_tags = dict(tags)
    if parent_run_id:
        all_tags["mlflow.parentRunId"] = parent_run_id
    run = retry(mlflow_client.create_run, experiment_id, run_name=name, tags=all_tags)
    run_id = run.info.run_id
    items = sorted(params.items())
    for start in range(0, len(items), _BATCH_LIMIT):
        chunk = [Param(k, v) for k, v in items[start:start + _BATCH_LIMIT]]
        retry(mlflow_client.log_batch, run_id, params=chunk)
    return run_id


def set_tags(uri: str, run_id: str, tags: Dict[str, str]) -> None:
    from mlflow.entities import RunTag

    retry(client(uri).log_batch, run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])


def log_params(uri: str, run_id: str, params: Dict[str, str]) -> None:
    from mlflow.entities import Param

    retry(client(uri).log_batch, run_id, params=[Param(k, str(v)) for k, v in params.items()])


def terminate(uri: str, run_id: str, status: Status, error: Optional[str] = None) -> None:
    """Closes a run as FINISHED, FAILED or KILLED; an error message goes in ERROR_TAG."""
    mlflow_client = client(uri)
    if error:
        retry(mlflow_client.set_tag, run_id, ERROR_TAG, error[:5000])
    retry(mlflow_client.set_terminated, run_id, status)


def reopen(uri: str, run_id: str, tags_for: Callable[[Any], Dict[str, str]]) -> None:
    """Marks a closed run RUNNING again, without its old error, and tags it (a resumed or requeued run).

    Args:
        uri: the tracking URI.
        run_id: the run.
        tags_for: the tags to set, given the run as it was (its tags count earlier reopenings).
    """
    mlflow_client = client(uri)
    run = retry(mlflow_client.get_run, run_id)
    retry(mlflow_client.update_run, run_id, status=Status.RUNNING)
    if ERROR_TAG in run.data.tags:
        retry(mlflow_client.delete_tag, run_id, ERROR_TAG)
    set_tags(uri, run_id, tags_for(run))


def log_artifacts(uri: str, run_id: str, paths: Iterable[Path], artifact_path: Optional[str] = None) -> None:
    mlflow_client = client(uri)
    for path in paths:
        if path.is_dir():
            retry(mlflow_client.log_artifacts, run_id, str(path), artifact_path)
        elif path.exists():
            retry(mlflow_client.log_artifact, run_id, str(path), artifact_path)


def register_model(uri: str, run_id: str, artifact_path: str, name: str, alias: Optional[str] = None) -> str:
    """Registers runs:/<run_id>/<artifact_path> as a new version of `name`; points `alias` at it.

    The artifacts of an MLflow model logged with log_artifacts register as they are: no
    LoggedModel entity is needed (checked with MLflow 3.17). Returns the new version.
    """
    import mlflow

    mlflow.set_tracking_uri(uri)
    version = retry(mlflow.register_model, f"runs:/{run_id}/{artifact_path}", name).version
    if alias:
        retry(client(uri).set_registered_model_alias, name, alias, version)
    return str(version)


def ui_command(uri: str) -> str:
    """The command that opens the MLflow UI on this store, bound to loopback."""
    if uri.startswith(("http://", "https://")):
        return f"open {uri}"
    return f"mlflow ui --host 127.0.0.1 --port 5000 --backend-store-uri {uri}"


def log_inputs(uri: str, run_id: str, datasets: Iterable[dict]) -> None:
    """Records the run's data sets as mlflow.log_input does: a dataset entity and its context tag."""
    from mlflow.entities import Dataset, DatasetInput, InputTag
    from mlflow.utils.mlflow_tags import MLFLOW_DATASET_CONTEXT

    inputs = []
    for d in datasets:
        entity = Dataset(name=d["name"], digest=d["digest"], source_type=d["source_type"], source=d["source"],
                         schema=d["schema"], profile=d["profile"])
        inputs.append(DatasetInput(entity, tags=[InputTag(MLFLOW_DATASET_CONTEXT, d["context"])]))
    if inputs:
        _retrying_inputs(client(uri).log_inputs, run_id, datasets=inputs)
