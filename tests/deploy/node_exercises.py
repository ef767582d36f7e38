"""One short piece of real work for each node, pod and quota controller, as
:mod:`tests.deploy.exercises` has for the others (each a :class:`tests.deploy.exercises.Run`:
None when the work was done, else what did not happen; ``give_up`` ends the wait early).

They run in ``apps_cluster`` (tests/deploy/conftest.py), where upstream's twins of these
controllers are off, so only the controller under test can do the work. The nodes they
make are not kwok's (no ``kwok.x-k8s.io/node`` annotation: nothing renews their status or
Lease) and carry :data:`OWN_TAINT`, so that no pod of another exercise lands there and the
DaemonSet exercise does not count them; each is deleted at the end, with the pods bound
to it (force-deleted: no kubelet confirms a graceful deletion there). The flags each
controller needs to do its work within seconds are given beside its exercise
(:data:`NODELIFECYCLE_ARGS`, :data:`PODGC_ARGS`, :data:`RESOURCEQUOTA_ARGS`).
"""

from __future__ import annotations

import time
import urllib.parse
import uuid
from contextlib import AbstractContextManager
from functools import partial
from typing import Any

from steward.cluster import LocalCluster
from tests.controllers.harness import renewing
from tests.deploy.exercises import GiveUp, _gone, _never, _poll

NODES = "/api/v1/nodes"
LEASES = "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases"
OWN_TAINT = {"key": "steward-deploy-test/own", "effect": "NoSchedule"}
"""A taint no pod of the deploy tests tolerates."""
UNSCHEDULABLE = {"steward-deploy-test/node": "none"}
"""A node selector no node matches: a pod that stays Pending, unscheduled."""
TTL_ANNOTATION = "node.alpha.kubernetes.io/ttl"
FORCE = {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0}

NODELIFECYCLE_ARGS = (
    "--node-monitor-period=1s",
    "--node-monitor-grace-period=4s",
    "--node-startup-grace-period=4s",
)
"""A node is declared Unknown four seconds after its last heartbeat (upstream's default is
50 s, the local overlay's 5m0s), the nodes looked at every second (5 s); the other nodes'
Leases are renewed meanwhile (:func:`other_leases`)."""
PODGC_ARGS = (
    "--pod-gc-check-period=1s",
    "--pod-gc-quarantine-time=1s",
    "--terminated-pod-gc-threshold=1",
)
"""A sweep every second (20 s by default), a missing node's pods collected a second after
the node is missed (40 s), and every terminated pod but the newest collected (12500):
those of the exercises before too, which nothing reads any more."""
RESOURCEQUOTA_ARGS = ("--resource-quota-sync-period=0s",)
"""No full recalculation: what the exercise sees comes of the quota's own events and of
replenishment, not of a periodic resync (5m0s by default, longer than any exercise)."""


def _stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _micro_stamp() -> str:
    now = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(now)) + f".{int(now % 1 * 1e6):06d}Z"


def _make_node(cluster: LocalCluster, prefix: str, *taints: dict[str, str]) -> str:
    """A node nobody manages, with :data:`OWN_TAINT` and ``taints``; its name."""
    name = f"steward-deploy-test-{prefix}-{uuid.uuid4().hex[:6]}"
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name},
        "spec": {"taints": [OWN_TAINT, *taints]},
    }
    cluster.api("POST", NODES, body, ok=(201,))
    return name


def _remove_node(cluster: LocalCluster, name: str, pods: list[tuple[str, str]]) -> None:
    """Delete the node, its Lease and ``pods`` (namespace, name), force."""
    for namespace, pod in pods:
        cluster.api("DELETE", f"/api/v1/namespaces/{namespace}/pods/{pod}", FORCE, ok=(200, 404))
    cluster.api("DELETE", f"{NODES}/{name}", ok=(200, 404))
    cluster.api("DELETE", f"{LEASES}/{name}", ok=(200, 404))


def _pod(
    name: str,
    *,
    node: str = "",
    tolerations: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "containers": [{"name": "main", "image": "busybox:1.36", "command": ["true"]}],
    }
    if node:
        spec["nodeName"] = node
    else:
        spec["nodeSelector"] = UNSCHEDULABLE
    if tolerations is not None:
        spec["tolerations"] = tolerations
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


