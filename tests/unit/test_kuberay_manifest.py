"""examples/kuberay/raycluster.yaml, checked as far as can be done without a Kubernetes API server.

The RayCluster is validated against the openAPIV3Schema of KubeRay's RayCluster CRD (vendored
in tests/data/kuberay/, with its release and commit), unknown fields rejected as `kubectl
apply`'s strict field validation rejects them. Then what the schema cannot say: the Ray and
Python of the images are those xpdist is installed and tested with, the head's ports are the
ones docs/clusters.md tells users to open, the token comes from a Secret, the NetworkPolicy
closes the cluster to other pods, and the command the docs give composes with xpdist's config.
The last test (marker ray) runs the `ray start` commands KubeRay builds from the two groups on
127.0.0.1 and checks that the worker joins the head.
"""

from __future__ import annotations

import contextlib
import copy
import gzip
import importlib.metadata
import json
import os
import re
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import tomllib
from pathlib import Path

import jsonschema
import psutil
import pytest
import yaml
from packaging.requirements import Requirement
from packaging.specifiers import SpecifierSet

from tests.helpers import REPO, compose, xpdist_env

KUBERAY = REPO / "examples" / "kuberay"
MANIFEST = KUBERAY / "raycluster.yaml"
SCHEMA = REPO / "tests" / "data" / "kuberay" / "rayclusters.ray.io-v1.schema.json.gz"
CLUSTERS_MD = REPO / "docs" / "clusters.md"
# The KubeRay how-to, beside its manifest; docs/clusters.md links it.
KUBERAY_README = KUBERAY / "README.md"
# The release whose CRD is vendored; docs/clusters.md names it.
KUBERAY_RELEASE, KUBERAY_COMMIT = "v1.7.0", "59d663aeec13760646da3db9c1cf8cfe883e30b7"


def documents():
    return [d for d in yaml.safe_load_all(MANIFEST.read_text()) if d]


def of_kind(kind: str) -> dict:
    found = [d for d in documents() if d["kind"] == kind]
    assert len(found) == 1, f"{MANIFEST.name} should hold one {kind}, holds {len(found)}"
    return found[0]


def strict(schema):
    """The schema with additionalProperties: false wherever it lists properties and keeps no
    unknown fields: what the API server's strict field validation (kubectl's default) does,
    which a plain JSON Schema validator would let pass."""
    schema = copy.deepcopy(schema)

    def walk(node):
        if isinstance(node, dict):
            if ("properties" in node and "additionalProperties" not in node
                    and not node.get("x-kubernetes-preserve-unknown-fields")):
                node["additionalProperties"] = False
            for value in node.values():
                walk(value)
        elif isinstance(node, list):
            for value in node:
                walk(value)

    walk(schema)
    return schema


@pytest.fixture(scope="module")
def validator():
    schema = strict(json.loads(gzip.decompress(SCHEMA.read_bytes())))
    jsonschema.Draft4Validator.check_schema(schema)
    return jsonschema.Draft4Validator(schema)


def errors(validator, cluster: dict):
    return [f"{'/'.join(map(str, e.absolute_path))}: {e.message}" for e in validator.iter_errors(cluster)]


def test_the_raycluster_is_valid_against_kuberays_crd(validator):
    cluster = of_kind("RayCluster")
    assert cluster["apiVersion"] == "ray.io/v1"
    assert errors(validator, cluster) == []


def test_the_operators_own_checks_pass():
    """What KubeRay v1.7's operator refuses when it reconciles (controllers/ray/utils/validation.go)
    and the CRD's schema lets pass: each rule this manifest could meet."""
    cluster = of_kind("RayCluster")
    name, spec = cluster["metadata"]["name"], cluster["spec"]
    assert len(name) <= 53 and re.fullmatch(r"[a-z]([-a-z0-9]*[a-z0-9])?", name)  # a DNS-1035 label
    assert not spec.get("enableInTreeAutoscaling")
    for group in spec["workerGroupSpecs"]:  # without autoscaling both bounds are required
        assert 0 <= group["minReplicas"] <= group["replicas"] <= group["maxReplicas"], group["groupName"]
    for group in [spec["headGroupSpec"], *spec["workerGroupSpecs"]]:
        assert group["template"]["spec"]["containers"] and "labels" not in group["rayStartParams"]
        assert not (group.get("resources") and {"num-cpus", "num-gpus", "memory", "resources"}
                    & set(group["rayStartParams"]))
    version = tuple(int(x) for x in spec["rayVersion"].split("."))
    assert spec["authOptions"]["mode"] == "token" and version >= (2, 52, 0)  # token auth's minimum
    assert not {"networkPolicy", "tlsOptions"} & set(spec)  # each behind a feature gate, off by default


