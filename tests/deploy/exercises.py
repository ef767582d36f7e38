"""One short piece of real work per service, as the deployed services would do it: each
returns None when the work was done, else a sentence saying what did not happen.

A ``give_up`` callable ends the wait early (it says the service logged a refusal, see
:meth:`tests.deploy.harness.Process.forbidden`); without it each waits its deadline.
The exercises dial the informer and the manager as ``security`` says (mutual TLS, and
the caller's token if it has one).
"""

from __future__ import annotations

import json
import subprocess
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any, Protocol

import grpc

from steward.cluster import LocalCluster
from steward.security import ClientSecurity
from steward.v1 import informer_pb2, informer_pb2_grpc, manager_pb2, manager_pb2_grpc
from tests.deploy.harness import KUBECTL, new_namespace

MANAGED_BY = "steward.io/job-controller"
"""spec.managedBy of the Jobs Steward's Job controller runs (upstream's leaves them)."""
SLICES_MANAGED_BY = "endpointslice-controller.steward.io"
"""The ``endpointslice.kubernetes.io/managed-by`` label of the EndpointSlices Steward's
EndpointSlice controller writes (the default of its ``--managed-by``)."""
UPSTREAM_SLICES_MANAGED_BY = "endpointslice-controller.k8s.io"
"""The same label of the slices kube-controller-manager's endpointslice-controller writes."""
_SLICE_MANAGED_BY = "endpointslice.kubernetes.io/managed-by"
_SERVICE_NAME = "kubernetes.io/service-name"

GiveUp = Callable[[], bool]


class Run(Protocol):
    """An exercise of a controller in ``namespace``: :func:`run_job`,
    :func:`run_replicaset`, :func:`run_endpoints`, :func:`run_endpointslices`,
    :func:`run_daemonset`, :func:`run_hpa`, :func:`run_garbagecollector`,
    :func:`run_namespace`."""

    def __call__(
        self, cluster: LocalCluster, namespace: str, *, give_up: GiveUp = ...
    ) -> str | None: ...


def _never() -> bool:
    return False


def _pod(name: str, labels: dict[str, str] | None = None, restart: str = "Never") -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": labels or {}},
        "spec": {
            "restartPolicy": restart,
            "containers": [{"name": "main", "image": "busybox:1.36", "command": ["true"]}],
        },
    }


def watch_pods(
    cluster: LocalCluster,
    informer: str,
    namespace: str,
    *,
    security: ClientSecurity,
    deadline: float = 45.0,
    give_up: GiveUp = _never,
) -> str | None:
    """The informer at ``informer`` streams the pods of ``namespace`` to the caller of
    ``security``: a pod created before comes in the snapshot (before INITIAL_EVENTS_END),
    one created after as ADDED."""
    before, after = f"before-{uuid.uuid4().hex[:5]}", f"after-{uuid.uuid4().hex[:5]}"
    cluster.api("POST", f"/api/v1/namespaces/{namespace}/pods", _pod(before), ok=(201,))
    pods = informer_pb2.ResourceType(group="", version="v1", resource="pods")
    request = informer_pb2.WatchRequest(
        targets=[informer_pb2.WatchTarget(type=pods)], namespace=namespace, subscriber="deploy-test"
    )
    end = time.monotonic() + deadline
    snapshot: set[str] = set()
    synced = False
    with security.sync_channel(informer) as channel:
        stream = informer_pb2_grpc.InformerServiceStub(channel).Watch(request, timeout=deadline)
        # An informer refused by the API server sends nothing: stop waiting on the stream as
        # soon as it logs the refusal, not at the deadline.
        done = threading.Event()

        def watchdog() -> None:
            while not done.wait(0.25):
                if give_up():
                    stream.cancel()
                    return

        threading.Thread(target=watchdog, name="watch-give-up", daemon=True).start()
        try:
            for response in stream:
                for event in response.events:
                    if event.type == informer_pb2.EVENT_TYPE_INITIAL_EVENTS_END:
                        if before not in snapshot:
                            return f"pod {before} missing from the snapshot ({sorted(snapshot)})"
                        synced = True
                        cluster.api(
                            "POST", f"/api/v1/namespaces/{namespace}/pods", _pod(after), ok=(201,)
                        )
                    elif event.type == informer_pb2.EVENT_TYPE_ADDED:
                        name = json.loads(event.object)["metadata"]["name"]
                        if synced and name == after:
                            return None
                        snapshot.add(name)
                if give_up() or time.monotonic() > end:
                    break
        except grpc.RpcError as err:
            code = err.code() if isinstance(err, grpc.Call) else None
            details = err.details() if isinstance(err, grpc.Call) else str(err)
            return f"the Watch ended with {code}: {details}"
        finally:
            done.set()
            stream.cancel()
    return "no INITIAL_EVENTS_END" if not synced else f"no ADDED event for pod {after}"


def controller_holder(manager: str, name: str = "job", *, security: ClientSecurity) -> str:
    """The instance the manager at ``manager`` names as the controller's holder ('' if
    none, or the manager does not answer; ``security``'s caller needs get of
    controllers.steward.io)."""
    with security.sync_channel(manager) as channel:
        try:
            reply = manager_pb2_grpc.ManagerServiceStub(channel).GetController(
                manager_pb2.GetControllerRequest(name=name), timeout=2.0
            )
        except grpc.RpcError:
            return ""
    holder: str = reply.controller.holder
    return holder


def wait_registered(
    manager: str,
    name: str = "job",
    *,
    security: ClientSecurity,
    deadline: float = 60.0,
    give_up: GiveUp = _never,
) -> str | None:
    """The manager at ``manager`` has an active instance of the controller ``name``."""
    end = time.monotonic() + deadline
    while time.monotonic() < end and not give_up():
        if controller_holder(manager, name, security=security):
            return None
        time.sleep(0.25)
    return f"the manager names no active instance of the {name} controller"


