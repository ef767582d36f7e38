"""Steward as pods on a real node, exactly as its users deploy it.

The package's cluster (``tests/pods/conftest.py``): three kwok nodes and one real node
(containerd, runc, a kubelet; kube-proxy and CoreDNS), Steward's images built without a
daemon and imported into the node; Steward's core (informer, manager, ReplicaSet and
Deployment controllers) the node's static pods, the other controllers the ``local``
overlay's Deployments (``steward cluster up --real-nodes 1 --steward-pods``, what ``make
up PODS=1`` runs). The checks are the process mode's, on pods: Ready through the
kubelet's own probes, mirror pods of the static core on the host network, mTLS with
projected tokens from the Deployments' pods to the core at the control-plane address, a
DaemonSet's pod run on the real node by Steward's DaemonSet controller, Endpoints and
EndpointSlices of a Service selecting the static informer written by Steward's
controllers (upstream's off), Jobs and Deployments driven to completion on kwok's nodes,
a deleted controller pod and a deleted mirror pod survived without a miscounted Job, a
rolling update of the Job controller without two active instances, a Job's trace in
Jaeger, a pod that really burns CPU on the real node measured by its kubelet and scaled
by Steward's HPA controller (with the metrics pipeline, ``ClusterConfig.metrics``).
``test_self_healing.py`` then breaks the same cluster harder, and ``test_teardown.py``
checks that ``down`` leaves the machine as it found it.

Needs root and Debian's runc, containerd, CNI plugins, mmdebstrap and umoci (``make
node-packages``); without them it skips, except in CI, where it fails.
"""

from __future__ import annotations

import contextlib
import json
import re
import ssl
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from decimal import Decimal
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest

from steward import static_core
from steward.cluster import LocalCluster, nodes, pods, usage
from steward.cluster.errors import ClusterError
from steward.cluster.registry import steward_controllers
from steward.kube import ApiError, KubeClient, load_access
from steward.security import ClientSecurity
from steward.v1 import manager_pb2, manager_pb2_grpc
from tests.controllers.disruption.scenarios import drain_blocked_then_allowed, masked
from tests.tracing import jaeger

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

NS = "steward"
NODE = "steward-node-0"
KUBECTL = str(Path(sys.executable).parent / "kubectl")
T = TypeVar("T")


# ----------------------------------------------------------------------------- helpers


def wait(what: str, check: Callable[[], T | None], timeout: float = 180.0) -> T:
    deadline = time.monotonic() + timeout
    last: Exception | None = None
    while time.monotonic() < deadline:
        try:
            value = check()
        except (ClusterError, OSError, grpc.RpcError) as err:
            last, value = err, None
        if value:
            return value
        time.sleep(0.5)
    pytest.fail(f"{what}: not within {timeout:.0f}s" + (f" (last error: {last})" if last else ""))


def kubectl(cluster: LocalCluster, *args: str, stdin: str | None = None, check: bool = True) -> str:
    done = subprocess.run(
        [KUBECTL, "--kubeconfig", str(cluster.kubeconfig), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    if check and done.returncode != 0:
        pytest.fail(f"kubectl {' '.join(args)}: exit {done.returncode}: {done.stderr.strip()}")
    return done.stdout


def get_raw(cluster: LocalCluster, path: str) -> str:
    """GET ``path`` of kube-apiserver as the cluster admin, as text."""
    pki = cluster.directory / "pki"
    ctx = ssl.create_default_context(cafile=str(pki / "ca.crt"))
    ctx.load_cert_chain(str(pki / "admin.crt"), str(pki / "admin.key"))
    with urllib.request.urlopen(cluster.state.server + path, timeout=10, context=ctx) as resp:
        return str(resp.read().decode())


def pods_of(cluster: LocalCluster, app: str) -> list[dict[str, Any]]:
    """The pods of Steward's component ``app`` (``steward-informer``): a Deployment's in
    Steward's namespace, a static pod's mirror in kube-system."""
    listing = cluster.api("GET", f"/api/v1/pods?labelSelector=app.kubernetes.io/name%3D{app}")
    return list(listing.get("items", []))


def ready(pod: dict[str, Any]) -> bool:
    return not pod["metadata"].get("deletionTimestamp") and any(
        c["type"] == "Ready" and c["status"] == "True"
        for c in (pod.get("status") or {}).get("conditions") or ()
    )


def job_controller(cluster: LocalCluster, name: str = "job") -> manager_pb2.Controller:
    """The manager's record of the Job controller (or the controller ``name``), asked of
    the static manager at the control-plane address over mTLS as the cluster admin."""
    pki = cluster.directory / "pki"
    security = ClientSecurity(
        ca_file=str(pki / "ca.crt"),
        cert_file=str(pki / "admin.crt"),
        key_file=str(pki / "admin.key"),
    )
    with security.sync_channel(pods.manager_address(cluster)) as channel:
        reply = manager_pb2_grpc.ManagerServiceStub(channel).GetController(
            manager_pb2.GetControllerRequest(name=name), timeout=10
        )
    return reply.controller


def active_instances(controller: manager_pb2.Controller) -> list[str]:
    return [i.instance_id for i in controller.instances if i.role == manager_pb2.ROLE_ACTIVE]


def job(name: str, completions: int = 1) -> dict[str, Any]:
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "completions": completions,
            "parallelism": completions,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "c", "image": "busybox:1.36"}],
                }
            },
        },
    }


