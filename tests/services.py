"""Real local services for tests: a SLURM cluster, PostgreSQL, an MLflow server, network namespaces.

Plain helpers (no tests, no fixtures) for conftest.py to wrap. Each is a context manager that
starts the service, yields what clients need, and at exit stops exactly what it started (by
PID) and removes its files, also when the body raises:

    with slurm_cluster() as env:              # {"SLURM_CONF": ..., "XPDIST_SLURM_DIR": ...}
        subprocess.run(["srun", "-n", "2", "hostname"], env={**os.environ, **env})
    with postgres() as uri:                    # postgresql://xpdist:PASS@127.0.0.1:PORT/mlflow
        with mlflow_server(uri, tmp_path / "artifacts") as tracking_uri:   # http://127.0.0.1:PORT
            MlflowClient(tracking_uri)
    with netns_hosts(2) as hosts:              # hosts[0].exec_argv([...]), hosts[0].cut(), ...
        with mlflow_server(uri, tmp_path / "a", host=hosts.bridge_address) as tracking_uri:
            ...                                # reachable from inside every namespace

They need root (and apt-get the first time, for slurm-wlm, munge, postgresql): otherwise they
raise ServiceUnavailable with the reason, which a fixture turns into a skip. A service that is
available but fails to start raises RuntimeError with the end of its log.

The URIs yielded are `str`s with a few attributes (`.pid`, `.state_dir`, `.log`) so that tests
can check that nothing is left behind. Network: everything binds 127.0.0.1 or addresses of the
namespaces and bridge that netns_hosts made; nothing else is ever contacted. Slurm clients must
always get SLURM_CONF (without it they look for the controller in DNS).
"""

from __future__ import annotations

import contextlib
import ipaddress
import os
import secrets
import shutil
import signal
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, Iterator, List, Optional, Sequence

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = REPO / "scripts"


class ServiceUnavailable(RuntimeError):
    """This machine cannot run the service (not root, no apt-get, no `ip netns`...)."""


class ServiceUri(str):
    """A URI that also records what serves it."""

    pid: Optional[int] = None  # the server's PID (for mlflow: its process group)
    state_dir: Optional[Path] = None
    log: Optional[Path] = None

    def __new__(cls, value: str, pid: Optional[int] = None, state_dir: Optional[Path] = None,
                log: Optional[Path] = None):
        obj = super().__new__(cls, value)
        obj.pid, obj.state_dir, obj.log = pid, state_dir, log
        return obj


# ---------------------------------------------------------------------------------------------
# small helpers

def pid_alive(pid: Optional[int]) -> bool:
    """True if pid runs and is not a zombie (PID 1 here reaps orphans late)."""
    if not pid:
        return False
    try:
        with open(f"/proc/{pid}/stat") as f:
            state = f.read().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state != "Z"


def port_open(host: str, port: int, timeout: float = 1.0) -> bool:
    with contextlib.suppress(OSError), socket.create_connection((host, port), timeout=timeout):
        return True
    return False


def free_port_base(count: int, tries: int = 50) -> int:
    """A port p with p to p + count - 1 all free now (for SlurmClusterResolver's consecutive ports)."""
    for _ in range(tries):
        base = free_port()
        if base + count - 1 > 65535:
            continue
        with contextlib.ExitStack() as held:
            try:
                for port in range(base, base + count):
                    s = held.enter_context(socket.socket())
                    s.bind(("", port))
            except OSError:
                continue
            return base
    raise RuntimeError(f"no {count} consecutive free ports found in {tries} tries")


def free_port() -> int:
    try:
        import portpicker  # type: ignore[import-not-found]

        return portpicker.pick_unused_port()
    except ImportError:
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            return s.getsockname()[1]


def _require_root(what: str) -> None:
    if os.geteuid() != 0:
        raise ServiceUnavailable(f"{what} needs root (running as uid {os.geteuid()})")


def _require_binaries_or_apt(what: str, binaries: Sequence[str]) -> None:
    if all(shutil.which(b) for b in binaries):
        return
    if shutil.which("apt-get") is None:
        missing = [b for b in binaries if not shutil.which(b)]
        raise ServiceUnavailable(f"{what}: {', '.join(missing)} missing and no apt-get to install them")


def _parse_exports(stdout: str) -> Dict[str, str]:
    env = {}
    for line in stdout.splitlines():
        if line.startswith("export ") and "=" in line:
            key, _, value = line[len("export "):].partition("=")
            env[key.strip()] = value.strip()
    return env


def _run_script(argv: Sequence[str], env: Dict[str, str], timeout: float, what: str) -> Dict[str, str]:
    proc = subprocess.run(list(argv), env={**os.environ, **env}, capture_output=True, text=True,
                          timeout=timeout)
    if proc.returncode != 0:
        raise RuntimeError(f"{what} failed (exit {proc.returncode}):\n{proc.stderr[-3000:]}")
    return _parse_exports(proc.stdout)