@pytest.mark.parametrize("change, where", [
    (lambda c: c["spec"]["headGroupSpec"].update(rayStartParam={}), "headGroupSpec"),  # a misspelt key
    (lambda c: c["spec"]["authOptions"].update(mode="tokens"), "authOptions/mode"),
    (lambda c: c["spec"]["workerGroupSpecs"][0]["template"]["spec"]["containers"][0]["resources"]["limits"]
     .update(cpu="four"), "limits/cpu"),
    (lambda c: c["spec"]["workerGroupSpecs"][0].pop("groupName"), "workerGroupSpecs/0"),
])
def test_the_validation_rejects_what_the_api_server_would(validator, change, where):
    """The check is not vacuous: a misspelt key, a bad enum, a bad quantity, a missing field."""
    cluster = of_kind("RayCluster")
    change(cluster)
    found = errors(validator, cluster)
    assert any(where in e for e in found), found


def containers(cluster: dict):
    """(group, container) for the head's and every worker group's containers and init containers."""
    groups = [("head", cluster["spec"]["headGroupSpec"])]
    groups += [(g["groupName"], g) for g in cluster["spec"]["workerGroupSpecs"]]
    for name, group in groups:
        pod = group["template"]["spec"]
        for container in pod["containers"] + pod.get("initContainers", []):
            yield name, container


def ray_of_the_extra() -> str:
    """The installed Ray, checked against the range of pyproject's `ray` extra."""
    try:
        installed = importlib.metadata.version("ray")
    except importlib.metadata.PackageNotFoundError:
        pytest.skip("Ray is not installed (pip install 'xpdist[ray]'): nothing to compare the images with")
    extra = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]["ray"]
    (requirement,) = [Requirement(r) for r in extra if Requirement(r).name == "ray"]
    assert installed in requirement.specifier, (installed, str(requirement))
    return installed


def test_images_and_ray_version_are_the_ray_xpdist_is_installed_with():
    ray = ray_of_the_extra()
    cluster = of_kind("RayCluster")
    assert cluster["spec"]["rayVersion"] == ray
    requires = SpecifierSet(tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["requires-python"])
    dockerfile = (KUBERAY / "Dockerfile").read_text()
    (base,) = re.findall(r"^FROM (\S+)$", dockerfile, re.M)
    tag = re.fullmatch(r"rayproject/ray:(\d+\.\d+\.\d+)-py3(\d+)", base)
    assert tag and tag.group(1) == ray, base  # Ray's own image, tagged <ray>-py<python> as in KubeRay's samples
    python = f"3.{tag.group(2)}"
    assert python in requires, (python, str(requires))
    assert f'"ray[default]=={ray}"' in dockerfile  # the extra's range would take another Ray
    assert re.search(r'pip install .*"\$\(ls /tmp/xpdist-\*\.whl\)\[ray\]"', dockerfile)  # xpdist with its extra
    images = {c["image"] for _, c in containers(cluster)}
    assert images == {f"registry.example.com/xpdist-ray:{ray}-py3{tag.group(2)}"}, images  # one image, built there
    assert f"-t registry.example.com/xpdist-ray:{ray}-py3{tag.group(2)} examples/kuberay" in dockerfile


def test_every_container_has_cpu_and_memory_requests_and_limits():
    cluster = of_kind("RayCluster")
    for group, container in containers(cluster):
        resources = container.get("resources", {})
        for kind in ("requests", "limits"):
            assert {"cpu", "memory"} <= set(resources.get(kind, {})), (group, container["name"], kind)


