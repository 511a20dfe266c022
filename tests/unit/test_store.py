"""Which store errors are retried: SQLite's busy answer, and two runs inserting the same data set."""

from __future__ import annotations

import sqlite3

import sqlalchemy
from mlflow.exceptions import INTERNAL_ERROR, MlflowException

from xpdist.tracking import store


def _duplicate_dataset_error() -> MlflowException:
    """The error MLflow raises when a parallel run inserted the same data set first: a real
    SQLite unique-key violation on a `datasets` table, wrapped as SqlAlchemyStore.log_inputs does."""
    engine = sqlalchemy.create_engine("sqlite://")
    with engine.begin() as conn:
        conn.execute(sqlalchemy.text("CREATE TABLE datasets (experiment_id, name, digest, "
                                     "PRIMARY KEY (experiment_id, name, digest))"))
        insert = sqlalchemy.text("INSERT INTO datasets VALUES (0, 'digits', 'abc')")
        conn.execute(insert)
        try:
            conn.execute(insert)
        except sqlalchemy.exc.IntegrityError as err:
            return MlflowException(err, INTERNAL_ERROR)
    raise AssertionError("the second insert was accepted")


def test_a_duplicate_dataset_insert_is_retried_only_when_logging_inputs():
    race = _duplicate_dataset_error()
    assert store._dataset_race(race)
    assert not store._sqlite_locked(race)  # other writes do not retry an integrity error
    locked = MlflowException(sqlalchemy.exc.OperationalError("INSERT", {}, sqlite3.OperationalError(
        "database is locked")), INTERNAL_ERROR)
    assert store._sqlite_locked(locked) and store._dataset_race(locked)
    assert not store._dataset_race(MlflowException("RESOURCE_DOES_NOT_EXIST: run 'x' not found"))


def test_log_inputs_links_a_dataset_another_run_already_logged(tmp_path, store_uri):
    uri = store_uri
    client = store.client(uri)
    experiment = store.ensure_experiment(client, "e", uri)
    dataset = dict(name="digits", digest="abc", source_type="local", source=str(tmp_path), schema="{}",
                   profile="{}", context="training")
    runs = [client.create_run(experiment).info.run_id for _ in range(2)]
    for run_id in runs:
        store.log_inputs(uri, run_id, [dataset])
    for run_id in runs:
        (logged,) = client.get_run(run_id).inputs.dataset_inputs
        assert logged.dataset.digest == "abc"