def _unique(prefix: str) -> str:
    return f"{prefix}{os.getpid()}-{secrets.token_hex(3)}"


# ---------------------------------------------------------------------------------------------
# SLURM

@contextlib.contextmanager
def slurm_cluster(up_timeout: float = 900) -> Iterator[Dict[str, str]]:
    """A single-node SLURM cluster (scripts/slurm_local.sh) of its own.

    Yields the environment clients need ({"SLURM_CONF": ..., "XPDIST_SLURM_DIR": ...}): pass it
    to every srun/sbatch/squeue/scontrol. The node has CPUs=8 with OverSubscribe=FORCE, JobRequeue
    is on and a requeued job starts again after about 10 s. No accounting: use squeue/scontrol.
    """
    _require_root("a SLURM cluster (slurmd starts jobs as their users)")
    _require_binaries_or_apt("a SLURM cluster", ["slurmctld", "slurmd", "munged", "srun"])
    script = str(SCRIPTS / "slurm_local.sh")
    env = {"XPDIST_SLURM_STATE": f"/tmp/{_unique('xpdist-slurm-state-')}"}
    try:
        exports = _run_script([script, "up"], env, up_timeout, "slurm_local.sh up")
        if "SLURM_CONF" not in exports:
            raise RuntimeError(f"slurm_local.sh up printed no SLURM_CONF: {exports}")
        yield exports
    finally:
        subprocess.run([script, "down"], env={**os.environ, **env}, capture_output=True, text=True,
                       timeout=120)


# ---------------------------------------------------------------------------------------------
# PostgreSQL

@contextlib.contextmanager
def postgres(port: Optional[int] = None, up_timeout: float = 900) -> Iterator[ServiceUri]:
    """A PostgreSQL server of its own on 127.0.0.1 (scripts/pg_local.sh) with an empty database.

    Yields its URI, postgresql://xpdist:PASSWORD@127.0.0.1:PORT/mlflow (.pid, .state_dir).
    SQLAlchemy 2 (and so MLflow) opens postgresql:// with psycopg 3: `pip install "psycopg[binary]"`.
    """
    _require_root("PostgreSQL (run as the `postgres` user)")
    if not list(Path("/usr/lib/postgresql").glob("*/bin/initdb")) and shutil.which("apt-get") is None:
        raise ServiceUnavailable("PostgreSQL: no server binaries and no apt-get to install them")
    script = str(SCRIPTS / "pg_local.sh")
    state = Path(f"/tmp/{_unique('xpdist-pg-')}")
    env = {"XPDIST_PG_STATE": str(state)}
    if port:
        env["XPDIST_PG_PORT"] = str(port)
    try:
        exports = _run_script([script, "up"], env, up_timeout, "pg_local.sh up")
        pid = int((state / "postgres.pid").read_text().strip())
        yield ServiceUri(exports["XPDIST_PG_URI"], pid=pid, state_dir=state, log=state / "postgres.log")
    finally:
        subprocess.run([script, "down"], env={**os.environ, **env}, capture_output=True, text=True,
                       timeout=120)


# ---------------------------------------------------------------------------------------------
# MLflow tracking server