def gcs_port_of_the_docs() -> int:
    """The GCS port docs/clusters.md starts the head with and tells users to open."""
    page = CLUSTERS_MD.read_text()
    (port,) = set(re.findall(r"ray start --head .*--port=(\d+)", page))
    assert f"allow the GCS port ({port} above)" in page
    return int(port)


def test_the_heads_ports_are_the_ones_the_docs_tell_users_to_open():
    cluster = of_kind("RayCluster")
    head = cluster["spec"]["headGroupSpec"]
    params = head["rayStartParams"]
    port = gcs_port_of_the_docs()
    assert params["port"] == str(port)
    (ray_head,) = head["template"]["spec"]["containers"]
    # The head's Service lists these: the GCS only, no dashboard (8265) and no Ray Client (10001).
    assert [(p["name"], p["containerPort"]) for p in ray_head["ports"]] == [("gcs-server", port)]
    # The dashboard runs code for whoever reaches it: inside the pod only (KubeRay binds 0.0.0.0).
    assert params["dashboard-host"] == "127.0.0.1" or params.get("include-dashboard") == "false"
    assert head.get("serviceType", "ClusterIP") == "ClusterIP" and not head.get("enableIngress")
    for _, group in [("head", head)] + [(g["groupName"], g) for g in cluster["spec"]["workerGroupSpecs"]]:
        pod = group["template"]["spec"]
        assert not pod.get("hostNetwork") and all("hostPort" not in p for c in pod["containers"]
                                                  for p in c.get("ports", []))
        assert "node-ip-address" not in group["rayStartParams"]  # KubeRay gives each pod its own


def test_the_network_policy_admits_only_the_clusters_own_pods():
    name = of_kind("RayCluster")["metadata"]["name"]
    policy = of_kind("NetworkPolicy")
    assert policy["apiVersion"] == "networking.k8s.io/v1"
    mine = {"ray.io/cluster": name}  # the label KubeRay puts on every pod of the cluster
    assert policy["spec"]["podSelector"] == {"matchLabels": mine}
    assert "Ingress" in policy["spec"]["policyTypes"]
    for rule in policy["spec"]["ingress"]:
        # any port: TensorFlow's task ports are free ports each node picks
        assert rule["from"] == [{"podSelector": {"matchLabels": mine}}] and "ports" not in rule, rule


def test_the_token_comes_from_a_secret_never_from_the_manifest():
    cluster = of_kind("RayCluster")
    auth = cluster["spec"]["authOptions"]
    assert auth["mode"] == "token" and auth["secretName"]
    assert not [d for d in documents() if d["kind"] == "Secret"]  # no Secret with a token in it
    for group, container in containers(cluster):
        for env in container.get("env", []):
            assert not env["name"].startswith("RAY_AUTH") or "value" not in env, (group, env)
    # The Secret the comments and the docs create: the name the manifest gives, key auth_token
    # (KubeRay's), a random value made on the spot.
    create = (f'kubectl create secret generic {auth["secretName"]} '
              '--from-literal=auth_token="$(openssl rand -base64 32)"')
    assert create in MANIFEST.read_text() and create in KUBERAY_README.read_text()


def commands(text: str):
    """The `python -m xpdist` commands of a text, continuation lines joined, `#` dropped."""
    text = re.sub(r"\\\n[#\s]*", " ", text)
    return [shlex.split(line.split("python -m xpdist", 1)[1]) for line in text.splitlines()
            if "python -m xpdist " in line]


def kuberay_part_of_the_docs() -> str:
    page = KUBERAY_README.read_text()
    assert "(../examples/kuberay/README.md)" in CLUSTERS_MD.read_text()  # the user docs lead there
    return re.split(r"\n#{2,3} ", page.split("### Kubernetes: KubeRay", 1)[1], maxsplit=1)[0]