def burst(cluster: LocalCluster, namespace: str, prefix: str, count: int) -> None:
    """Create ``count`` one-pod Jobs, then wait until each is Complete with exactly one
    succeeded pod and one pod in all (no Job miscounted, no extra pod)."""
    cluster.api("POST", "/api/v1/namespaces", {"metadata": {"name": namespace}}, ok=(201, 409))
    wait(
        f"the default ServiceAccount of {namespace}",
        lambda: cluster.api(
            "GET", f"/api/v1/namespaces/{namespace}/serviceaccounts/default", ok=(200, 404)
        ).get("kind"),
    )
    for i in range(count):
        cluster.api(
            "POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", job(f"{prefix}-{i}"), ok=(201,)
        )

    def converged() -> bool:
        jobs = cluster.api("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs")["items"]
        done = [
            j
            for j in jobs
            if any(
                c["type"] == "Complete" and c["status"] == "True"
                for c in j.get("status", {}).get("conditions") or ()
            )
        ]
        return len(done) == count

    wait(f"{count} Jobs of {namespace} Complete", converged, timeout=300)
    jobs = cluster.api("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs")["items"]
    pods = cluster.api("GET", f"/api/v1/namespaces/{namespace}/pods")["items"]
    per_job: dict[str, int] = {}
    for pod in pods:
        per_job[pod["metadata"]["labels"].get("job-name", "")] = (
            per_job.get(pod["metadata"]["labels"].get("job-name", ""), 0) + 1
        )
        assert pod["spec"]["nodeName"].startswith("kwok-node-"), pod["spec"]["nodeName"]
    assert sorted(j["status"].get("succeeded") for j in jobs) == [1] * count
    assert not any(j["status"].get("failed") for j in jobs)
    assert per_job == {f"{prefix}-{i}": 1 for i in range(count)}


# ------------------------------------------------------------------------------- tests


READY = {
    "steward-informer": 1,
    "steward-manager": 1,
    "steward-controller-job": 1,
    "steward-controller-replicaset": 1,
    "steward-controller-replicationcontroller": 1,
    "steward-controller-deployment": 1,
    "steward-controller-endpoint": 1,
    "steward-controller-endpointslice": 1,
    "steward-controller-daemonset": 1,
    "steward-controller-horizontalpodautoscaling": 1,
    "steward-controller-garbagecollector": 1,
    "steward-controller-namespace": 1,
    "steward-controller-serviceaccount": 1,
    "steward-controller-serviceaccount-token": 1,
    "steward-controller-legacy-service-account-token-cleaner": 1,
    "steward-controller-root-ca-cert-publisher": 1,
    "steward-controller-clusterrole-aggregation": 1,
    "steward-controller-csrapproving": 1,
    "steward-controller-csrsigning": 1,
    "steward-controller-csrcleaner": 1,
    "steward-controller-nodelifecycle": 1,
    "steward-controller-taint-eviction-controller": 1,
    "steward-controller-podgc": 1,
    "steward-controller-ttl": 1,
    "steward-controller-ttl-after-finished": 1,
    "steward-controller-resourcequota": 1,
    "steward-controller-cronjob": 1,
    "steward-controller-disruption": 1,
    "steward-controller-statefulset": 1,
}
"""Ready pods of each component: the static core's mirror pods, one per component, and
one pod of each other controller's Deployment."""
STATIC = {f"steward-{c}" for c in static_core.CORE}


def test_pods_are_ready_through_their_own_probes(pods_cluster: LocalCluster) -> None:
    """Every service runs as pods on the real node, and its kubelet (not a fake) ran
    their startup and readiness probes: the kubelet's prober metrics, read through the
    API server's node proxy (kube-apiserver's kubelet client certificate), count them."""
    ready_pods: list[str] = []
    started: list[str] = []
    for app, want in READY.items():
        found = pods_of(pods_cluster, app)
        assert all(p["spec"]["nodeName"] == NODE for p in found), app
        running = [p["metadata"]["name"] for p in found if ready(p)]
        assert len(running) == want, (app, [p["metadata"]["name"] for p in found])
        ready_pods += running
        started += [p["metadata"]["name"] for p in found]
    metrics = get_raw(pods_cluster, f"/api/v1/nodes/{NODE}/proxy/metrics/probes")

    def successful(pod: str, probe: str) -> int:
        pattern = (
            rf'prober_probe_total{{[^}}]*pod="{re.escape(pod)}"[^}}]*'
            rf'probe_type="{probe}"[^}}]*result="successful"[^}}]*}} (\d+)'
        )
        return max((int(m) for m in re.findall(pattern, metrics)), default=0)

    for pod in started:
        assert successful(pod, "Startup") >= 1, f"{pod}: no successful startup probe"
    for pod in ready_pods:
        assert successful(pod, "Readiness") >= 1, f"{pod}: no successful readiness probe"
    assert sorted(started) == sorted(ready_pods)