def _set_pod_status(cluster: LocalCluster, path: str, status: dict[str, Any]) -> None:
    """The pod's status as a kubelet would post it (a merge patch of the subresource)."""
    cluster.api("PATCH", f"{path}/status", {"status": status})


def _events(cluster: LocalCluster, namespace: str, name: str, reason: str) -> list[dict[str, Any]]:
    selector = urllib.parse.quote(f"involvedObject.name={name},reason={reason}")
    found = cluster.api("GET", f"/api/v1/namespaces/{namespace}/events?fieldSelector={selector}")
    return list(found.get("items") or ())


def _event_missing(cluster: LocalCluster, namespace: str, name: str, reason: str) -> str:
    return "" if _events(cluster, namespace, name, reason) else f"no {reason} Event"


def _condition(obj: dict[str, Any], kind: str) -> dict[str, Any]:
    for condition in (obj.get("status") or {}).get("conditions") or ():
        if condition.get("type") == kind:
            return dict(condition)
    return {}


# nodelifecycle --------------------------------------------------------------------------
def other_leases(
    cluster: LocalCluster, node: str, every: float = 0.5
) -> AbstractContextManager[None]:
    """Renews the Lease of every node but ``node`` at once and then every ``every``
    seconds while the block runs (:func:`tests.controllers.harness.renewing`): kwok renews
    its nodes' Leases every ten seconds or so, later when the machine is busy, and under
    :data:`NODELIFECYCLE_ARGS` the controller would find them silent too (and mark their
    pods not ready, which kwok never undoes)."""
    return renewing(every, partial(_renew_other_leases, cluster, node), "other-leases")


def _renew_other_leases(cluster: LocalCluster, node: str) -> None:
    for lease in cluster.api("GET", LEASES).get("items") or ():
        name = lease["metadata"]["name"]
        if name != node:
            renewed = {"spec": {"renewTime": _micro_stamp()}}
            cluster.api("PATCH", f"{LEASES}/{name}", renewed, ok=(200, 404))


def run_nodelifecycle(
    cluster: LocalCluster, namespace: str, *, deadline: float = 30.0, give_up: GiveUp = _never
) -> str | None:
    """A node that posted a Ready status and renewed its Lease once, then fell silent,
    with a Ready pod bound there: past the grace period (:data:`NODELIFECYCLE_ARGS`) its
    conditions are Unknown, it has the unreachable taints (NoSchedule, and NoExecute from
    its zone's queue), the pod's Ready condition is False and the pod has a NodeNotReady
    Event.

    That uses every permission of the controller's role: nodes, pods and Leases come
    through the informer (their list and watch); the Lease is read before the node is
    declared dead (leases get); the conditions are written (nodes/status patch) and the
    taints (nodes patch); the pod's condition (pods/status patch); the Events (events
    create). Once the controller has seen the node (its RegisteredNode Event), the test
    changes the node's capacity, which the controller does not read: the informer does
    not pass such a change on, so the controller's status patch, conditional on the
    version it holds, meets a conflict and the node is read afresh (nodes get), as it
    would after any write of the node it did not see. The other nodes' Leases are renewed
    meanwhile (:func:`other_leases`), so that this node alone falls silent."""
    node = _make_node(cluster, "dead")
    pod = f"bound-{uuid.uuid4().hex[:6]}"
    try:
        with other_leases(cluster, node):
            return _silent_node(cluster, namespace, node, pod, time.monotonic() + deadline, give_up)
    finally:
        _remove_node(cluster, node, [(namespace, pod)])