def run_job(
    cluster: LocalCluster,
    namespace: str,
    *,
    deadline: float = 90.0,
    give_up: GiveUp = _never,
) -> str | None:
    """A Job managed by Steward (``spec.managedBy``) runs to completion, after adopting an
    orphan pod that matches its selector, and its SuccessfulCreate Event is recorded.

    That uses every permission of the Job controller's role: the Job is read fresh before
    adopting (jobs get), the orphan is patched (pods patch), a second pod is created
    (pods create, with blockOwnerDeletion: jobs/finalizers update where the admission
    plugin checks it), the status is written (jobs/status update), Events are posted.
    """
    uid = uuid.uuid4().hex[:6]
    labels = {"steward-deploy-test": uid}
    name = f"job-{uid}"
    base = f"/api/v1/namespaces/{namespace}"
    cluster.api("POST", f"{base}/pods", _pod(f"orphan-{uid}", labels), ok=(201,))
    template = _pod("unused", labels)
    del template["metadata"]["name"], template["apiVersion"], template["kind"]
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "managedBy": MANAGED_BY,
            "manualSelector": True,
            "selector": {"matchLabels": labels},
            "parallelism": 1,
            "completions": 2,
            "backoffLimit": 0,
            "template": template,
        },
    }
    created = cluster.api("POST", f"/apis/batch/v1/namespaces/{namespace}/jobs", job, ok=(201,))
    job_uid = created["metadata"]["uid"]
    end = time.monotonic() + deadline
    missing = "nothing observed"
    while time.monotonic() < end and not give_up():
        missing = _job_missing(cluster, namespace, name, uid, job_uid)
        if not missing:
            return None
        time.sleep(0.5)
    return f"Job {namespace}/{name}: {missing}"


def _job_missing(cluster: LocalCluster, namespace: str, name: str, uid: str, job_uid: str) -> str:
    orphan = cluster.api("GET", f"/api/v1/namespaces/{namespace}/pods/orphan-{uid}")
    refs = orphan["metadata"].get("ownerReferences") or []
    if not any(r.get("uid") == job_uid and r.get("controller") for r in refs):
        return "the orphan pod was not adopted"
    job = cluster.api("GET", f"/apis/batch/v1/namespaces/{namespace}/jobs/{name}")
    status = job.get("status") or {}
    complete = any(
        c.get("type") == "Complete" and c.get("status") == "True"
        for c in status.get("conditions") or []
    )
    if not complete or status.get("succeeded") != 2:
        return f"not complete (status {status})"
    events = cluster.api(
        "GET",
        f"/api/v1/namespaces/{namespace}/events?fieldSelector=involvedObject.name={name}",
    )
    reasons = {e.get("reason") for e in events.get("items") or []}
    if "SuccessfulCreate" not in reasons:
        return f"no SuccessfulCreate Event (reasons: {sorted(r for r in reasons if r)})"
    return ""


def run_replicaset(
    cluster: LocalCluster,
    namespace: str,
    *,
    deadline: float = 120.0,
    give_up: GiveUp = _never,
    kind: str = "ReplicaSet",
) -> str | None:
    """A ReplicaSet (or, with ``kind`` ``ReplicationController``, a ReplicationController
    selecting by a label map) of two adopts an orphan pod that matches its selector,
    creates the second pod, reports both ready; scaled to one, it deletes a pod and reports
    one ready. Its SuccessfulCreate and SuccessfulDelete Events are recorded.

    That uses every permission of the ReplicaSet (ReplicationController) controller's
    role: the owner is read fresh before adopting (replicasets get), the orphan is patched
    (pods patch), a pod is created (pods create, with blockOwnerDeletion:
    replicasets/finalizers update where the admission plugin checks it) and one deleted
    (pods delete), the status is written (replicasets/status update), Events are posted.
    """
    uid = uuid.uuid4().hex[:6]
    labels = {"steward-deploy-test": uid}
    rc = kind == "ReplicationController"
    name = f"{'rc' if rc else 'rs'}-{uid}"
    cluster.api(
        "POST",
        f"/api/v1/namespaces/{namespace}/pods",
        _pod(f"orphan-{uid}", labels, restart="Always"),
        ok=(201,),
    )
    template = _pod("unused", labels, restart="Always")
    del template["metadata"]["name"], template["apiVersion"], template["kind"]
    path = _owners_path(namespace, kind)
    body = {
        "apiVersion": "v1" if rc else "apps/v1",
        "kind": kind,
        "metadata": {"name": name},
        "spec": {
            "replicas": 2,
            "selector": dict(labels) if rc else {"matchLabels": labels},
            "template": template,
        },
    }
    created = cluster.api("POST", path, body, ok=(201,))
    rs_uid = created["metadata"]["uid"]
    end = time.monotonic() + deadline
    missing = "nothing observed"
    while time.monotonic() < end and not give_up():
        missing = _replicaset_missing(
            cluster, namespace, name, uid, rs_uid, 2, "SuccessfulCreate", kind
        )
        if not missing:
            break
        time.sleep(0.5)
    if missing:
        return f"{kind} {namespace}/{name} at 2 replicas: {missing}"
    scale = {
        "apiVersion": "autoscaling/v1",
        "kind": "Scale",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"replicas": 1},
    }
    cluster.api("PUT", f"{path}/{name}/scale", scale)
    while time.monotonic() < end and not give_up():
        missing = _replicaset_missing(
            cluster, namespace, name, uid, rs_uid, 1, "SuccessfulDelete", kind
        )
        if not missing:
            return None
        time.sleep(0.5)
    return f"{kind} {namespace}/{name} scaled to 1: {missing}"


def run_replicationcontroller(
    cluster: LocalCluster,
    namespace: str,
    *,
    deadline: float = 120.0,
    give_up: GiveUp = _never,
) -> str | None:
    """:func:`run_replicaset` with a ReplicationController: every permission of the
    ReplicationController controller's role (replicationcontrollers get,
    replicationcontrollers/status and /finalizers update, pods, Events)."""
    return run_replicaset(
        cluster, namespace, deadline=deadline, give_up=give_up, kind="ReplicationController"
    )


def _owners_path(namespace: str, kind: str) -> str:
    if kind == "ReplicationController":
        return f"/api/v1/namespaces/{namespace}/replicationcontrollers"
    return f"/apis/apps/v1/namespaces/{namespace}/replicasets"