def test_the_core_runs_as_static_pods_on_the_host_network(pods_cluster: LocalCluster) -> None:
    """The informer, the manager and the ReplicaSet and Deployment controllers are the
    kubelet's static pods: their mirror pods in kube-system are owned by the Node (the
    kubelet made them), on the node's own address; no Deployment or Service of theirs
    exists, and upstream's kube-controller-manager runs none of Steward's controllers."""
    for app in STATIC:
        (pod,) = pods_of(pods_cluster, app)
        assert pod["metadata"]["namespace"] == "kube-system", app
        owners = pod["metadata"].get("ownerReferences") or []
        assert [(o["kind"], o["name"]) for o in owners] == [("Node", NODE)], owners
        assert "kubernetes.io/config.mirror" in pod["metadata"]["annotations"], app
        assert pod["spec"]["hostNetwork"] is True
        assert pod["status"]["podIP"] == pods_cluster.state.host
        for kind in ("deployments", "services"):
            path = f"/apis/apps/v1/namespaces/{NS}/{kind}/{app}"
            if kind == "services":
                path = f"/api/v1/namespaces/{NS}/services/{app}"
            assert pods_cluster.api("GET", path, ok=(200, 404)).get("code") == 404, (kind, app)
    off = {c.lstrip("-") for c in pods_cluster.state.controllers.split(",") if c.startswith("-")}
    assert off == {c.name for c in steward_controllers()}


def test_pods_run_restricted(pods_cluster: LocalCluster) -> None:
    """The namespace enforces Pod Security ``restricted``, and inside a pod the process
    is UID 65532 on a read-only root file system with its projected token mounted."""
    ns = pods_cluster.api("GET", f"/api/v1/namespaces/{NS}")
    assert ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    pod = pods_of(pods_cluster, "steward-controller-job")[0]["metadata"]["name"]
    script = (
        "import os, pathlib\n"
        "print(os.getuid(), os.getgid())\n"
        "try:\n"
        "    open('/opt/steward/x', 'w')\n"
        "    print('writable')\n"
        "except OSError as err:\n"
        "    print('read-only', err.errno)\n"
        "print(len(pathlib.Path('/var/run/secrets/steward.io/token').read_text()) > 100)\n"
    )
    out = kubectl(pods_cluster, "-n", NS, "exec", pod, "--", "python", "-c", script).split()
    assert out[:2] == ["65532", "65532"]
    assert out[2:4] == ["read-only", "30"]  # EROFS
    assert out[4] == "True"


def test_a_deployed_controller_reaches_the_core_at_the_control_plane_address(
    pods_cluster: LocalCluster,
) -> None:
    """From the Job controller's pod (the pod network), the static informer answers at
    the control-plane address and its host port: no DNS name, Service or kube-proxy rule
    on the way."""
    pod = pods_of(pods_cluster, "steward-controller-job")[0]["metadata"]["name"]
    informer = static_core.DEFAULT_PORTS["informer"].grpc
    script = (
        "import socket\n"
        f"socket.create_connection(('{pods_cluster.state.host}', {informer}), timeout=5).close()\n"
        "print('reached')\n"
    )
    out = kubectl(pods_cluster, "-n", NS, "exec", pod, "--", "python", "-c", script).strip()
    assert out == "reached"
    container = pods_of(pods_cluster, "steward-controller-job")[0]["spec"]["containers"][0]
    assert f"--informer={pods_cluster.state.host}:{informer}" in container["args"]


def test_controllers_registered_with_the_manager_over_mtls(pods_cluster: LocalCluster) -> None:
    """The Job controller's pod reached the static manager at the control-plane address
    over mTLS with its projected token, and is the active instance."""

    def active() -> manager_pb2.Controller | None:
        controller = job_controller(pods_cluster)
        return controller if active_instances(controller) else None

    controller = wait("an active Job controller", active)
    pod = pods_of(pods_cluster, "steward-controller-job")[0]["metadata"]["name"]
    assert controller.holder.startswith(f"{pod}-"), (controller.holder, pod)
    assert controller.state == manager_pb2.CONTROLLER_STATE_ACTIVE


def assert_active_in_its_pod(cluster: LocalCluster, name: str) -> None:
    """The manager comes to name an active instance of Steward's controller ``name``, held
    by the one pod of its Deployment ``steward-controller-<name>``."""

    def active() -> manager_pb2.Controller | None:
        controller = job_controller(cluster, name)
        return controller if active_instances(controller) else None

    controller = wait(f"an active {name} controller", active)
    assert controller.state == manager_pb2.CONTROLLER_STATE_ACTIVE
    pod = pods_of(cluster, f"steward-controller-{name}")[0]["metadata"]["name"]
    assert controller.holder.startswith(f"{pod}-"), (controller.holder, pod)


