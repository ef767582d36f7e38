"""Services across two real nodes, as upstream's ``[sig-network] Services`` specs use them.

A cluster with two real nodes (untainted, no simulated ones) and the e2e images; a
server pod (agnhost netexec) on ``steward-node-1``, a client pod on ``steward-node-0``,
a NodePort Service before the server. Checked from the client, with the specs' own
commands: the ClusterIP, the Service's name and the NodePort on the node address answer
across the two bridges; the server sees the client's own pod address (no masquerade
between pods; "should preserve source pod IP for traffic thru service cluster IP"); a
port the Service does not serve, an address of the Service range no Service has, and
the Service once deleted are refused ("should be able to up and down services", "should
serve endpoints on same port and different protocols"), not answered by whatever the
machine's default route leads to; the machine itself still reaches the ClusterIP
through kube-proxy. After ``down`` none of the cluster's rules is left. Every address
is the cluster's (pods, Services) or this machine's own; needs root and the real nodes'
packages (``make node-packages``).
"""

from __future__ import annotations

import functools
import json
import os
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from steward import images
from steward.cluster import ClusterConfig, LocalCluster, binaries, nodes
from steward.cluster.progress import Progress
from tests.conftest import require_real_nodes

pytestmark = pytest.mark.integration

KUBECTL = str(Path(sys.executable).parent / "kubectl")
AGNHOST = "registry.k8s.io/e2e-test-images/agnhost:2.66.1"
UNUSED_SERVICE_IP = "10.96.0.250"
"""An address of the Service range (10.96.0.0/24) no Service of the test has."""


def kubectl(cluster: LocalCluster, *args: str, stdin: str | None = None) -> str:
    done = subprocess.run(
        [KUBECTL, "--kubeconfig", str(cluster.kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"kubectl {' '.join(args)}: {done.stderr.strip()}"
    return done.stdout


def in_client(cluster: LocalCluster, command: str) -> subprocess.CompletedProcess[str]:
    """``sh -c command`` in the client pod, as e2e's RunHostCmd does."""
    exec_ = [KUBECTL, f"--kubeconfig={cluster.kubeconfig}", "exec", "client", "--"]
    return subprocess.run(
        [*exec_, "sh", "-c", command],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    require_real_nodes()
    paths = binaries.resolve(("agnhost", "pause"), out=Progress(interval=15.0))
    archive = images.build_e2e_archive(
        agnhost_binary=paths["agnhost"], pause_binary=paths["pause"], out=Progress(quiet=True)
    )
    cfg = ClusterConfig(
        name=f"steward-test-services-{os.getpid()}",
        state_dir=tmp_path_factory.mktemp("services-cluster"),
        nodes=0,
        real_nodes=2,
        real_node_taint=False,
        node_images=(archive,),
        die_with_parent=True,
    )
    up = LocalCluster.up(cfg, progress=Progress(interval=15.0))
    try:
        yield up
    finally:
        if (up.directory / "state.json").exists():
            up.down(progress=Progress(quiet=True))


def _pod(name: str, node: str, args: list[str], labels: dict[str, str]) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "c", "image": AGNHOST, "args": args}],
        },
    }


@pytest.fixture(scope="module")
def service(cluster: LocalCluster) -> dict[str, str]:
    """The server, the client and the Service: their addresses."""
    server = _pod("server", "steward-node-1", ["netexec", "--http-port=80"], {"app": "server"})
    client = _pod("client", "steward-node-0", ["pause"], {})
    svc = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": "server"},
        "spec": {
            "type": "NodePort",
            "selector": {"app": "server"},
            "ports": [{"port": 80, "targetPort": 80}],
        },
    }
    manifest = {"apiVersion": "v1", "kind": "List", "items": [server, client, svc]}
    kubectl(cluster, "apply", "-f", "-", stdin=json.dumps(manifest))
    kubectl(cluster, "wait", "--for=condition=Ready", "pod/server", "pod/client", "--timeout=90s")
    pods = json.loads(kubectl(cluster, "get", "pods", "-o", "json"))["items"]
    ips = {p["metadata"]["name"]: p["status"]["podIP"] for p in pods}
    got = json.loads(kubectl(cluster, "get", "service", "server", "-o", "json"))
    node_ip = json.loads(kubectl(cluster, "get", "node", "steward-node-0", "-o", "json"))
    internal = [a["address"] for a in node_ip["status"]["addresses"] if a["type"] == "InternalIP"]
    return {
        "client": ips["client"],
        "server": ips["server"],
        "cluster_ip": got["spec"]["clusterIP"],
        "node_port": str(got["spec"]["ports"][0]["nodePort"]),
        "node_ip": internal[0],
    }