def _replicaset_missing(
    cluster: LocalCluster,
    namespace: str,
    name: str,
    uid: str,
    rs_uid: str,
    replicas: int,
    reason: str,
    kind: str = "ReplicaSet",
) -> str:
    # Scaling down may delete the adopted orphan: it must be there (and adopted) before.
    orphan = cluster.api("GET", f"/api/v1/namespaces/{namespace}/pods/orphan-{uid}", ok=(200, 404))
    refs = (orphan.get("metadata") or {}).get("ownerReferences") or []
    gone = orphan.get("kind") != "Pod"
    if (gone and reason == "SuccessfulCreate") or (
        not gone and not any(r.get("uid") == rs_uid and r.get("controller") for r in refs)
    ):
        return "the orphan pod was not adopted"
    rs = cluster.api("GET", f"{_owners_path(namespace, kind)}/{name}")
    status = rs.get("status") or {}
    generation = rs["metadata"].get("generation", 0)
    if (
        status.get("observedGeneration", 0) < generation
        or status.get("replicas", 0) != replicas
        or status.get("readyReplicas", 0) != replicas
    ):
        return f"status {status} (generation {generation})"
    selector = f"steward-deploy-test={uid}"
    pods = cluster.api("GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}")
    active = [
        p["metadata"]["name"]
        for p in pods.get("items") or []
        if not p["metadata"].get("deletionTimestamp")
    ]
    if len(active) != replicas:
        return f"{len(active)} active pods {sorted(active)}"
    events = cluster.api(
        "GET",
        f"/api/v1/namespaces/{namespace}/events?fieldSelector=involvedObject.name={name}",
    )
    reasons = {e.get("reason") for e in events.get("items") or []}
    if reason not in reasons:
        return f"no {reason} Event (reasons: {sorted(r for r in reasons if r)})"
    return ""


def run_endpoints(
    cluster: LocalCluster,
    namespace: str,
    *,
    deadline: float = 90.0,
    give_up: GiveUp = _never,
) -> str | None:
    """A Service selecting two pods gets its Endpoints (both pods, the Service's port);
    its target port changed, the Endpoints follow; the Service deleted, they go. A second
    Service, whose Endpoints an admission policy refuses, gets a FailedToCreateEndpoint
    Event.

    That uses every permission of the Endpoints controller's role: Endpoints are created
    (endpoints create), replaced (endpoints update) and deleted (endpoints delete), and
    the refused create is reported (events create).
    """
    uid = uuid.uuid4().hex[:6]
    labels = {"steward-deploy-test": uid}
    base = f"/api/v1/namespaces/{namespace}"
    for i in range(2):
        pod = _pod(f"web-{uid}-{i}", labels, restart="Always")
        cluster.api("POST", f"{base}/pods", pod, ok=(201,))
    refused = f"refused-{uid}"
    refusal = _Refusal("", "endpoints", f"object.metadata.name != '{refused}'")
    policy = _refuse(cluster, namespace, refused, refusal)
    probe = {"apiVersion": "v1", "kind": "Endpoints", "metadata": {"name": refused}}
    try:
        end = time.monotonic() + deadline
        refusing = partial(_admission_missing, cluster, f"{base}/endpoints", probe)
        missing = _poll(refusing, end, give_up)
        if missing:
            return f"the admission policy refusing Endpoints {refused}: {missing}"
        name = f"web-{uid}"
        cluster.api("POST", f"{base}/services", _service(name, labels, 8080), ok=(201,))
        cluster.api("POST", f"{base}/services", _service(refused, labels, 8080), ok=(201,))
        missing = _poll(partial(_endpoints_missing, cluster, base, name, 8080), end, give_up)
        if missing:
            return f"Endpoints {namespace}/{name} of 2 pods on port 8080: {missing}"
        patch = {"spec": {"ports": [{"name": "http", "port": 80, "targetPort": 9090}]}}
        cluster.api("PATCH", f"{base}/services/{name}", patch)
        missing = _poll(partial(_endpoints_missing, cluster, base, name, 9090), end, give_up)
        if missing:
            return f"Endpoints {namespace}/{name} after the Service's new targetPort: {missing}"
        cluster.api("DELETE", f"{base}/services/{name}")
        missing = _poll(partial(_endpoints_left, cluster, base, name), end, give_up)
        if missing:
            return f"Endpoints {namespace}/{name} after deleting its Service: {missing}"
        event = partial(_event_missing, cluster, base, refused, "FailedToCreateEndpoint")
        missing = _poll(event, end, give_up)
        return f"Endpoints {refused}: {missing}" if missing else None
    finally:
        _unrefuse(cluster, policy)


def _service(name: str, selector: dict[str, str], target_port: int | str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": name},
        "spec": {
            "selector": selector,
            "ports": [{"name": "http", "port": 80, "targetPort": target_port}],
        },
    }


@dataclass(frozen=True)
class _Refusal:
    """What an admission policy refuses to create: objects of ``resource`` (core group when
    ``group`` is empty) for which the CEL ``allow`` is false."""

    group: str
    resource: str
    allow: str


def _refuse(
    cluster: LocalCluster, namespace: str, name: str, refusal: _Refusal
) -> list[tuple[str, str]]:
    """A ValidatingAdmissionPolicy, bound to ``namespace``, that refuses the creations
    ``refusal`` names (422 Invalid, not 403); the (name, plural) of what it created."""
    policy = f"steward-deploy-test-{name}"
    group = "/apis/admissionregistration.k8s.io/v1"
    cluster.api(
        "POST",
        f"{group}/validatingadmissionpolicies",
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": policy},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {
                    "resourceRules": [
                        {
                            "apiGroups": [refusal.group],
                            "apiVersions": ["v1"],
                            "operations": ["CREATE"],
                            "resources": [refusal.resource],
                        }
                    ]
                },
                "validations": [
                    {
                        "expression": refusal.allow,
                        "message": f"this test's admission policy refuses these {refusal.resource}",
                    }
                ],
            },
        },
        ok=(201,),
    )
    cluster.api(
        "POST",
        f"{group}/validatingadmissionpolicybindings",
        {
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": policy},
            "spec": {
                "policyName": policy,
                "validationActions": ["Deny"],
                "matchResources": {
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}
                },
            },
        },
        ok=(201,),
    )
    return [
        (policy, "validatingadmissionpolicybindings"),
        (policy, "validatingadmissionpolicies"),
    ]


def _unrefuse(cluster: LocalCluster, made: list[tuple[str, str]]) -> None:
    """Delete what :func:`_refuse` created."""
    for name, plural in made:
        path = f"/apis/admissionregistration.k8s.io/v1/{plural}/{name}"
        cluster.api("DELETE", path, ok=(200, 404))


def _poll(missing: Callable[[], str], end: float, give_up: GiveUp) -> str:
    """'' once ``missing`` says nothing is missing, else its last word at ``end`` (or
    when ``give_up``)."""
    said = "nothing observed"
    while time.monotonic() < end and not give_up():
        said = missing()
        if not said:
            return ""
        time.sleep(0.25)
    return said


def _admission_missing(cluster: LocalCluster, collection: str, body: dict[str, Any]) -> str:
    """'' once the API server refuses (a dry run of) creating ``body`` in ``collection``."""
    answer = cluster.api("POST", f"{collection}?dryRun=All", body, ok=(201, 422))
    return "" if answer.get("code") == 422 else "not in effect yet"