INFORMER_SERVICE = "static-informer"
"""A Service the tests make in kube-system, selecting the static informer's mirror pod."""


def informer_service(cluster: LocalCluster) -> None:
    """The Service :data:`INFORMER_SERVICE` (made once)."""
    port = static_core.DEFAULT_PORTS["informer"].grpc
    cluster.api(
        "POST",
        "/api/v1/namespaces/kube-system/services",
        {
            "metadata": {"name": INFORMER_SERVICE},
            "spec": {
                "selector": {"app.kubernetes.io/name": "steward-informer"},
                "ports": [{"name": "grpc", "port": port, "targetPort": port}],
            },
        },
        ok=(201, 409),
    )


def test_stewards_endpoints_controller_writes_endpoints_of_a_static_pod(
    pods_cluster: LocalCluster,
) -> None:
    """Upstream's Endpoints controller is off and Steward's, active in its pod, lists the
    static informer's mirror pod (on the node's address) in the Endpoints of a Service
    selecting it."""
    assert_active_in_its_pod(pods_cluster, "endpoint")
    informer_service(pods_cluster)

    def informer_endpoints() -> list[str] | None:
        found = pods_cluster.api(
            "GET", f"/api/v1/namespaces/kube-system/endpoints/{INFORMER_SERVICE}", ok=(200, 404)
        )
        ips = sorted(a["ip"] for s in found.get("subsets") or [] for a in s.get("addresses") or [])
        return ips or None

    assert wait("the Service's Endpoints", informer_endpoints) == [pods_cluster.state.host]


def slices_of(cluster: LocalCluster, service: str, namespace: str) -> list[dict[str, Any]]:
    selector = f"kubernetes.io/service-name={service}"
    found = cluster.api(
        "GET",
        f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices?labelSelector={selector}",
    )
    return list(found.get("items") or [])


def test_stewards_endpointslice_controller_writes_upstreams_slices_in_its_place(
    pods_cluster: LocalCluster,
) -> None:
    """Upstream's EndpointSlice controller is off (Steward's core needs no Service), and
    Steward's, active in its pod, writes the slices in its place, under upstream's
    managed-by value: the static informer's address, ready as its readiness probe says."""
    assert "-endpointslice" in pods_cluster.state.controllers.split(",")
    assert_active_in_its_pod(pods_cluster, "endpointslice")
    informer_service(pods_cluster)

    def ready_addresses() -> dict[str, list[str]] | None:
        found: dict[str, list[str]] = {}
        for s in slices_of(pods_cluster, INFORMER_SERVICE, "kube-system"):
            managed_by = s["metadata"]["labels"].get("endpointslice.kubernetes.io/managed-by", "")
            found.setdefault(managed_by, [])
            for e in s.get("endpoints") or []:
                if (e.get("conditions") or {}).get("ready"):
                    found[managed_by] += e.get("addresses") or []
        return found if any(found.values()) else None

    assert wait("the Service's slices", ready_addresses) == {
        "endpointslice-controller.k8s.io": [pods_cluster.state.host]
    }


def test_the_hpa_controller_is_active_in_its_pod(pods_cluster: LocalCluster) -> None:
    """Upstream's HorizontalPodAutoscaler controller is off, and Steward's is active in
    the one pod of its Deployment."""
    assert "-horizontalpodautoscaling" in pods_cluster.state.controllers.split(",")
    assert_active_in_its_pod(pods_cluster, "horizontalpodautoscaling")


def test_a_drain_of_the_real_node_waits_for_its_budget(
    pods_cluster: LocalCluster, cluster: LocalCluster
) -> None:
    """Issue 39's drain of a real node, blocked and then allowed by a budget: a
    Deployment's one pod Ready on the real node (its kubelet runs it), a budget
    ``minAvailable: 1`` over it, and the node drained as ``kubectl drain`` does (cordon,
    evictions retried on 429). Steward's disruption controller, active in its pod, keeps
    the budget's status, which the eviction API reads: the drain is refused until a
    second replica is Ready elsewhere, then evicts the pod and empties the node. The same
    scenario runs at once under upstream's disruption controller on a simulated node of
    the session's cluster; the outcomes and the budgets' final statuses must be equal
    (``scenarios.masked``)."""
    assert_active_in_its_pod(pods_cluster, "disruption")
    sides = {"steward": (pods_cluster, NODE), "upstream": (cluster, "kwok-node-0")}
    taint = {"key": nodes.REAL_NODE_LABEL, "operator": "Exists", "effect": "NoSchedule"}

    def run(side: str) -> dict[str, Any]:
        plane, node = sides[side]
        kube = KubeClient(load_access(str(plane.kubeconfig)))
        ns = f"drain-{side}"
        try:
            kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
            wait(
                f"the default ServiceAccount of {ns}",
                lambda: kube.request("GET", f"/api/v1/namespaces/{ns}/serviceaccounts").get(
                    "items"
                ),
            )
            done, final = drain_blocked_then_allowed(
                kube, ns, node, tolerations=[taint] if side == "steward" else ()
            )
            return {
                "emptied": done.emptied,
                "blocked": done.blocked > 0,
                "evicted": len(done.evicted),
                "final": masked(final),
            }
        finally:
            with contextlib.suppress(ApiError):
                kube.request("DELETE", f"/api/v1/namespaces/{ns}")
            kube.close()

    with ThreadPoolExecutor(2) as pool:
        ours, theirs = pool.map(run, ("steward", "upstream"))
    assert ours == theirs
    assert ours["emptied"] and ours["blocked"] and ours["evicted"] == 1, ours