def _silent_node(
    cluster: LocalCluster, namespace: str, node: str, pod: str, end: float, give_up: GiveUp
) -> str | None:
    lease = {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {"name": node},
        "spec": {"holderIdentity": node, "leaseDurationSeconds": 40, "renewTime": _micro_stamp()},
    }
    cluster.api("POST", LEASES, lease, ok=(201,))
    ready = {
        "type": "Ready",
        "status": "True",
        "reason": "KubeletReady",
        "message": "the deploy test's",
        "lastHeartbeatTime": _stamp(),
        "lastTransitionTime": _stamp(),
    }
    cluster.api("PATCH", f"{NODES}/{node}/status", {"status": {"conditions": [ready]}})
    pods = f"/api/v1/namespaces/{namespace}/pods"
    bound = _pod(pod, node=node, tolerations=[{"operator": "Exists"}])
    cluster.api("POST", pods, bound, ok=(201,))
    condition = {"type": "Ready", "status": "True", "lastTransitionTime": _stamp()}
    _set_pod_status(cluster, f"{pods}/{pod}", {"phase": "Running", "conditions": [condition]})
    seen = partial(_event_missing, cluster, "default", node, "RegisteredNode")
    missing = _poll(seen, end, give_up)
    if missing:
        return f"node {node}: {missing}"
    # A change the controller does not read, so is not told of (see above).
    capacity = {"capacity": {"pods": "10"}, "allocatable": {"pods": "10"}}
    cluster.api("PATCH", f"{NODES}/{node}/status", {"status": capacity})
    missing = _poll(partial(_dead_missing, cluster, node), end, give_up)
    if missing:
        return f"node {node}, silent: {missing}"
    missing = _poll(partial(_not_ready_missing, cluster, namespace, pod), end, give_up)
    return f"pod {pod} on the dead node {node}: {missing}" if missing else None


def _dead_missing(cluster: LocalCluster, node: str) -> str:
    found = cluster.api("GET", f"{NODES}/{node}")
    status = _condition(found, "Ready").get("status")
    if status != "Unknown":
        return f"Ready {status}"
    taints = {(t["key"], t["effect"]) for t in (found.get("spec") or {}).get("taints") or ()}
    wanted = {
        ("node.kubernetes.io/unreachable", "NoSchedule"),
        ("node.kubernetes.io/unreachable", "NoExecute"),
    }
    return "" if wanted <= taints else f"taints {sorted(taints)}"


def _not_ready_missing(cluster: LocalCluster, namespace: str, pod: str) -> str:
    found = cluster.api("GET", f"/api/v1/namespaces/{namespace}/pods/{pod}")
    status = _condition(found, "Ready").get("status")
    if status != "False":
        return f"Ready {status}"
    return _event_missing(cluster, namespace, pod, "NodeNotReady")


# taint-eviction-controller --------------------------------------------------------------
def run_taint_eviction(
    cluster: LocalCluster, namespace: str, *, deadline: float = 30.0, give_up: GiveUp = _never
) -> str | None:
    """A pod bound to a node with a NoExecute taint it does not tolerate: it gets the
    DisruptionTarget condition (DeletionByTaintManager), is deleted (left terminating:
    no kubelet confirms it) and has its TaintManagerEviction Event.

    That uses every permission of the controller's role: nodes and pods come through the
    informer (their list and watch), the pod is read afresh (pods get), its condition
    written (pods/status patch), the pod deleted (pods delete), the Event recorded
    (events create)."""
    evict = {"key": "steward-deploy-test/evict", "effect": "NoExecute"}
    node = _make_node(cluster, "tainted", evict)
    pod = f"evicted-{uuid.uuid4().hex[:6]}"
    try:
        cluster.api("POST", f"/api/v1/namespaces/{namespace}/pods", _pod(pod, node=node), ok=(201,))
        end = time.monotonic() + deadline
        missing = _poll(partial(_evicted_missing, cluster, namespace, pod), end, give_up)
        if missing:
            return f"pod {pod} on node {node} with an untolerated NoExecute taint: {missing}"
        missing = _poll(
            partial(_event_missing, cluster, namespace, pod, "TaintManagerEviction"), end, give_up
        )
        return f"pod {pod}: {missing}" if missing else None
    finally:
        _remove_node(cluster, node, [(namespace, pod)])