def _endpoints_left(cluster: LocalCluster, base: str, name: str) -> str:
    found = cluster.api("GET", f"{base}/endpoints/{name}", ok=(200, 404))
    return "still there" if found.get("kind") == "Endpoints" else ""


def _event_missing(cluster: LocalCluster, base: str, name: str, reason: str) -> str:
    events = cluster.api("GET", f"{base}/events?fieldSelector=involvedObject.name={name}")
    reasons = {e.get("reason") for e in events.get("items") or [] if e.get("reason")}
    if reason in reasons:
        return ""
    return f"no {reason} Event (reasons: {sorted(reasons)})"


def _endpoints_missing(cluster: LocalCluster, base: str, name: str, port: int) -> str:
    found = cluster.api("GET", f"{base}/endpoints/{name}", ok=(200, 404))
    if found.get("kind") != "Endpoints":
        return "no Endpoints"
    subsets = found.get("subsets") or []
    addresses = [
        a.get("ip")
        for s in subsets
        for a in [*(s.get("addresses") or []), *(s.get("notReadyAddresses") or [])]
    ]
    ports = {p.get("port") for s in subsets for p in s.get("ports") or []}
    if len(addresses) != 2 or ports != {port}:
        return f"addresses {addresses}, ports {sorted(p for p in ports if p)}"
    return ""


def run_endpointslices(
    cluster: LocalCluster,
    namespace: str,
    *,
    deadline: float = 120.0,
    give_up: GiveUp = _never,
) -> str | None:
    """A Service whose named target port two pods resolve differently (8080, 9090) gets
    two EndpointSlices managed by Steward, one pod each; a third pod on 8080 joins the
    first slice; the pod on 9090 deleted, its slice goes. A second Service, whose slices an
    admission policy refuses (only Steward's), gets a FailedToUpdateEndpointSlices Event.
    Upstream's slices of the first Service (kube-controller-manager's endpointslice-controller
    runs beside Steward's) are still there at the end.

    That uses every permission of the EndpointSlice controller's role that this cluster
    checks: slices are created (endpointslices create), one is changed in place
    (endpointslices update: the same UID with another endpoint) and one deleted
    (endpointslices delete), the refused creation is reported (events create); the
    Services, pods, nodes and slices come through the informer (their list and watch).
    The slices name their Service as owner with blockOwnerDeletion, which needs
    services/finalizers update only under the OwnerReferencesPermissionEnforcement
    admission plugin.
    """
    uid = uuid.uuid4().hex[:6]
    labels = {"steward-deploy-test": uid}
    base = f"/api/v1/namespaces/{namespace}"
    slices = f"/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices"
    cluster.api("POST", f"{base}/pods", _serving_pod(f"a-{uid}", labels, 8080), ok=(201,))
    cluster.api("POST", f"{base}/pods", _serving_pod(f"b-{uid}", labels, 9090), ok=(201,))
    refused = f"refused-{uid}"
    labels_of = "object.metadata.labels"
    allow = (
        f"!has({labels_of}) || !('{_SERVICE_NAME}' in {labels_of}) "
        f"|| !('{_SLICE_MANAGED_BY}' in {labels_of}) "
        f"|| {labels_of}['{_SERVICE_NAME}'] != '{refused}' "
        f"|| {labels_of}['{_SLICE_MANAGED_BY}'] != '{SLICES_MANAGED_BY}'"
    )
    policy = _refuse(
        cluster, namespace, refused, _Refusal("discovery.k8s.io", "endpointslices", allow)
    )
    probe = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": f"{refused}-probe",
            "labels": {_SERVICE_NAME: refused, _SLICE_MANAGED_BY: SLICES_MANAGED_BY},
        },
        "addressType": "IPv4",
        "endpoints": [],
    }
    try:
        end = time.monotonic() + deadline
        missing = _poll(partial(_admission_missing, cluster, slices, probe), end, give_up)
        if missing:
            return f"the admission policy refusing the slices of {refused}: {missing}"
        name = f"web-{uid}"
        cluster.api("POST", f"{base}/services", _service(name, labels, "http"), ok=(201,))
        cluster.api("POST", f"{base}/services", _service(refused, labels, "http"), ok=(201,))
        shape = partial(_slices_missing, cluster, slices, name)
        missing = _poll(partial(shape, {8080: 1, 9090: 1}), end, give_up)
        if missing:
            return (
                f"Steward's slices of {namespace}/{name}, one pod on 8080, one on 9090: {missing}"
            )
        first = _slice_uids(cluster, slices, name)[8080]
        cluster.api("POST", f"{base}/pods", _serving_pod(f"c-{uid}", labels, 8080), ok=(201,))
        missing = _poll(partial(shape, {8080: 2, 9090: 1}, {8080: first}), end, give_up)
        if missing:
            return f"Steward's slice of {namespace}/{name} on 8080 after a second pod: {missing}"
        cluster.api("DELETE", f"{base}/pods/b-{uid}?gracePeriodSeconds=0", ok=(200, 404))
        missing = _poll(partial(shape, {8080: 2}, {8080: first}), end, give_up)
        if missing:
            return (
                f"Steward's slices of {namespace}/{name} after deleting the pod on 9090: {missing}"
            )
        event = partial(_event_missing, cluster, base, refused, "FailedToUpdateEndpointSlices")
        missing = _poll(event, end, give_up)
        if missing:
            return f"Service {refused}: {missing}"
        missing = _poll(partial(_upstream_slices_missing, cluster, slices, name), end, give_up)
        return f"upstream's slices of {namespace}/{name}: {missing}" if missing else None
    finally:
        _unrefuse(cluster, policy)


def _serving_pod(name: str, labels: dict[str, str], port: int) -> dict[str, Any]:
    """A pod whose container port ``http`` is ``port``."""
    pod = _pod(name, labels, restart="Always")
    pod["spec"]["containers"][0]["ports"] = [{"name": "http", "containerPort": port}]
    return pod


def _slices_of(
    cluster: LocalCluster, slices: str, service: str, managed_by: str = SLICES_MANAGED_BY
) -> list[dict[str, Any]]:
    selector = f"{_SERVICE_NAME}={service},{_SLICE_MANAGED_BY}={managed_by}"
    found = cluster.api("GET", f"{slices}?labelSelector={selector}")
    return [s for s in found.get("items") or [] if not s["metadata"].get("deletionTimestamp")]