def test_a_daemonsets_pod_runs_on_the_real_node(pods_cluster: LocalCluster) -> None:
    """Where the local control plane has a real node, a DaemonSet's pod runs there for
    real: upstream's DaemonSet controller handed over, Steward's (active in its pod)
    creates the pod for the real node and none for kwok's, which its node selector leaves
    out; the scheduler binds it there, the node's containerd runs its container (a Python
    HTTP server from one of Steward's imported images), and the node's kubelet probes it
    and reports it Ready."""
    assert "-daemonset" in pods_cluster.state.controllers.split(","), pods_cluster.state
    assert_active_in_its_pod(pods_cluster, "daemonset")
    kubectl(pods_cluster, "create", "namespace", "daemons")
    wait(
        "the default ServiceAccount of daemons",
        lambda: pods_cluster.api(
            "GET", "/api/v1/namespaces/daemons/serviceaccounts/default", ok=(200, 404)
        ).get("kind"),
    )
    labels = {"app": "node-agent"}
    daemonset = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": "node-agent"},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {
                    "nodeSelector": {nodes.REAL_NODE_LABEL: "true"},
                    "tolerations": [
                        {"key": nodes.REAL_NODE_LABEL, "operator": "Exists", "effect": "NoSchedule"}
                    ],
                    "terminationGracePeriodSeconds": 1,
                    "containers": [
                        {
                            "name": "agent",
                            "image": "steward-controller-daemonset:dev",
                            "imagePullPolicy": "Never",
                            "command": ["python", "-m", "http.server", "8080"],
                            "ports": [{"name": "http", "containerPort": 8080}],
                            "readinessProbe": {
                                "httpGet": {"path": "/", "port": "http"},
                                "periodSeconds": 2,
                            },
                        }
                    ],
                },
            },
        },
    }
    kubectl(pods_cluster, "-n", "daemons", "apply", "-f", "-", stdin=json.dumps(daemonset))

    def running() -> dict[str, Any] | None:
        ds = pods_cluster.api("GET", "/apis/apps/v1/namespaces/daemons/daemonsets/node-agent")
        status = ds.get("status") or {}
        if status.get("numberReady") != 1 or status.get("observedGeneration") != ds["metadata"].get(
            "generation"
        ):
            return None
        found = pods_cluster.api(
            "GET", "/api/v1/namespaces/daemons/pods?labelSelector=app%3Dnode-agent"
        )
        items = found.get("items") or []
        return items[0] if len(items) == 1 and ready(items[0]) else None

    pod = wait("the DaemonSet's pod Ready on the real node", running)
    ds = pods_cluster.api("GET", "/apis/apps/v1/namespaces/daemons/daemonsets/node-agent")
    assert ds["status"]["desiredNumberScheduled"] == 1, ds["status"]
    assert ds["status"].get("numberMisscheduled", 0) == 0, ds["status"]
    assert pod["spec"]["nodeName"] == NODE
    (owner,) = pod["metadata"]["ownerReferences"]
    assert (owner["kind"], owner["uid"]) == ("DaemonSet", ds["metadata"]["uid"])
    (container,) = pod["status"]["containerStatuses"]
    assert container["ready"] and "running" in container["state"], container
    assert container["containerID"].startswith("containerd://"), container
    name = pod["metadata"]["name"]

    # The kubelet itself probed the container, and the server in it answered.
    def probed() -> int | None:
        metrics = get_raw(pods_cluster, f"/api/v1/nodes/{NODE}/proxy/metrics/probes")
        pattern = (
            rf'prober_probe_total{{[^}}]*pod="{re.escape(name)}"[^}}]*'
            rf'probe_type="Readiness"[^}}]*result="successful"[^}}]*}} (\d+)'
        )
        return max((int(m) for m in re.findall(pattern, metrics)), default=0) or None

    wait("a successful readiness probe of the DaemonSet's pod", probed, timeout=60)
    logs = kubectl(pods_cluster, "-n", "daemons", "logs", name)
    assert '"GET / HTTP/1.1" 200' in logs, logs

    def created_by() -> set[str] | None:
        events = pods_cluster.api(
            "GET", "/api/v1/namespaces/daemons/events?fieldSelector=involvedObject.name=node-agent"
        )
        items = events.get("items") or []
        found = {
            e.get("reportingComponent") for e in items if e.get("reason") == "SuccessfulCreate"
        }
        return found or None

    assert wait("the DaemonSet's SuccessfulCreate Event", created_by) == {
        "steward.io/daemonset-controller"
    }
    kubectl(pods_cluster, "delete", "namespace", "daemons", "--wait=false")


