"""The real local services of tests/services.py come up, work, and go away leaving nothing.

Markers: slurm, postgres, netns. Each test skips (with the reason) where the service cannot run
here (not root, no apt-get). The first run may install Debian packages (slurm-wlm, munge,
postgresql). MLflow on PostgreSQL needs `psycopg[binary]` in this Python.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Dict, List

import pytest

from tests.services import (
    ServiceUnavailable,
    mlflow_server,
    netns_hosts,
    pid_alive,
    port_open,
    postgres,
    slurm_cluster,
)

pytestmark = pytest.mark.timeout(900)


def enter(stack: contextlib.ExitStack, cm):
    try:
        return stack.enter_context(cm)
    except ServiceUnavailable as e:
        pytest.skip(str(e))


def run(argv: List[str], env: Dict[str, str] | None = None, timeout: float = 60, check: bool = True,
        **kw) -> subprocess.CompletedProcess:
    proc = subprocess.run(argv, env={**os.environ, **(env or {})}, capture_output=True, text=True,
                          timeout=timeout, **kw)
    if check and proc.returncode != 0:
        raise AssertionError(f"{argv} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}")
    return proc


def wait_for(predicate, timeout: float, what: str, interval: float = 0.5):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


def group_alive(pgid: int) -> List[int]:
    """Live (non-zombie) processes of a process group."""
    alive = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            alive.append(int(entry.name))
    return alive


def job_field(env: Dict[str, str], job: str, name: str) -> str:
    out = run(["scontrol", "show", "job", job], env).stdout
    for token in out.split():
        if token.startswith(name + "="):
            return token.split("=", 1)[1]
    return ""


@pytest.mark.slurm
def test_slurm_cluster_runs_steps_jobs_and_requeues_then_goes_away(tmp_path):
    with contextlib.ExitStack() as stack:
        env = enter(stack, slurm_cluster())
        state = Path(env["XPDIST_SLURM_DIR"])
        pids = {n: int((state / f"{n}.pid").read_text()) for n in ("munged", "slurmctld", "slurmd")}
        assert all(pid_alive(p) for p in pids.values()), pids

        out = run(["srun", "-n", "2", "echo", "hi"], env).stdout.split()
        assert out == ["hi", "hi"]

        # Four one-task jobs run at once on this 2-core machine (CPUs=8, OverSubscribe=FORCE).
        jobs = [run(["sbatch", "--parsable", "-o", str(tmp_path / "j%j.out"), "--wrap", "sleep 4"],
                    env).stdout.strip() for _ in range(4)]
        wait_for(lambda: all(job_field(env, j, "JobState") == "RUNNING" for j in jobs), 30,
                 "4 jobs running together")
        wait_for(lambda: all(job_field(env, j, "JobState") == "COMPLETED" for j in jobs), 60,
                 "4 jobs completed")

        # A running batch job requeued by scontrol runs again (Restarts=1).
        marker = tmp_path / "starts"
        job = run(["sbatch", "--parsable", "-o", str(tmp_path / "rq.out"), "--wrap",
                   f"echo start$SLURM_RESTART_COUNT >> {marker}; sleep 60"], env).stdout.strip()
        wait_for(lambda: job_field(env, job, "JobState") == "RUNNING" and marker.exists(), 30,
                 "the job to run")
        run(["scontrol", "requeue", job], env)
        wait_for(lambda: job_field(env, job, "Restarts") == "1" and job_field(env, job, "JobState") == "RUNNING"
                 and len(marker.read_text().split()) == 2, 90, "the requeued job to run again")
        assert marker.read_text().split() == ["start", "start1"]
        # The job is still running when the cluster goes down: down cancels it.

    assert not any(pid_alive(p) for p in pids.values()), pids
    assert not state.exists()
    # No job process (sleep 60 under a slurmstepd) outlives the cluster.
    leftover = run(["pgrep", "-f", f"{marker}"], check=False).stdout.split()
    assert leftover == [], leftover


@pytest.mark.postgres
def test_postgres_answers_then_goes_away():
    import sqlalchemy

    with contextlib.ExitStack() as stack:
        uri = enter(stack, postgres())
        port = int(uri.rsplit(":", 1)[1].split("/")[0])
        engine = sqlalchemy.create_engine(uri)
        with engine.connect() as conn:
            assert conn.execute(sqlalchemy.text("SELECT 1")).scalar() == 1
        engine.dispose()
        assert pid_alive(uri.pid)
    assert not pid_alive(uri.pid)
    assert not port_open("127.0.0.1", port)
    assert not uri.state_dir.exists()


def log_and_read_back(tracking_uri: str, tmp: Path) -> str:
    """Logs a run with a metric, a param and an artifact through the server; reads them back."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri)
    experiment = client.create_experiment(f"services-{os.getpid()}-{time.time_ns()}")
    run_id = client.create_run(experiment).info.run_id
    client.log_metric(run_id, "loss", 0.25, step=3)
    client.log_param(run_id, "lr", "0.1")
    note = tmp / "note.txt"
    note.write_text("hello")
    client.log_artifact(run_id, str(note))
    client.set_terminated(run_id)
    got = client.get_run(run_id)
    assert got.data.metrics == {"loss": 0.25} and got.data.params == {"lr": "0.1"}
    assert got.info.status == "FINISHED"
    assert got.info.artifact_uri.startswith("mlflow-artifacts:/"), got.info.artifact_uri
    back = client.download_artifacts(run_id, "note.txt", str(tmp))
    assert Path(back).read_text() == "hello"
    return run_id