def _port(slice_: dict[str, Any]) -> int | None:
    ports = [p.get("port") for p in slice_.get("ports") or []]
    return ports[0] if len(ports) == 1 else None


def _slice_uids(cluster: LocalCluster, slices: str, service: str) -> dict[int | None, str]:
    """The UID of each of Steward's slices of ``service``, by its one port."""
    return {_port(s): s["metadata"]["uid"] for s in _slices_of(cluster, slices, service)}


def _slices_missing(
    cluster: LocalCluster,
    slices: str,
    service: str,
    want: dict[int, int],
    same: dict[int, str] | None = None,
) -> str:
    """'' once Steward's slices of ``service`` are one per port of ``want``, each with
    that many endpoints (and, for the ports of ``same``, still the slice of that UID)."""
    found = _slices_of(cluster, slices, service)
    shape = {_port(s): len(s.get("endpoints") or []) for s in found}
    if len(found) != len(want) or shape != want:
        return f"endpoints by port {shape} in {len(found)} slices"
    uids = {_port(s): s["metadata"]["uid"] for s in found}
    replaced = {port: uid for port, uid in (same or {}).items() if uids.get(port) != uid}
    return f"not updated in place: the slices of {sorted(replaced)} are new" if replaced else ""


def _upstream_slices_missing(cluster: LocalCluster, slices: str, service: str) -> str:
    found = _slices_of(cluster, slices, service, UPSTREAM_SLICES_MANAGED_BY)
    return "" if found else "none (Steward's controller must leave them alone)"


REVISION_HASH = "controller-revision-hash"
"""The label of a DaemonSet's pods and ControllerRevisions naming the revision's hash."""


def run_daemonset(
    cluster: LocalCluster,
    namespace: str,
    *,
    deadline: float = 180.0,
    give_up: GiveUp = _never,
) -> str | None:
    """A DaemonSet (revisionHistoryLimit 0) adopts an orphan pod of its selector on one
    node and an orphan ControllerRevision of its selector, and ends with one pod of its
    template on every node, reported in its status; the orphan pod (not of its template)
    is replaced and the orphan revision (beyond the history limit) deleted. Its template
    changed, every pod is replaced and the first revision goes. A revision planted under
    the first revision's name (not of the DaemonSet's selector), the template rolled back
    to the first: the name is taken by another template, so the status's collisionCount
    becomes 1 and the pods roll to a revision of a third name, the planted one untouched.

    That uses every permission of the DaemonSet controller's role that this cluster
    checks: the DaemonSet is read fresh before adopting and on the collision (daemonsets
    get), the orphans are adopted (pods patch, controllerrevisions patch), the orphan
    revision gets its hash label (controllerrevisions update) and is deleted
    (controllerrevisions delete), revisions are created (controllerrevisions create), the
    planted one is read after its name was refused (controllerrevisions get), pods are
    created and deleted (pods create, delete), the status and the collision count are
    written (daemonsets/status update), Events are posted (events create); DaemonSets,
    pods, revisions and nodes come through the informer (their list and watch). The pods
    and revisions name their DaemonSet as owner with blockOwnerDeletion, which needs
    daemonsets/finalizers update only under the OwnerReferencesPermissionEnforcement
    admission plugin.
    """
    uid = uuid.uuid4().hex[:6]
    labels = {"steward-deploy-test": uid}
    name = f"ds-{uid}"
    base = f"/api/v1/namespaces/{namespace}"
    apps = f"/apis/apps/v1/namespaces/{namespace}"
    nodes = _schedulable_nodes(cluster)
    if not nodes:
        return "the cluster has no node without taints"
    orphan = _pod(f"orphan-{uid}", labels, restart="Always")
    orphan["spec"]["nodeName"] = nodes[0]
    cluster.api("POST", f"{base}/pods", orphan, ok=(201,))
    first = _daemon_template(labels, "first")
    history = _revision(f"history-{uid}", labels, _daemon_template(labels, "older"))
    _create_as_go_client(cluster, namespace, history)
    body = {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": labels},
            "template": first,
            "revisionHistoryLimit": 0,
        },
    }
    created = cluster.api("POST", f"{apps}/daemonsets", body, ok=(201,))
    ds_uid = created["metadata"]["uid"]
    end = time.monotonic() + deadline
    rolled = partial(_daemon_missing, cluster, namespace, name, ds_uid, nodes)
    missing = _poll(rolled, end, give_up)
    if missing:
        return f"DaemonSet {namespace}/{name} on {len(nodes)} nodes: {missing}"
    for what, path in (
        ("the orphan pod", f"{base}/pods/orphan-{uid}"),
        ("the orphan revision", f"{apps}/controllerrevisions/history-{uid}"),
    ):
        missing = _poll(partial(_gone, cluster, path), end, give_up)
        if missing:
            return f"DaemonSet {namespace}/{name}: {what} adopted and not deleted: {missing}"
    event = partial(_event_missing, cluster, base, name, "SuccessfulCreate")
    missing = _poll(event, end, give_up)
    if missing:
        return f"DaemonSet {namespace}/{name}: {missing}"
    hashes = _revision_hashes(cluster, apps, ds_uid)
    if len(hashes) != 1:
        return f"DaemonSet {namespace}/{name}: revisions {hashes}, expected its current one"
    (first_hash,) = hashes
    second = _daemon_template(labels, "second")
    cluster.api("PATCH", f"{apps}/daemonsets/{name}", {"spec": {"template": second}})
    missing = _poll(partial(rolled, avoid={first_hash}), end, give_up)
    if missing:
        return f"DaemonSet {namespace}/{name} after its template changed: {missing}"
    first_revision = f"{apps}/controllerrevisions/{name}-{first_hash}"
    missing = _poll(partial(_gone, cluster, first_revision), end, give_up)
    if missing:
        return f"DaemonSet {namespace}/{name}: its first revision beyond the limit: {missing}"
    hashes = _revision_hashes(cluster, apps, ds_uid)
    if len(hashes) != 1:
        return f"DaemonSet {namespace}/{name}: revisions {hashes}, expected its current one"
    (second_hash,) = hashes
    planted = _revision(f"{name}-{first_hash}", {"steward-deploy-test-planted": uid}, second)
    planted_uid = _create_as_go_client(cluster, namespace, planted)["metadata"]["uid"]
    cluster.api("PATCH", f"{apps}/daemonsets/{name}", {"spec": {"template": first}})
    missing = _poll(partial(rolled, avoid={first_hash, second_hash}, collisions=1), end, give_up)
    if missing:
        return f"DaemonSet {namespace}/{name} rolled back onto a taken name: {missing}"
    kept = cluster.api("GET", first_revision, ok=(200, 404))
    untouched = (kept.get("metadata") or {}).get("uid") == planted_uid
    if not untouched or kept.get("data") != planted["data"]:
        return f"the revision planted as {name}-{first_hash} was changed or deleted: {kept}"
    return None