@contextlib.contextmanager
def mlflow_server(backend_uri: str, artifacts_dir: os.PathLike | str, host: str = "127.0.0.1",
                  port: Optional[int] = None, up_timeout: float = 180) -> Iterator[ServiceUri]:
    """`mlflow server` (scripts/mlflow_server.sh --background) on host:port (a free port by default).

    Yields http://HOST:PORT (.pid: the server's process group, .log). To serve tasks inside
    network namespaces, pass host=hosts.bridge_address from netns_hosts(): that address is on
    the bridge every namespace is plugged into (MLflow's Host check admits private addresses).
    At exit the whole process group (mlflow, uvicorn and its workers) gets TERM, then KILL.
    """
    port = port or free_port()
    work = Path(tempfile.mkdtemp(prefix="xpdist-mlflow-"))
    pidfile, log = work / "mlflow.pid", work / "mlflow.log"
    script = str(SCRIPTS / "mlflow_server.sh")
    argv = [script, "--background", "--backend-store-uri", backend_uri,
            "--artifacts-destination", str(artifacts_dir), "--host", host, "--port", str(port),
            "--pidfile", str(pidfile), "--log", str(log), "--timeout", str(int(up_timeout))]
    try:
        exports = _run_script(argv, {}, up_timeout + 30, "mlflow_server.sh --background")
        pid = int(pidfile.read_text().strip())
        yield ServiceUri(exports["MLFLOW_TRACKING_URI"], pid=pid, state_dir=work, log=log)
    finally:
        if pidfile.exists():
            subprocess.run([script, "--stop", "--pidfile", str(pidfile)], capture_output=True, text=True,
                           timeout=60)
        shutil.rmtree(work, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# network namespaces

def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    proc = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if check and proc.returncode != 0:
        raise RuntimeError(f"ip {' '.join(args)}: {proc.stderr.strip()}")
    return proc


@dataclass
class NetnsHost:
    """One network namespace plugged into the bridge: its interface eth0 has `address`."""

    name: str
    address: str
    veth: str  # the root-namespace end of its cable (on the bridge)

    def exec_argv(self, argv: Sequence[str]) -> List[str]:
        """argv run inside this namespace."""
        return ["ip", "netns", "exec", self.name, *argv]

    def cut(self) -> None:
        """Unplugs this host: its cable goes down on the bridge side (both directions)."""
        _ip("link", "set", self.veth, "down")

    def restore(self) -> None:
        _ip("link", "set", self.veth, "up")

    def pids(self) -> List[int]:
        out = _ip("netns", "pids", self.name, check=False).stdout
        return [int(p) for p in out.split()]


class NetnsHosts(list):
    """The hosts (a list), plus the bridge joining them and its address (reachable from every host)."""

    def __init__(self, hosts: Sequence[NetnsHost], bridge: str, bridge_address: str, subnet: str):
        super().__init__(hosts)
        self.bridge, self.bridge_address, self.subnet = bridge, bridge_address, subnet


def _pick_subnet() -> ipaddress.IPv4Network:
    used = _ip("-4", "-o", "addr", "show").stdout + _ip("-4", "route", "show", "table", "all").stdout
    for _ in range(50):
        net = ipaddress.ip_network(f"10.213.{secrets.randbelow(254) + 1}.0/24")
        if f"10.213.{net.network_address.packed[2]}." not in used:
            return net
    raise ServiceUnavailable("no free 10.213.X.0/24 subnet")


def _kill_pids(pids: Sequence[int], grace: float = 5.0) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and any(pid_alive(p) for p in pids):
            time.sleep(0.05)
        if not any(pid_alive(p) for p in pids):
            return


@contextlib.contextmanager
def netns_hosts(n: int) -> Iterator[NetnsHosts]:
    """n network namespaces (xpd-XXXXXX-i) on one Linux bridge in the root namespace.

    Host i has address 10.213.X.(i+2)/24 on its eth0 (X random, a subnet not in use here), its
    loopback up, and no route beyond the subnet. The bridge has 10.213.X.1: the root namespace
    reaches every host through it, and a server bound to that address (e.g. mlflow_server(...,
    host=hosts.bridge_address)) is reachable from every host. At exit, processes still running
    in the namespaces are killed and every namespace, veth and the bridge are removed.
    """
    _require_root("network namespaces")
    if shutil.which("ip") is None:
        raise ServiceUnavailable("network namespaces: no `ip` command (iproute2)")
    if n < 1 or n > 200:
        raise ValueError("n must be in 1..200")
    suffix = secrets.token_hex(3)
    bridge = f"xpdb{suffix}"  # interface names are at most 15 characters
    namespaces: List[str] = []
    links: List[str] = []
    made_bridge = False
    try:
        net = _pick_subnet()
        addrs = list(net.hosts())
        bridge_addr = str(addrs[0])
        _ip("link", "add", bridge, "type", "bridge")
        made_bridge = True
        _ip("addr", "add", f"{bridge_addr}/{net.prefixlen}", "dev", bridge)
        _ip("link", "set", bridge, "up")
        hosts = []
        for i in range(n):
            ns, veth, peer = f"xpd-{suffix}-{i}", f"xpv{suffix}{i}", f"xpp{suffix}{i}"
            _ip("netns", "add", ns)
            namespaces.append(ns)
            _ip("link", "add", veth, "type", "veth", "peer", "name", peer)
            links.append(veth)
            _ip("link", "set", peer, "netns", ns)
            _ip("-n", ns, "link", "set", peer, "name", "eth0")
            address = str(addrs[i + 1])
            _ip("-n", ns, "addr", "add", f"{address}/{net.prefixlen}", "dev", "eth0")
            _ip("-n", ns, "link", "set", "lo", "up")
            _ip("-n", ns, "link", "set", "eth0", "up")
            _ip("link", "set", veth, "master", bridge)
            _ip("link", "set", veth, "up")
            hosts.append(NetnsHost(name=ns, address=address, veth=veth))
        yield NetnsHosts(bridge=bridge, bridge_address=bridge_addr, subnet=str(net), hosts=hosts)
    finally:
        errors = []
        for ns in namespaces:
            pids = [int(p) for p in _ip("netns", "pids", ns, check=False).stdout.split()]
            if pids:
                _kill_pids(pids)
            proc = _ip("netns", "del", ns, check=False)
            if proc.returncode != 0:
                errors.append(f"netns del {ns}: {proc.stderr.strip()}")
        for link in links:  # normally gone with its peer's namespace
            if _ip("link", "show", link, check=False).returncode == 0:
                _ip("link", "del", link, check=False)
        if made_bridge:
            proc = _ip("link", "del", bridge, check=False)
            if proc.returncode != 0:
                errors.append(f"link del {bridge}: {proc.stderr.strip()}")
        if errors:
            raise RuntimeError("netns_hosts cleanup: " + "; ".join(errors))