def test_a_job_and_a_deployment_complete_on_kwok_nodes(pods_cluster: LocalCluster) -> None:
    """What a user does: kubectl apply; Steward's pods drive both to completion."""
    kubectl(pods_cluster, "create", "namespace", "user")
    wait(
        "the default ServiceAccount of user",
        lambda: pods_cluster.api(
            "GET", "/api/v1/namespaces/user/serviceaccounts/default", ok=(200, 404)
        ).get("kind"),
    )
    manifest = (
        json.dumps(job("pi", completions=3))
        + "\n"
        + json.dumps(
            {
                "apiVersion": "apps/v1",
                "kind": "Deployment",
                "metadata": {"name": "web"},
                "spec": {
                    "replicas": 2,
                    "selector": {"matchLabels": {"app": "web"}},
                    "template": {
                        "metadata": {"labels": {"app": "web"}},
                        "spec": {"containers": [{"name": "web", "image": "nginx:1.27"}]},
                    },
                },
            }
        )
    )
    kubectl(pods_cluster, "-n", "user", "apply", "-f", "-", stdin=manifest)
    kubectl(
        pods_cluster, "-n", "user", "wait", "--for=condition=Complete", "job/pi", "--timeout=180s"
    )
    kubectl(
        pods_cluster,
        "-n",
        "user",
        "rollout",
        "status",
        "deployment/web",
        "--timeout=180s",
    )
    pods = pods_cluster.api("GET", "/api/v1/namespaces/user/pods")["items"]
    assert pods and all(p["spec"]["nodeName"].startswith("kwok-node-") for p in pods)
    assert (
        pods_cluster.api("GET", "/apis/batch/v1/namespaces/user/jobs/pi")["status"]["succeeded"]
        == 3
    )


def test_a_job_reads_as_one_story_in_jaeger(pods_cluster: LocalCluster) -> None:
    """The informer's event, the Job controller's reconcile and its POST of the pod are
    one trace, exported from the pods to the cluster's Jaeger. kube-apiserver continues
    the trace only for callers in ``system:masters`` or ``system:monitoring``, which a
    ServiceAccount is not: its span of the POST starts a trace of its own that links the
    POST's client span, as it would in any cluster."""
    pods_cluster.api("POST", "/apis/batch/v1/namespaces/default/jobs", job("traced"), ok=(201,))
    tags = json.dumps({"steward.object.name": "traced", "steward.resource": "jobs.v1.batch"})

    def story() -> str | None:
        found = jaeger.query(
            pods_cluster,
            "/api/traces",
            service="steward-informer",
            tags=tags,
            lookback="1h",
            limit="20",
        )["data"]
        for trace in found or []:
            tree = jaeger.Tree(trace)
            events = tree.find("informer ADDED jobs.v1.batch")
            reconciles = [
                s
                for s in tree.find("reconcile job")
                if events
                and tree.parent(s) is events[0]
                and tree.service(s) == "steward-controller-job"
            ]
            if not reconciles:
                continue
            posts = tree.find("POST /api/v1/namespaces/{namespace}/pods", under=reconciles[0])
            if posts and jaeger.tags(posts[0]).get("span.kind") == "client":
                return str(posts[0]["spanID"])
        return None

    post_span = wait("the Job's trace: event, reconcile, POST", story, timeout=120)

    def linked() -> bool:
        found = jaeger.query(
            pods_cluster, "/api/traces", service="apiserver", lookback="1h", limit="500"
        )["data"]
        return any(
            ref.get("spanID") == post_span
            for trace in found or []
            for span in trace["spans"]
            for ref in span.get("references") or []
        )

    wait("kube-apiserver's span of the POST linking the controller's", linked, timeout=120)


def test_deleting_the_active_job_controller_pod_is_survived(pods_cluster: LocalCluster) -> None:
    """kubectl delete pod of the active Job controller: its Deployment replaces it, the
    new pod becomes the active instance, and a burst of Jobs converges, none
    miscounted. Prints the time from the delete to the converged burst."""
    old = job_controller(pods_cluster).holder
    pod = next(p for p in pods_of(pods_cluster, "steward-controller-job") if ready(p))
    name = pod["metadata"]["name"]
    started = time.monotonic()
    kubectl(pods_cluster, "-n", NS, "delete", "pod", name, "--wait=false")
    wait(
        "a new active Job controller",
        lambda: (h := job_controller(pods_cluster).holder) and h != old and not h.startswith(name),
    )
    active = time.monotonic() - started
    burst(pods_cluster, "burst-after-delete", "j", 20)
    print(
        f"\ndelete of the active Job controller pod -> new active {active:.1f}s, "
        f"-> 20 Jobs converged {time.monotonic() - started:.1f}s"
    )