def _schedulable_nodes(cluster: LocalCluster) -> list[str]:
    """The nodes a DaemonSet without tolerations or a node selector runs on: those
    without taints (kwok's; the real nodes carry theirs)."""
    found = cluster.api("GET", "/api/v1/nodes")
    return sorted(
        n["metadata"]["name"] for n in found.get("items") or [] if not n["spec"].get("taints")
    )


def _daemon_template(labels: dict[str, str], variant: str) -> dict[str, Any]:
    """A DaemonSet's pod template; ``variant`` tells templates apart."""
    return {
        "metadata": {"labels": labels, "annotations": {"steward-deploy-test/variant": variant}},
        "spec": {
            "restartPolicy": "Always",
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": "busybox:1.36", "command": ["sleep", "1d"]}],
        },
    }


def _revision(name: str, labels: dict[str, str], template: dict[str, Any]) -> dict[str, Any]:
    """An orphan ControllerRevision recording ``template`` (without a hash label)."""
    return {
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "metadata": {"name": name, "labels": labels},
        "data": {"spec": {"template": {**template, "$patch": "replace"}}},
        "revision": 1,
    }


def _create_as_go_client(cluster: LocalCluster, namespace: str, doc: dict[str, Any]) -> Any:
    """Create ``doc`` in ``namespace`` with kubectl, as a Go client writes it (JSON with
    sorted keys, compact); the created object.

    A ControllerRevision's data is kept as the bytes it was sent in, and a strategic merge
    patch of the revision (an adoption, as upstream's and Steward's claim it) writes it
    back re-encoded that way: data sent otherwise would then differ, and the API server
    refuses the patch (data is immutable)."""
    kubeconfig = f"--kubeconfig={cluster.kubeconfig}"
    done = subprocess.run(
        [KUBECTL, kubeconfig, "-n", namespace, "create", "-o", "json", "-f", "-"],
        input=json.dumps(doc),
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return json.loads(done.stdout)


def _gone(cluster: LocalCluster, path: str) -> str:
    found = cluster.api("GET", path, ok=(200, 404))
    return "still there" if found.get("metadata") else ""


def _revision_hashes(cluster: LocalCluster, apps: str, ds_uid: str) -> list[str]:
    """The hash labels of the ControllerRevisions the DaemonSet ``ds_uid`` controls."""
    found = cluster.api("GET", f"{apps}/controllerrevisions")
    return sorted(
        (r["metadata"].get("labels") or {}).get(REVISION_HASH, "")
        for r in found.get("items") or []
        if _controlled_by(r, ds_uid) and not r["metadata"].get("deletionTimestamp")
    )


def _controlled_by(obj: dict[str, Any], uid: str) -> bool:
    refs = obj["metadata"].get("ownerReferences") or []
    return any(r.get("uid") == uid and r.get("controller") for r in refs)


def _daemon_missing(
    cluster: LocalCluster,
    namespace: str,
    name: str,
    ds_uid: str,
    nodes: list[str],
    *,
    avoid: set[str] | None = None,
    collisions: int | None = None,
) -> str:
    """'' once the DaemonSet runs exactly one pod on each of ``nodes``, all of its current
    revision (whose hash is none of ``avoid``) and its status says so for this generation
    (with ``collisions`` as collisionCount, when given)."""
    apps = f"/apis/apps/v1/namespaces/{namespace}"
    ds = cluster.api("GET", f"{apps}/daemonsets/{name}")
    status = ds.get("status") or {}
    want = len(nodes)
    counts = {
        k: status.get(k, 0)
        for k in (
            "desiredNumberScheduled",
            "currentNumberScheduled",
            "numberReady",
            "numberAvailable",
            "updatedNumberScheduled",
        )
    }
    if (
        status.get("observedGeneration", 0) < ds["metadata"].get("generation", 0)
        or set(counts.values()) != {want}
        or status.get("numberMisscheduled", 0)
        or (collisions is not None and status.get("collisionCount") != collisions)
    ):
        return f"status {status} (generation {ds['metadata'].get('generation')})"
    hashes = _revision_hashes(cluster, apps, ds_uid)
    if len(hashes) != 1 or hashes[0] in (avoid or set()):
        return f"revisions of hashes {hashes} (not {sorted(avoid or ())})"
    selector = ",".join(f"{k}={v}" for k, v in ds["spec"]["selector"]["matchLabels"].items())
    pods = cluster.api("GET", f"/api/v1/namespaces/{namespace}/pods?labelSelector={selector}")
    placed = sorted(
        (p["spec"].get("nodeName", ""), (p["metadata"].get("labels") or {}).get(REVISION_HASH))
        for p in pods.get("items") or []
        if not p["metadata"].get("deletionTimestamp")
    )
    if placed != [(node, hashes[0]) for node in nodes]:
        return f"pods (node, revision) {placed}, expected one of {hashes[0]} on each of {nodes}"
    return ""


_METRIC_FAILURES = ("FailedGetResourceMetric", "FailedGetPodsMetric", "FailedGetExternalMetric")
"""The Warning Events of an HPA whose Resource, Pods and External metrics give no value."""


def run_hpa(
    cluster: LocalCluster,
    namespace: str,
    *,
    deadline: float = 90.0,
    give_up: GiveUp = _never,
) -> str | None:
    """An HPA whose Deployment runs fewer replicas than its minReplicas scales it up to
    them (SuccessfulRescale Event, desiredReplicas in its status). A second HPA, whose
    Deployment is within its bounds, asks the three metrics APIs for a Resource (cpu), a
    Pods and an External metric: each answer must be something other than a refusal (this
    cluster serves none of those APIs, so the API server answers 404, or 503 while an
    APIService is unavailable, once it has authorized the request; without the right it
    answers 403 first), as the metric's Warning Event and the ScalingActive condition of
    the status say.

    That uses every permission of the HPA controller's role that this cluster checks: the
    Deployments' /scale is read and written (``*/scale`` get, update), PodMetrics are
    listed (metrics.k8s.io pods list), the Pods metric is read from custom.metrics.k8s.io
    and the External one listed from external.metrics.k8s.io, the status is written
    (horizontalpodautoscalers/status update), Events are posted (events create); HPAs and
    pods come through the informer (their list and watch). The scale target's resource is
    found through discovery, which every authenticated user may read here
    (system:discovery).
    """
    uid = uuid.uuid4().hex[:6]
    apps = f"/apis/apps/v1/namespaces/{namespace}"
    hpas = f"/apis/autoscaling/v2/namespaces/{namespace}/horizontalpodautoscalers"
    base = f"/api/v1/namespaces/{namespace}"
    scaled, measured = f"scaled-{uid}", f"measured-{uid}"
    for name in (scaled, measured):
        cluster.api("POST", f"{apps}/deployments", _deployment(name), ok=(201,))
    cpu = {
        "type": "Resource",
        "resource": {"name": "cpu", "target": {"type": "Utilization", "averageUtilization": 50}},
    }
    cluster.api("POST", hpas, _hpa(scaled, 2, 3, [cpu]), ok=(201,))
    metrics = [
        cpu,
        {
            "type": "Pods",
            "pods": {
                "metric": {"name": "steward_test_requests"},
                "target": {"type": "AverageValue", "averageValue": "10"},
            },
        },
        {
            "type": "External",
            "external": {
                "metric": {"name": "steward_test_queue"},
                "target": {"type": "AverageValue", "averageValue": "10"},
            },
        },
    ]
    cluster.api("POST", hpas, _hpa(measured, 1, 3, metrics), ok=(201,))
    end = time.monotonic() + deadline

    def scale_refused() -> str:
        """The controller's Warning Event of a scale read or write that was refused."""
        return _refused(
            _event_messages(cluster, base, scaled, "FailedGetScale")
            + _event_messages(cluster, base, scaled, "FailedRescale")
        )

    missing = _poll(
        partial(_rescaled_missing, cluster, apps, hpas, scaled, 2),
        end,
        lambda: give_up() or bool(scale_refused()),
    )
    if missing:
        refused = scale_refused()
        if refused:
            return (
                f"HPA {namespace}/{scaled}: the scale subresource refused the controller: {refused}"
            )
        return f"HPA {namespace}/{scaled} below its minReplicas: {missing}"
    missing = _poll(
        partial(_event_missing, cluster, base, scaled, "SuccessfulRescale"), end, give_up
    )
    if missing:
        return f"HPA {namespace}/{scaled}: {missing}"
    for reason in _METRIC_FAILURES:
        missing = _poll(partial(_event_missing, cluster, base, measured, reason), end, give_up)
        if missing:
            return f"HPA {namespace}/{measured}: {missing}"
        refused = _refused(_event_messages(cluster, base, measured, reason))
        if refused:
            return f"HPA {namespace}/{measured}: the metrics API refused the controller: {refused}"
    inactive = partial(_inactive_missing, cluster, hpas, measured, "FailedGetResourceMetric")
    missing = _poll(inactive, end, give_up)
    if missing:
        return f"HPA {namespace}/{measured} without metrics: {missing}"
    return None


def _deployment(name: str) -> dict[str, Any]:
    """A Deployment of one replica whose pods ask for CPU (nothing here runs them)."""
    labels = {"steward-deploy-test": name}
    pod = _pod("unused", labels, restart="Always")
    pod["spec"]["containers"][0].update(
        command=["sleep", "1d"], resources={"requests": {"cpu": "100m"}}
    )
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels}, "spec": pod["spec"]},
        },
    }