def test_the_command_is_the_docs_and_composes_with_cluster_ray():
    (in_manifest,) = commands(MANIFEST.read_text())
    (in_docs,) = commands(kuberay_part_of_the_docs())
    assert in_manifest == in_docs
    cfg = compose(in_manifest)
    assert cfg.cluster.name == "ray" and cfg.strategy.name == "multi_worker_mirrored", in_manifest
    assert cfg.cluster.address == "auto"  # the head's RAY_ADDRESS, set by KubeRay
    cluster = of_kind("RayCluster")
    (workers,) = cluster["spec"]["workerGroupSpecs"]
    assert cfg.cluster.placement.name == "spread" and cfg.cluster.workers <= workers["minReplicas"]  # a pod each
    cpus = quantity(workers["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"])
    assert cfg.cluster.cpus_per_task <= cpus
    assert cluster["spec"]["headGroupSpec"]["rayStartParams"]["num-cpus"] == "0"  # no task on the driver's pod
    kubectl = re.search(r"kubectl exec -it \"\$\(kubectl get pod -l ray.io/cluster=(\S+),ray.io/node-type=head "
                        r"-o name\)\" -c (\S+) --", kuberay_part_of_the_docs())
    assert kubectl and kubectl.groups() == (cluster["metadata"]["name"], "ray-head")


def test_the_docs_say_how_far_it_was_validated():
    part = " ".join(kuberay_part_of_the_docs().split())
    assert f"KubeRay {KUBERAY_RELEASE}" in part and KUBERAY_COMMIT[:7] in part
    assert "never applied to a Kubernetes cluster" in part
    assert KUBERAY_COMMIT in (REPO / "tests" / "data" / "kuberay" / "README.md").read_text()
    assert f"KubeRay {KUBERAY_RELEASE}" in MANIFEST.read_text()


# --- the groups' `ray start` commands, run ----------------------------------------------------