def test_deleting_the_informers_mirror_pod_changes_nothing(pods_cluster: LocalCluster) -> None:
    """``kubectl delete pod`` of a static pod deletes its mirror only: the kubelet makes a
    new one (a new UID), the informer's container goes on (the same container, no
    restart), and a burst of Jobs converges."""
    (pod,) = pods_of(pods_cluster, "steward-informer")
    uid = pod["metadata"]["uid"]
    (container,) = pod["status"]["containerStatuses"]
    started = time.monotonic()
    kubectl(pods_cluster, "-n", "kube-system", "delete", "pod", pod["metadata"]["name"])

    def recreated() -> dict[str, Any] | None:
        found = [p for p in pods_of(pods_cluster, "steward-informer") if ready(p)]
        return found[0] if found and found[0]["metadata"]["uid"] != uid else None

    again = wait("the kubelet to make the informer's mirror pod again", recreated)
    (now,) = again["status"]["containerStatuses"]
    assert now["containerID"] == container["containerID"]
    assert now["restartCount"] == container["restartCount"]
    burst(pods_cluster, "burst-after-informer", "j", 10)
    print(
        "\ndelete of the informer's mirror pod -> 10 Jobs converged "
        f"{time.monotonic() - started:.1f}s"
    )


def test_rolling_update_of_the_job_controller_hands_over(pods_cluster: LocalCluster) -> None:
    """A new image for the Job controller's Deployment (its default rolling update
    surges a second pod): the manager never has two active instances, the new pod ends
    active, and Jobs still complete."""
    node = pods_cluster.state.real_nodes[0]
    tagged = subprocess.run(
        [
            "ctr",
            "--address",
            str(node.containerd_socket),
            "-n",
            "k8s.io",
            "images",
            "tag",
            "--force",
            "docker.io/library/steward-controller-job:dev",
            "docker.io/library/steward-controller-job:next",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert tagged.returncode == 0, tagged.stderr
    old = {p["metadata"]["name"] for p in pods_of(pods_cluster, "steward-controller-job")}
    kubectl(
        pods_cluster,
        "-n",
        NS,
        "set",
        "image",
        "deployment/steward-controller-job",
        "controller=steward-controller-job:next",
    )
    most = 0
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        with_active = active_instances(job_controller(pods_cluster))
        most = max(most, len(with_active))
        every = pods_of(pods_cluster, "steward-controller-job")
        pods = [p for p in every if ready(p)]
        new = [p for p in pods if p["metadata"]["name"] not in old]
        holder = job_controller(pods_cluster).holder
        old_left = [p for p in every if p["metadata"]["name"] in old]
        if (
            len(pods) == 1
            and new
            and holder.startswith(new[0]["metadata"]["name"] + "-")
            and not old_left
        ):
            break
        time.sleep(0.2)
    else:
        pytest.fail("the rolling update did not hand over to the new pod in 240s")
    assert most <= 1, f"{most} active Job controllers at once"
    burst(pods_cluster, "burst-after-rollout", "j", 5)


def test_a_pod_burning_cpu_on_the_real_node_is_measured_and_scaled(
    pods_cluster: LocalCluster,
) -> None:
    """The real node's kubelet feeds the metrics pipeline: a Deployment's pod on the real
    node runs a busy loop (100m requested, capped at 300m); metrics-server scrapes the
    kubelet's ``/metrics/resource`` (its serving certificate from the cluster CA, at the
    node's InternalIP, with metrics-server's own client certificate, which the kubelet
    authorizes by SubjectAccessReview) and ``metrics.k8s.io`` reports the pod's real use,
    well above its request; an HPA at 50 % of the request is scaled up to its maximum
    by Steward's HPA controller (active in its pod, upstream's off). Prints the CPU
    figure and the time taken."""
    assert "-horizontalpodautoscaling" in pods_cluster.state.controllers.split(",")
    assert_active_in_its_pod(pods_cluster, "horizontalpodautoscaling")
    started = time.monotonic()
    ns, labels = "burn", {"app": "burner"}
    kubectl(pods_cluster, "create", "namespace", ns)
    try:
        wait(
            f"the default ServiceAccount of {ns}",
            lambda: pods_cluster.api(
                "GET", f"/api/v1/namespaces/{ns}/serviceaccounts/default", ok=(200, 404)
            ).get("kind"),
        )
        deployment = {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "burner"},
            "spec": {
                "replicas": 1,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "nodeSelector": {"kubernetes.io/hostname": NODE},
                        "tolerations": [
                            {
                                "key": nodes.REAL_NODE_LABEL,
                                "operator": "Equal",
                                "value": "true",
                                "effect": "NoSchedule",
                            }
                        ],
                        "terminationGracePeriodSeconds": 1,
                        "containers": [
                            {
                                "name": "burn",
                                # One of Steward's images on the node: its Python loops.
                                "image": "steward-controller-daemonset:dev",
                                "imagePullPolicy": "Never",
                                "command": ["python", "-c", "while True: pass"],
                                "resources": {
                                    "requests": {"cpu": "100m"},
                                    # The machine stays usable: at most 0.3 of a core each.
                                    "limits": {"cpu": "300m"},
                                },
                            }
                        ],
                    },
                },
            },
        }
        hpa = {
            "apiVersion": "autoscaling/v2",
            "kind": "HorizontalPodAutoscaler",
            "metadata": {"name": "burner"},
            "spec": {
                "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "burner"},
                "minReplicas": 1,
                "maxReplicas": 3,
                "metrics": [
                    {
                        "type": "Resource",
                        "resource": {
                            "name": "cpu",
                            "target": {"type": "Utilization", "averageUtilization": 50},
                        },
                    }
                ],
            },
        }
        manifest = json.dumps(deployment) + "\n" + json.dumps(hpa)
        kubectl(pods_cluster, "-n", ns, "apply", "-f", "-", stdin=manifest)

        def burning() -> dict[str, Any] | None:
            found = pods_cluster.api(
                "GET", f"/api/v1/namespaces/{ns}/pods?labelSelector=app%3Dburner"
            )
            running = [
                p
                for p in found.get("items") or []
                if (p.get("status") or {}).get("phase") == "Running" and ready(p)
            ]
            return running[0] if running else None

        pod = wait("the burner's pod running on the real node", burning, timeout=60)
        name = pod["metadata"]["name"]
        assert pod["spec"]["nodeName"] == NODE
        assert not any("usage" in key for key in pod["metadata"].get("annotations") or {})

        # The kubelet itself measures the container (read through the node proxy).
        def measured() -> bool:
            text = get_raw(pods_cluster, f"/api/v1/nodes/{NODE}/proxy/metrics/resource")
            return bool(
                re.search(
                    rf'container_cpu_usage_seconds_total{{container="burn",'
                    rf'namespace="{ns}",pod="{re.escape(name)}"}} ',
                    text,
                )
            )

        wait("the kubelet's resource metrics of the burning container", measured, timeout=60)

        # metrics-server scraped it: the pod's real use, well above its 100m request.
        def used() -> usage.PodUsage | None:
            got = usage.pod_usage(pods_cluster, ns, name)
            return got if got is not None and got.total_cpu >= Decimal("0.2") else None

        sample = wait("metrics.k8s.io to report the pod's CPU above 200m", used, timeout=90)
        assert sample.total_cpu <= Decimal("0.36"), (
            sample
        )  # the limit holds (give or take a sample)
        node_metrics = pods_cluster.api("GET", f"/apis/metrics.k8s.io/v1beta1/nodes/{NODE}")
        assert usage.quantity(node_metrics["usage"]["cpu"]) >= sample.total_cpu, node_metrics
        measured_at = time.monotonic() - started

        # Steward's HPA scales the Deployment to its maximum (300 % of the request
        # against a 50 % target: six times, capped at three).
        def scaled() -> int | None:
            found = pods_cluster.api(
                "GET", f"/apis/apps/v1/namespaces/{ns}/deployments/burner/scale"
            )
            replicas = int(found["spec"].get("replicas") or 0)
            return replicas if replicas == 3 else None

        wait("Steward's HPA to scale the burner to 3", scaled, timeout=90)
        status = pods_cluster.api(
            "GET", f"/apis/autoscaling/v2/namespaces/{ns}/horizontalpodautoscalers/burner"
        )["status"]
        assert status["desiredReplicas"] == 3, status
        current = status["currentMetrics"][0]["resource"]["current"]
        assert current["averageUtilization"] > 100, current
        events = pods_cluster.api(
            "GET",
            f"/api/v1/namespaces/{ns}/events?fieldSelector=involvedObject.name%3Dburner,"
            "involvedObject.kind%3DHorizontalPodAutoscaler",
        )["items"]
        rescales = [e for e in events if e.get("reason") == "SuccessfulRescale"]
        assert rescales, json.dumps(events, indent=1)
        assert {e.get("reportingComponent") for e in rescales} == {
            "steward.io/horizontal-pod-autoscaler"
        }
        print(
            f"\nburning pod on the real node: {sample.total_cpu * 1000:.0f}m CPU in "
            f"metrics.k8s.io {measured_at:.1f}s after the apply (HPA saw "
            f"{current['averageUtilization']}% of the request); scaled to 3 "
            f"{time.monotonic() - started:.1f}s after the apply"
        )
    finally:
        kubectl(pods_cluster, "delete", "namespace", ns, "--wait=false", check=False)