def _hpa(target: str, least: int, most: int, metrics: list[dict[str, Any]]) -> dict[str, Any]:
    """An autoscaling/v2 HPA of the Deployment ``target``, named after it."""
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": target},
        "spec": {
            "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": target},
            "minReplicas": least,
            "maxReplicas": most,
            "metrics": metrics,
        },
    }


def _rescaled_missing(cluster: LocalCluster, apps: str, hpas: str, name: str, want: int) -> str:
    """'' once the Deployment ``name`` has ``want`` replicas and its HPA's status says so."""
    scale = cluster.api("GET", f"{apps}/deployments/{name}/scale")
    replicas = (scale.get("spec") or {}).get("replicas")
    status = cluster.api("GET", f"{hpas}/{name}").get("status") or {}
    if replicas != want or status.get("desiredReplicas") != want:
        return f"the Deployment's scale at {replicas}, the HPA's status {status}"
    return ""


def _event_messages(cluster: LocalCluster, base: str, name: str, reason: str) -> list[str]:
    events = cluster.api("GET", f"{base}/events?fieldSelector=involvedObject.name={name}")
    return [str(e.get("message")) for e in events.get("items") or [] if e.get("reason") == reason]


def _refused(messages: list[str]) -> str:
    """The first of ``messages`` that tells of the API server's 403, else ''."""
    return next((m for m in messages if "HTTP 403" in m or " is forbidden: " in m), "")


def _inactive_missing(cluster: LocalCluster, hpas: str, name: str, reason: str) -> str:
    """'' once the HPA's status says ScalingActive False for ``reason``, for an answer
    that was not a refusal."""
    status = cluster.api("GET", f"{hpas}/{name}").get("status") or {}
    found = [
        c
        for c in status.get("conditions") or []
        if c.get("type") == "ScalingActive" and c.get("status") == "False"
    ]
    if not found or found[0].get("reason") != reason:
        return f"conditions {status.get('conditions')}"
    refused = _refused([str(found[0].get("message"))])
    return f"refused: {refused}" if refused else ""


def _configmap(name: str, *, owner: dict[str, Any] | None = None, **meta: Any) -> dict[str, Any]:
    """A ConfigMap (owned by ``owner``, a ConfigMap read from the API server, if given)."""
    metadata: dict[str, Any] = {"name": name, **meta}
    if owner is not None:
        metadata["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "name": owner["metadata"]["name"],
                "uid": owner["metadata"]["uid"],
            }
        ]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": metadata, "data": {"k": "v"}}