@pytest.mark.postgres
def test_mlflow_server_on_postgres_logs_and_goes_away(tmp_path):
    artifacts = tmp_path / "artifacts"
    with contextlib.ExitStack() as stack:
        uri = enter(stack, postgres())
        server = stack.enter_context(mlflow_server(uri, artifacts))
        port = int(server.rsplit(":", 1)[1])
        (tmp_path / "dl").mkdir()
        run_id = log_and_read_back(server, tmp_path / "dl")
        assert list(artifacts.rglob("note.txt")), "artifact not in --artifacts-destination"
        assert run_id in {p.name for p in artifacts.rglob("*")}
        group = server.pid
        assert group_alive(group)
    assert group_alive(group) == []
    assert not port_open("127.0.0.1", port)
    assert not server.state_dir.exists()
    assert not pid_alive(uri.pid)


# Runs inside a namespace: TCP echo server on (address, port), prints "ready" once listening.
ECHO_SERVER = textwrap.dedent("""
    import socket, sys
    s = socket.socket(); s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((sys.argv[1], int(sys.argv[2]))); s.listen()
    print("ready", flush=True)
    while True:
        c, _ = s.accept(); c.sendall(c.recv(100).upper()); c.close()
""")
# Runs inside a namespace: one TCP exchange with (address, port), within 2 s.
ECHO_CLIENT = textwrap.dedent("""
    import socket, sys
    c = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=2)
    c.sendall(b"ping"); print(c.recv(100).decode())
""")
# Runs inside a namespace: one ICMP echo to an address (no `ping` binary needed), within 2 s.
ICMP_PING = textwrap.dedent("""
    import os, socket, struct, sys
    def csum(b):
        s = sum(struct.unpack("!%dH" % (len(b) // 2), b)); s = (s >> 16) + (s & 0xffff); s += s >> 16
        return ~s & 0xffff
    hdr = struct.pack("!BBHHH", 8, 0, 0, os.getpid() & 0xffff, 1) + b"xpdist"
    pkt = hdr[:2] + struct.pack("!H", csum(hdr)) + hdr[4:]
    s = socket.socket(socket.AF_INET, socket.SOCK_RAW, socket.IPPROTO_ICMP); s.settimeout(2)
    s.sendto(pkt, (sys.argv[1], 0))
    while True:
        data, (src, _) = s.recvfrom(1024)
        if src == sys.argv[1] and data[20] == 0:
            print("pong", src); break
""")


@pytest.mark.netns
def test_netns_hosts_talk_until_cut_then_go_away():
    port = 7070
    with contextlib.ExitStack() as stack:
        hosts = enter(stack, netns_hosts(2))
        a, b = hosts
        names = {a.name, b.name}
        links = [a.veth, b.veth, hosts.bridge]
        assert names <= set(run(["ip", "netns", "list"]).stdout.split())

        assert "pong" in run(a.exec_argv([sys.executable, "-c", ICMP_PING, b.address]), timeout=10).stdout
        # The root namespace reaches a host through the bridge address.
        assert "pong" in run([sys.executable, "-c", ICMP_PING, a.address], timeout=10).stdout

        server = subprocess.Popen(b.exec_argv([sys.executable, "-u", "-c", ECHO_SERVER, b.address, str(port)]),
                                  stdout=subprocess.PIPE, text=True)
        assert server.stdout.readline().strip() == "ready"
        client = a.exec_argv([sys.executable, "-c", ECHO_CLIENT, b.address, str(port)])
        assert run(client, timeout=10).stdout.strip() == "PING"

        b.cut()
        failed = run(client, timeout=10, check=False)
        assert failed.returncode != 0 and ("timed out" in failed.stderr or "unreachable" in failed.stderr), failed
        b.restore()
        assert wait_for(lambda: run(client, timeout=10, check=False).stdout.strip() == "PING", 20,
                        "the link to come back")
        # The echo server is still running inside b: leaving the block must kill it.

    assert server.wait(10) is not None  # killed by netns_hosts' cleanup
    server.stdout.close()
    assert not names & set(run(["ip", "netns", "list"]).stdout.split())
    for link in links:
        assert run(["ip", "link", "show", link], check=False).returncode != 0, link


@pytest.mark.netns
@pytest.mark.postgres
def test_mlflow_server_on_bridge_serves_a_namespace(tmp_path):
    """The layout of multi-host tests: tracking server on the bridge address, client in a namespace."""
    with contextlib.ExitStack() as stack:
        hosts = enter(stack, netns_hosts(1))
        uri = enter(stack, postgres())
        server = stack.enter_context(mlflow_server(uri, tmp_path / "artifacts", host=hosts.bridge_address))
        assert server.startswith(f"http://{hosts.bridge_address}:")
        (tmp_path / "dl").mkdir()
        code = textwrap.dedent(f"""
            import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})
            from pathlib import Path
            from test_services import log_and_read_back
            print(log_and_read_back({str(server)!r}, Path({str(tmp_path / 'dl')!r})))
        """)
        out = run(hosts[0].exec_argv([sys.executable, "-c", code]), timeout=120,
                  env={"PYTHONPATH": str(Path(__file__).resolve().parents[2])}).stdout
        run_id = out.strip().splitlines()[-1]
        assert list((tmp_path / "artifacts").rglob(f"{run_id}/artifacts/note.txt"))
    assert group_alive(server.pid) == []