def quantity(value: str) -> int:
    """A Kubernetes quantity as KubeRay reads it for `ray start` (Quantity.Value(): rounded up)."""
    units = {"": 1, "Ki": 2 ** 10, "Mi": 2 ** 20, "Gi": 2 ** 30, "Ti": 2 ** 40, "k": 10 ** 3, "M": 10 ** 6,
             "G": 10 ** 9, "m": 1e-3}
    number, unit = re.fullmatch(r"(\d+(?:\.\d+)?)([A-Za-z]*)", str(value)).groups()
    return int(-(-float(number) * units[unit] // 1))


def ray_start_params(group: dict, head: bool) -> dict:
    """The parameters KubeRay v1.7 gives `ray start` for a group (pod.go: setMissingRayStartParams,
    generateRayStartCommand), the worker's --address left out."""
    params = dict(group["rayStartParams"])
    if head:
        params.setdefault("dashboard-host", "0.0.0.0")
    params.setdefault("metrics-export-port", "8080")
    params["block"] = "true"
    params.setdefault("dashboard-agent-listen-port", "52365")
    limits = group["template"]["spec"]["containers"][0]["resources"]["limits"]
    params.setdefault("num-cpus", str(quantity(limits["cpu"])))
    params.setdefault("memory", str(quantity(limits["memory"])))
    return params


def flags(params: dict) -> list:
    """convertParamMap: sorted; "true" alone is a switch, "false" drops it (bar three options)."""
    out = []
    for key in sorted(params):
        value = params[key]
        if value.lower() in ("true", "false") and key not in ("log-color", "include-dashboard",
                                                               "include-log-monitor"):
            out += [f"--{key}"] if value.lower() == "true" else []
        else:
            out.append(f"--{key}={value}")
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def on_this_machine(params: dict, temp: str) -> dict:
    """The same parameters with every port a free one of 127.0.0.1 (others' Ray may hold the
    defaults), the node's address and a temp dir of its own."""
    local = {k: str(free_port()) if k.endswith("port") else v for k, v in params.items()}
    if "dashboard-host" in params:
        local.update({"dashboard-port": str(free_port()), "ray-client-server-port": str(free_port())})
    local.update({"node-ip-address": "127.0.0.1", "temp-dir": temp, "disable-usage-stats": "true"})
    return local


def stop(procs, temps) -> None:
    """SIGKILL to each process group a `ray start --block` leads (these nodes hold nothing to
    save, and Ray's own shutdown on SIGTERM took over 12 s under load here); then no process of
    those temp dirs may be left."""
    for proc in procs:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
    deadline = time.monotonic() + 15
    while left := [p.pid for p in psutil.process_iter(["cmdline"])
                   if any(temp in " ".join(p.info["cmdline"] or []) for temp in temps)]:
        assert time.monotonic() < deadline, f"Ray processes left: {left}"
        time.sleep(0.5)


def session_logs(temp: str) -> str:
    """The last lines of the node's own logs (GCS, raylet, dashboard and its agent): why a node
    that never registered did not."""
    logs = Path(temp) / "session_latest" / "logs"
    names = ("gcs_server.err", "gcs_server.out", "raylet.err", "raylet.out", "dashboard.err", "dashboard_agent.err",
             "dashboard_agent.log")
    return "\n".join(f"--- {name}:\n" + "\n".join((logs / name).read_text(errors="replace").splitlines()[-15:])
                     for name in names if (logs / name).is_file())


class NodeDidNotStart(Exception):
    pass


def start_node(argv: list, env: dict, temp: str) -> subprocess.Popen:
    """`ray start --block ...` in a process group of its own; returns once Ray says it started,
    or fails with its output and its session's logs."""
    log = Path(temp) / "start.log"
    with open(log, "w") as out:
        proc = subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 90
    while "Ray runtime started" not in log.read_text():
        if proc.poll() is not None or time.monotonic() > deadline:
            stop([proc], [temp])
            raise NodeDidNotStart(f"{' '.join(argv[3:])}: {log.read_text()[-2000:]}\n{session_logs(temp)}")
        time.sleep(0.2)
    return proc


@pytest.mark.ray
@pytest.mark.slow  # real Ray processes: two nodes started and a driver
@pytest.mark.timeout(300)  # two tries at most (see below)
def test_the_groups_ray_start_commands_start_a_cluster_with_the_token():
    """The head (its dashboard on 127.0.0.1) and one pod of the worker group as KubeRay starts
    them, token auth on with a token in RAY_AUTH_TOKEN as KubeRay sets it: the worker node joins
    the head with its limits' CPUs."""
    ray_of_the_extra()
    cluster = of_kind("RayCluster")
    env = xpdist_env({"RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_urlsafe(32)})
    env.pop("RAY_ADDRESS", None)
    ray_start = [sys.executable, "-m", "ray.scripts.scripts", "start"]
    (workers,) = cluster["spec"]["workerGroupSpecs"]
    # The ports are picked free and released before Ray binds them, so another test's server may
    # take one meanwhile; a node that did not start gets one more try with fresh ports, and the
    # test fails with both attempts' logs if that one does not start either.
    first_try = None
    for _ in range(2):
        started, temps = [], [tempfile.mkdtemp(prefix="xk", dir="/tmp") for _ in range(2)]  # short: Ray's socket paths
        try:
            head = on_this_machine(ray_start_params(cluster["spec"]["headGroupSpec"], head=True), temps[0])
            address = f"127.0.0.1:{head['port']}"
            started.append(start_node(ray_start + ["--head"] + flags(head), env, temps[0]))
            worker = dict(on_this_machine(ray_start_params(workers, head=False), temps[1]), address=address)
            started.append(start_node(ray_start + flags(worker), env, temps[1]))
            query = ("import json, logging, ray\n"
                     f"ray.init(address={address!r}, logging_level=logging.ERROR)\n"
                     "print(json.dumps([len([n for n in ray.nodes() if n['Alive']]), ray.cluster_resources().get('CPU')]))")
            done = subprocess.run([sys.executable, "-c", query], env=env, capture_output=True, text=True, timeout=90)
            cpus = float(worker["num-cpus"])  # the head has none (num-cpus 0)
            assert done.stdout.strip().splitlines()[-1:] == [json.dumps([2, cpus])], done.stderr[-2000:]
            assert cpus == quantity(workers["template"]["spec"]["containers"][0]["resources"]["limits"]["cpu"])
            return
        except NodeDidNotStart as err:
            if first_try is not None:
                pytest.fail(f"first try: {first_try}\nsecond try: {err}")
            first_try = err
        finally:
            stop(started, temps)
            for temp in temps:
                shutil.rmtree(temp, ignore_errors=True)