def run_garbagecollector(
    cluster: LocalCluster,
    namespace: str,
    *,
    deadline: float = 90.0,
    give_up: GiveUp = _never,
) -> str | None:
    """Three ConfigMaps each own one: the first owner deleted (background), its dependent is
    collected; the second deleted with propagationPolicy Orphan, its dependent stays
    without the reference and the owner goes (its ``orphan`` finalizer removed); the third
    lives in another namespace, so its dependent's reference is dangling: the dependent is
    collected and gets an ``OwnerRefInvalidNamespace`` Event.

    That uses every permission of the garbage collector's role: ConfigMaps (and every
    other type) come through the informer (their list and watch), the dependents and
    owners are read live (get), the dependents collected (delete), the orphan's reference
    and the owner's finalizer removed (patch), the Event posted (events create).
    """
    uid = uuid.uuid4().hex[:6]
    base = f"/api/v1/namespaces/{namespace}"
    other = new_namespace(cluster, f"gc-away-{uid}")
    made: dict[str, dict[str, Any]] = {}
    for name, where in (
        ("gone", base),
        ("orphaning", base),
        ("away", f"/api/v1/namespaces/{other}"),
    ):
        made[name] = cluster.api(
            "POST", f"{where}/configmaps", _configmap(f"{name}-{uid}"), ok=(201,)
        )
    for name in made:
        dependent = _configmap(f"{name}-dependent-{uid}", owner=made[name])
        cluster.api("POST", f"{base}/configmaps", dependent, ok=(201,))
    cluster.api("DELETE", f"{base}/configmaps/gone-{uid}")
    orphan = {"apiVersion": "v1", "kind": "DeleteOptions", "propagationPolicy": "Orphan"}
    cluster.api("DELETE", f"{base}/configmaps/orphaning-{uid}", orphan)
    end = time.monotonic() + deadline
    for what, path in (
        ("the dependent of a deleted owner", f"{base}/configmaps/gone-dependent-{uid}"),
        ("the owner deleted with Orphan", f"{base}/configmaps/orphaning-{uid}"),
        (
            "the dependent of an owner in another namespace",
            f"{base}/configmaps/away-dependent-{uid}",
        ),
    ):
        missing = _poll(partial(_gone, cluster, path), end, give_up)
        if missing:
            return f"{what} ({path}): {missing}"
    kept = cluster.api("GET", f"{base}/configmaps/orphaning-dependent-{uid}", ok=(200, 404))
    if kept.get("kind") != "ConfigMap" or kept["metadata"].get("ownerReferences"):
        return f"the orphaned dependent, expected there without owners: {kept}"
    event = partial(
        _event_missing, cluster, base, f"away-dependent-{uid}", "OwnerRefInvalidNamespace"
    )
    missing = _poll(event, end, give_up)
    if missing:
        return f"the dependent of an owner in another namespace: {missing}"
    return None


HOLD = "steward.io/deploy-test-hold"
"""A finalizer of this test's: it keeps a ConfigMap, so a namespace being deleted keeps
content (and its deletion conditions can be seen) until the test removes it."""


def run_namespace(
    cluster: LocalCluster,
    namespace: str,
    *,
    deadline: float = 90.0,
    give_up: GiveUp = _never,
) -> str | None:
    """``namespace``, holding a ConfigMap, a Secret and a ConfigMap kept by a finalizer of
    this test's, is deleted: the first two go, the namespace's status says what keeps it
    (``NamespaceContentRemaining`` and ``NamespaceFinalizersRemaining`` True, naming the
    finalizer); the finalizer removed, the namespace is finalized and gone.

    That uses every permission of the namespace controller's role this cluster checks:
    namespaces come through the informer (their list, granted with every type's, and
    watch) and are read fresh (get), the content is deleted by collection
    (deletecollection) and listed (list), the conditions are written (namespaces/status
    update; the API server itself sets the phase Terminating, so only the conditions tell
    a refused status write), the ``kubernetes`` finalizer removed (namespaces/finalize
    update). One-by-one ``delete`` is for types without ``deletecollection``, which this
    cluster does not serve. A refused deletion shows in the
    ``NamespaceDeletionContentFailure`` condition, which ends the wait early.
    """
    base = f"/api/v1/namespaces/{namespace}"
    cluster.api("POST", f"{base}/configmaps", _configmap("plain"), ok=(201,))
    cluster.api("POST", f"{base}/configmaps", _configmap("held", finalizers=[HOLD]), ok=(201,))
    secret = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "secret"}}
    cluster.api("POST", f"{base}/secrets", secret, ok=(201,))
    cluster.api("DELETE", f"/api/v1/namespaces/{namespace}")
    end = time.monotonic() + deadline

    refused = partial(_content_refused, cluster, namespace)

    def stop() -> bool:
        return give_up() or bool(refused())

    try:
        for what, path in (("the ConfigMap", "configmaps/plain"), ("the Secret", "secrets/secret")):
            missing = _poll(partial(_gone, cluster, f"{base}/{path}"), end, stop)
            if missing:
                why = refused()
                if why:
                    return f"namespace {namespace}: the API server refused the controller: {why}"
                return f"namespace {namespace} being deleted: {what}: {missing}"
        missing = _poll(partial(_held_missing, cluster, namespace), end, stop)
        why = refused()
        if why:
            return f"namespace {namespace}: the API server refused the controller: {why}"
        if missing:
            return f"namespace {namespace} held by a finalizer: {missing}"
    finally:
        cluster.api(
            "PATCH", f"{base}/configmaps/held", {"metadata": {"finalizers": None}}, ok=(200, 404)
        )
    missing = _poll(partial(_gone, cluster, f"/api/v1/namespaces/{namespace}"), end, give_up)
    if missing:
        return f"namespace {namespace} with nothing left: {missing}"
    return None


def _held_missing(cluster: LocalCluster, namespace: str) -> str:
    """'' once the namespace's conditions say content remains, held by :data:`HOLD`."""
    found = cluster.api("GET", f"/api/v1/namespaces/{namespace}")
    conditions = {c.get("type"): c for c in (found.get("status") or {}).get("conditions") or []}
    remaining = conditions.get("NamespaceContentRemaining") or {}
    finalizers = conditions.get("NamespaceFinalizersRemaining") or {}
    if (
        remaining.get("status") != "True"
        or finalizers.get("status") != "True"
        or HOLD not in str(finalizers.get("message"))
    ):
        return f"conditions {sorted(conditions.values(), key=str)}"
    return ""


def _content_refused(cluster: LocalCluster, namespace: str) -> str:
    """The message of the namespace's ``NamespaceDeletionContentFailure`` condition when it
    tells of a refusal (403), else '' (the controller logs such a failure as the API
    server's message, without the status code)."""
    found = cluster.api("GET", f"/api/v1/namespaces/{namespace}", ok=(200, 404))
    conditions = (found.get("status") or {}).get("conditions") or []
    return _refused(
        [
            str(c.get("message"))
            for c in conditions
            if c.get("type") == "NamespaceDeletionContentFailure" and c.get("status") == "True"
        ]
    )