def _evicted_missing(cluster: LocalCluster, namespace: str, pod: str) -> str:
    found = cluster.api("GET", f"/api/v1/namespaces/{namespace}/pods/{pod}", ok=(200, 404))
    if not found.get("metadata"):
        return "deleted without its DisruptionTarget condition seen"
    disruption = _condition(found, "DisruptionTarget")
    if disruption.get("reason") != "DeletionByTaintManager":
        return f"DisruptionTarget {disruption or 'missing'}"
    return "" if found["metadata"].get("deletionTimestamp") else "not deleted"


# podgc ----------------------------------------------------------------------------------
def run_podgc(
    cluster: LocalCluster, namespace: str, *, deadline: float = 30.0, give_up: GiveUp = _never
) -> str | None:
    """With :data:`PODGC_ARGS`: a pod bound to a node that does not exist is marked Failed
    and deleted, and of two terminated pods made last (over the threshold of one) the
    older is deleted, the newer kept.

    That uses every permission of the collector's role: pods and nodes come through the
    informer (their list and watch), the missing node is asked of the API server (nodes
    get: NotFound), the orphaned pod, still Pending, marked Failed with its
    DisruptionTarget condition (pods/status patch) and deleted (pods delete)."""
    base = f"/api/v1/namespaces/{namespace}/pods"
    orphan, older, newer = (f"{what}-{uuid.uuid4().hex[:6]}" for what in ("orphan", "a", "b"))
    gone_node = f"steward-deploy-test-gone-{uuid.uuid4().hex[:6]}"
    try:
        for name in (older, newer):
            cluster.api("POST", base, _pod(name), ok=(201,))
            _set_pod_status(cluster, f"{base}/{name}", {"phase": "Succeeded"})
        cluster.api("POST", base, _pod(orphan, node=gone_node), ok=(201,))
        end = time.monotonic() + deadline
        missing = _poll(partial(_gone, cluster, f"{base}/{orphan}"), end, give_up)
        if missing:
            return f"pod {orphan} of the missing node {gone_node}: {missing}"
        missing = _poll(partial(_gone, cluster, f"{base}/{older}"), end, give_up)
        if missing:
            return f"the older of two terminated pods, {older}: {missing}"
        kept = cluster.api("GET", f"{base}/{newer}", ok=(200, 404))
        return None if kept.get("metadata") else f"the newest terminated pod {newer} deleted"
    finally:
        for name in (orphan, older, newer):
            cluster.api("DELETE", f"{base}/{name}", FORCE, ok=(200, 404))


# ttl ------------------------------------------------------------------------------------
def run_ttl(
    cluster: LocalCluster, namespace: str, *, deadline: float = 30.0, give_up: GiveUp = _never
) -> str | None:
    """A new node gets the annotation ``node.alpha.kubernetes.io/ttl: "0"`` (a cluster of
    at most a hundred nodes).

    That uses every permission of the controller's role: nodes come through the informer
    (their list and watch), the annotation is written (nodes patch)."""
    node = _make_node(cluster, "ttl")
    try:
        end = time.monotonic() + deadline
        missing = _poll(partial(_ttl_missing, cluster, node), end, give_up)
        return f"node {node}: {missing}" if missing else None
    finally:
        _remove_node(cluster, node, [])


def _ttl_missing(cluster: LocalCluster, node: str) -> str:
    found = cluster.api("GET", f"{NODES}/{node}")
    annotations = found["metadata"].get("annotations") or {}
    return "" if annotations.get(TTL_ANNOTATION) == "0" else f"annotations {annotations}"


# ttl-after-finished ---------------------------------------------------------------------
NOBODY = "steward-deploy-test/nobody"
"""A Job's ``spec.managedBy`` no controller answers to: upstream's Job controller in
``apps_cluster`` leaves the Job to the test, which writes its status."""


