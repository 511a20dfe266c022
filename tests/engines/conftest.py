"""Session fixtures for the engine tests: one SLURM cluster, one PostgreSQL with one MLflow
server, and network namespaces, each started once per session and stopped at its end.

Where this machine cannot start a service (not root, no apt-get, no `ip netns`), the tests
that need it skip with the reason (shown by `pytest -ra`, on by default here).
scripts/test.sh installs the Debian packages the services need on a fresh machine.
"""

from __future__ import annotations

import contextlib
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Optional

import pytest

from tests.conftest import xpdist_with_store
from tests.helpers import Xpdist
from tests.services import (
    SCRIPTS,
    ServiceUnavailable,
    mlflow_server,
    netns_hosts,
    postgres,
    slurm_cluster,
)


def _start(stack: contextlib.ExitStack, cm):
    try:
        return stack.enter_context(cm)
    except ServiceUnavailable as err:
        pytest.skip(str(err))


@pytest.fixture
def xpdist(request, tmp_path) -> Xpdist:
    """`python -m xpdist` in tmp_path, with a migrated store in place (see xpdist_with_store)."""
    return xpdist_with_store(request, tmp_path)


@pytest.fixture(scope="session")
def slurm_env():
    """The environment every SLURM client needs (SLURM_CONF): one cluster for the session."""
    with contextlib.ExitStack() as stack:
        yield _start(stack, slurm_cluster())


@pytest.fixture(scope="session")
def pg_uri():
    """postgresql://... of a PostgreSQL of this session's own."""
    with contextlib.ExitStack() as stack:
        yield _start(stack, postgres())


@pytest.fixture(scope="session")
def hosts():
    """Four network namespaces on one bridge (hosts.bridge_address reaches all of them)."""
    with contextlib.ExitStack() as stack:
        found = _start(stack, netns_hosts(4))
        yield found
        for host in found:  # a test that cut a link and failed must not break the next
            host.restore()


@dataclass
class Tracking:
    """The session's MLflow server on PostgreSQL, and what it takes to restart it in place."""

    uri: str
    backend: str
    artifacts: Path
    host: str
    port: int
    pidfile: Path

    def stop(self) -> None:
        """Stops the server's whole process group (mlflow, uvicorn and its workers)."""
        subprocess.run([str(SCRIPTS / "mlflow_server.sh"), "--stop", "--pidfile", str(self.pidfile)],
                       capture_output=True, text=True, timeout=60, check=True)

    def start(self) -> None:
        """Starts it again on the same address and port, with the same store."""
        argv = [str(SCRIPTS / "mlflow_server.sh"), "--background", "--backend-store-uri", self.backend,
                "--artifacts-destination", str(self.artifacts), "--host", self.host, "--port", str(self.port),
                "--pidfile", str(self.pidfile), "--log", str(self.pidfile.with_suffix(".log")), "--timeout", "180"]
        subprocess.run(argv, capture_output=True, text=True, timeout=210, check=True)

    def start_if_stopped(self) -> None:
        """Leaves the server up for the next test, whatever happened to this one."""
        if not self.pidfile.exists():
            self.start()


@pytest.fixture(scope="session")
def tracking(pg_uri, request) -> Tracking:
    """One MLflow server on the session's PostgreSQL.

    It binds the namespaces' bridge address where network namespaces work, so that tasks in
    them log to it too (the root namespace reaches that address as well), else 127.0.0.1.
    """
    host = "127.0.0.1"
    with contextlib.suppress(pytest.skip.Exception):
        host = request.getfixturevalue("hosts").bridge_address
    artifacts = Path(tempfile.mkdtemp(prefix="xpdist-artifacts-"))
    with mlflow_server(pg_uri, artifacts, host=host) as uri:
        port = int(uri.rsplit(":", 1)[1])
        yield Tracking(str(uri), pg_uri, artifacts, host, port, uri.state_dir / "mlflow.pid")
    subprocess.run(["rm", "-rf", str(artifacts)], check=False)


def slurm_client_env(slurm_env: Dict[str, str], extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """xpdist's test environment plus SLURM_CONF (without it clients look for a controller in DNS)."""
    from tests.helpers import xpdist_env

    return xpdist_env({**slurm_env, **(extra or {})})