def _until(what: str, check: Callable[[], bool], timeout: float = 60.0) -> None:
    """kube-proxy applies a change within a second or two; wait for it."""
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, what
        time.sleep(1.0)


def _answers(cluster: LocalCluster, command: str) -> bool:
    return in_client(cluster, command).stdout == "server"


def test_services_answer_across_the_two_bridges(
    cluster: LocalCluster, service: dict[str, str]
) -> None:
    for target in (
        service["cluster_ip"],
        "server",
        f"{service['node_ip']}:{service['node_port']}",
    ):
        command = f"curl -g -q -s --max-time 15 --connect-timeout 2 http://{target}/hostname"
        _until(f"{target} answers", functools.partial(_answers, cluster, command))
    # The service jig's check (testEndpointReachability).
    jig = in_client(cluster, f"echo hostName | nc -v -t -w 2 {service['cluster_ip']} 80")
    assert jig.returncode == 0 and jig.stdout.strip(), jig.stderr


def test_the_server_sees_the_client_pod_address(
    cluster: LocalCluster, service: dict[str, str]
) -> None:
    seen = in_client(
        cluster, f"curl -g -q -s --connect-timeout 3 http://{service['cluster_ip']}/clientip"
    )
    assert seen.returncode == 0, seen.stderr
    assert seen.stdout.rsplit(":", 1)[0] == service["client"]
    assert service["client"].startswith("10.245.0.") and service["server"].startswith("10.245.1.")


def test_what_no_service_serves_is_refused(cluster: LocalCluster, service: dict[str, str]) -> None:
    for target in (f"{service['cluster_ip']}:8080", UNUSED_SERVICE_IP):
        done = in_client(cluster, f"curl -g -s --connect-timeout 2 http://{target}/")
        assert done.returncode != 0 and done.stdout == "", f"{target} answered: {done.stdout!r}"
    jig = in_client(cluster, f"echo hostName | nc -v -t -w 2 {UNUSED_SERVICE_IP} 80")
    assert jig.stdout.strip() == "", "an address no Service has is reachable"


def test_the_machine_still_reaches_the_cluster_ip(service: dict[str, str]) -> None:
    done = subprocess.run(
        ["curl", "-g", "-s", "--connect-timeout", "3", f"http://{service['cluster_ip']}/hostname"],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )
    assert (done.returncode, done.stdout) == (0, "server"), done.stderr


def test_a_deleted_service_is_down_and_down_leaves_no_rule(
    cluster: LocalCluster, service: dict[str, str]
) -> None:
    kubectl(cluster, "delete", "service", "server", "--wait=true")
    command = f"curl -g -s --connect-timeout 2 http://{service['cluster_ip']}/hostname"
    _until("the deleted Service is down", lambda: in_client(cluster, command).returncode != 0)
    assert in_client(cluster, command).stdout == ""
    rules = nodes.cluster_rules(cluster.directory, service_cidr="10.96.0.0/24")
    for table, *spec in rules:
        assert subprocess.run(["iptables", "-w", "-t", table, "-C", *spec]).returncode == 0
    cluster.down(progress=Progress(quiet=True))
    for table, *spec in rules:
        left = subprocess.run(["iptables", "-w", "-t", table, "-C", *spec], capture_output=True)
        assert left.returncode != 0, f"left after down: {table} {spec}"