def run_ttl_after_finished(
    cluster: LocalCluster, namespace: str, *, deadline: float = 30.0, give_up: GiveUp = _never
) -> str | None:
    """A Job that finished (written by the test: it names :data:`NOBODY` as its
    manager) with ``ttlSecondsAfterFinished: 0`` is deleted, foreground.

    That uses every permission of the controller's role: Jobs come through the informer
    (their list and watch), the expired Job is read afresh (jobs get) and deleted (jobs
    delete). The deletion is seen as the Job's deletion timestamp with the
    ``foregroundDeletion`` finalizer (upstream's garbage collector is off here, so the
    finalizer stays until the test removes it)."""
    base = f"/apis/batch/v1/namespaces/{namespace}/jobs"
    name = f"ttl-{uuid.uuid4().hex[:6]}"
    body = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "managedBy": NOBODY,
            "ttlSecondsAfterFinished": 0,
            "template": {
                "spec": {
                    "restartPolicy": "Never",
                    "containers": [{"name": "main", "image": "busybox:1.36"}],
                }
            },
        },
    }
    cluster.api("POST", base, body, ok=(201,))
    try:
        at = _stamp()
        conditions = [
            {"type": kind, "status": "True", "reason": "Exercise", "lastTransitionTime": at}
            for kind in ("SuccessCriteriaMet", "Complete")
        ]
        status = {"startTime": at, "completionTime": at, "succeeded": 1, "conditions": conditions}
        cluster.api("PATCH", f"{base}/{name}/status", {"status": status})
        end = time.monotonic() + deadline
        missing = _poll(
            partial(_deleted_foreground_missing, cluster, f"{base}/{name}"), end, give_up
        )
        return f"job {name}: {missing}" if missing else None
    finally:
        found = cluster.api("GET", f"{base}/{name}", ok=(200, 404))
        if found.get("metadata", {}).get("finalizers"):
            cluster.api(
                "PATCH", f"{base}/{name}", {"metadata": {"finalizers": None}}, ok=(200, 404)
            )
        cluster.api("DELETE", f"{base}/{name}", ok=(200, 202, 404))


def _deleted_foreground_missing(cluster: LocalCluster, path: str) -> str:
    found = cluster.api("GET", path, ok=(200, 404))
    meta = found.get("metadata")
    if not meta:
        return ""  # gone: deleted (and its finalizer removed by a garbage collector)
    if not meta.get("deletionTimestamp"):
        return "not deleted"
    finalizers = meta.get("finalizers") or []
    return "" if "foregroundDeletion" in finalizers else f"finalizers {finalizers}"


# resourcequota --------------------------------------------------------------------------
def run_resourcequota(
    cluster: LocalCluster, namespace: str, *, deadline: float = 30.0, give_up: GiveUp = _never
) -> str | None:
    """A ResourceQuota on pods and ``count/configmaps``, made after a pod and a ConfigMap
    (so that quota admission counted neither): its ``status.used`` says one of each; the
    pod deleted, ``pods`` goes back to 0.

    That uses every permission of the controller's role: ResourceQuotas, pods and
    ConfigMaps come through the informer (the list and watch of every type), the status
    is written (resourcequotas/status update)."""
    base = f"/api/v1/namespaces/{namespace}"
    pod = f"counted-{uuid.uuid4().hex[:6]}"
    cluster.api("POST", f"{base}/pods", _pod(pod), ok=(201,))
    configmap = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "counted"}}
    cluster.api("POST", f"{base}/configmaps", configmap, ok=(201,))
    quota = {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "quota"},
        "spec": {"hard": {"pods": "5", "count/configmaps": "5"}},
    }
    cluster.api("POST", f"{base}/resourcequotas", quota, ok=(201,))
    path = f"{base}/resourcequotas/quota"
    end = time.monotonic() + deadline
    counted = {"pods": "1", "count/configmaps": "1"}
    missing = _poll(partial(_used_missing, cluster, path, counted), end, give_up)
    if missing:
        return f"quota {namespace}/quota: {missing}"
    cluster.api("DELETE", f"{base}/pods/{pod}", FORCE)
    replenished = {"pods": "0", "count/configmaps": "1"}
    missing = _poll(partial(_used_missing, cluster, path, replenished), end, give_up)
    return f"quota {namespace}/quota, its pod deleted: {missing}" if missing else None


def _used_missing(cluster: LocalCluster, path: str, want: dict[str, str]) -> str:
    used = (cluster.api("GET", path).get("status") or {}).get("used")
    return "" if used == want else f"status.used {used}, expected {want}"
