"""Every rule of every role the manifests bind is needed: with any one rule removed, the
service can no longer do its work.

For each rule of each role bound to a service's ServiceAccount, a copy of the role without
that rule is bound (by copies of the manifest's bindings) to a fresh ServiceAccount, and the
service runs one short exercise under that identity, the other services at their full
rights: the informer serves a watch of pods to a caller with a token (so it reviews the
token and the caller's access), the manager leads and registers the Job controller
(reviewing the controller's token and its register), the Job controller runs a Job to
completion (adoption, pods, status, Events), the ReplicaSet controller keeps a ReplicaSet's
pods as it scales (adoption, creation, deletion, status, Events), the ReplicationController
controller likewise a ReplicationController's, the Endpoints controller
keeps a Service's Endpoints (creation, update, deletion, and the Event of a refused
creation), the EndpointSlice controller keeps a Service's EndpointSlices (creation, update
in place, deletion, and the Event of a refused creation), the DaemonSet controller keeps a
DaemonSet's pods and history (adoption of a pod and a revision, a pod per node, a rolling
update, revisions beyond the limit deleted, a revision name taken by another template), the
HorizontalPodAutoscaler controller scales a Deployment up to its HPA's minReplicas and asks
the three metrics APIs for an HPA's metrics (an answer other than 403 from each; none is
served here), the garbage collector collects the dependent of a deleted owner, orphans the
dependent of an owner deleted with propagationPolicy Orphan, and collects a dependent naming
an owner of another namespace with its OwnerRefInvalidNamespace Event, the namespace
controller empties a namespace being deleted, writes the conditions of what keeps it (a
finalizer) and finalizes it; and the identity and certificate controllers
(``tests/deploy/identity_exercises.py``): the serviceaccount controller makes a new
namespace's ``default`` account and makes it again once deleted, the root CA publisher
publishes ``kube-root-ca.crt`` and writes it back once changed, the ClusterRole aggregation
controller gives an aggregate the rules of the role it selects, the CSR approver approves a
bootstrapping kubelet's client certificate request, the CSR signer issues an approved client
certificate, the CSR cleaner deletes a request denied two hours ago, the tokens controller
fills in a token Secret and deletes that of a missing account, the legacy token cleaner
labels an unused token and deletes one invalid since long ago, the bootstrap signer signs
cluster-info with a bootstrap token, the token cleaner deletes an expired one; and the
node, pod and quota controllers (``tests/deploy/node_exercises.py``, each with flags
that make it quick): the node lifecycle controller finds a node silent past its grace
period (after a write of the node it was not told of, so it reads the node afresh),
sets its conditions Unknown, gives it the unreachable taints and marks its pod not ready
with an Event, the taint eviction controller deletes a pod from a node with a NoExecute
taint it does not tolerate (DisruptionTarget condition and Event first), the pod garbage
collector deletes the pod of a node that does not exist (marked Failed first) and the
older of two terminated pods over a threshold of one, the TTL controller annotates a new
node, the TTL-after-finished controller deletes a Job finished with a TTL of 0 (foreground),
the resource quota controller counts a pod and a ConfigMap (``count/configmaps``) of a new
quota and gives the pod back once deleted; and the CronJob controller
(``tests/deploy/cronjob_exercise.py``) syncs a CronJob due now, reporting a stray Job,
forgetting a missing one, replacing the running one and starting the Job of the minute;
and the disruption controller (``tests/deploy/disruption_exercise.py``) counts a budget's
pods through the scale subresource of their ReplicaSet, reports a budget without pods and
clears a stale ``DisruptionTarget`` condition,
and the StatefulSet controller (``tests/deploy/statefulset_exercise.py``) adopts an
orphan pod and revision, creates revisions (one after a name taken by another template),
claims and pods, rolls back to the adopted revision, gives a scaled-down pod's claim
that pod as owner and deletes the pod and the revision left over;
each controller dials the informer and the manager with its own projected token, so their
list/watch and register rules are checked there. It all runs in ``apps_cluster``
(tests/deploy/conftest.py), where upstream's ReplicaSet, ReplicationController, Endpoints,
DaemonSet, HorizontalPodAutoscaler, garbage collector and namespace controllers are off,
and its identity and certificate controllers, and its node lifecycle, taint eviction, pod
GC, TTL, TTL-after-finished, resource quota, CronJob, disruption and StatefulSet
controllers (its
endpointslice-controller runs beside Steward's).
The manifests are rendered with the bootstrap-tokens component (its two controllers, and the
manager's ``--controllers`` naming them); the three controllers that hold the cluster's keys
get them from the cluster's files (``tests/deploy/cluster_keys.py``). The exercise must then
fail: it did not finish, or the service was refused (403, or the informer's or the manager's
PERMISSION_DENIED). A rule whose removal changes nothing fails the test, named, unless this
cluster is known to make it redundant, which is checked, not assumed (see
``REDUNDANT_HERE``). The rules of the garbage collector's, the namespace controller's and
the resource quota controller's roles name every type, and those of the identity,
certificate, node and pod controllers hold the informer's list and watch beside the
writes of the same type, so there a rule of several verbs or resources is removed one
verb, and one resource, at a time, in place of the whole (``SPLIT_RULES``).

First the same exercise runs with an unmutated copy of each role, which must succeed
without any refusal; that is what makes a failure under a mutation meaningful.

Every run starts the service afresh, so most of the time goes to starting Python
processes; the runs of one deployment follow one another, but the deployments are
judged in three lanes at once (:data:`LANES`), grouped so that no controller runs beside
one whose work touches its exercise's, and never two instances of one service. Each
deployment is still reported by a test of its own, which waits for its verdict.
"""

from __future__ import annotations

import copy
import dataclasses
import subprocess
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from steward.cluster import LocalCluster
from steward.security import ClientSecurity
from tests.deploy import exercises
from tests.deploy import identity_exercises as identity
from tests.deploy import node_exercises as node
from tests.deploy.cluster_keys import KeyedLauncher
from tests.deploy.cronjob_exercise import run_cronjob
from tests.deploy.disruption_exercise import run_disruption
from tests.deploy.harness import (
    KUBECTL,
    NAMESPACE,
    Doc,
    Launcher,
    Pod,
    Process,
    apply,
    caller,
    ensure_namespace,
    find,
    grpc_port,
    http_ok,
    new_namespace,
    probe_url,
    render,
    service_account_of,
    token,
    wait_for,
    write_kubeconfig,
)
from tests.deploy.statefulset_exercise import run_statefulset

pytestmark = [pytest.mark.integration, pytest.mark.slow]

INFORMER, MANAGER = "steward-informer", "steward-manager"
JOB, REPLICASET = "steward-controller-job", "steward-controller-replicaset"
REPLICATIONCONTROLLER = "steward-controller-replicationcontroller"
ENDPOINT, ENDPOINTSLICE = "steward-controller-endpoint", "steward-controller-endpointslice"
DAEMONSET = "steward-controller-daemonset"
HPA = "steward-controller-horizontalpodautoscaling"
GC, NAMESPACE_CONTROLLER = "steward-controller-garbagecollector", "steward-controller-namespace"
SERVICEACCOUNT = "steward-controller-serviceaccount"
ROOT_CA = "steward-controller-root-ca-cert-publisher"
AGGREGATION = "steward-controller-clusterrole-aggregation"
CSRAPPROVING = "steward-controller-csrapproving"
CSRSIGNING = "steward-controller-csrsigning"
CSRCLEANER = "steward-controller-csrcleaner"
SA_TOKEN = "steward-controller-serviceaccount-token"
LEGACY_CLEANER = "steward-controller-legacy-service-account-token-cleaner"
BOOTSTRAPSIGNER = "steward-controller-bootstrapsigner"
TOKENCLEANER = "steward-controller-tokencleaner"
NODELIFECYCLE = "steward-controller-nodelifecycle"
TAINT_EVICTION = "steward-controller-taint-eviction-controller"
PODGC = "steward-controller-podgc"
TTL = "steward-controller-ttl"
TTL_AFTER_FINISHED = "steward-controller-ttl-after-finished"
RESOURCEQUOTA = "steward-controller-resourcequota"
CRONJOB = "steward-controller-cronjob"
DISRUPTION = "steward-controller-disruption"
STATEFULSET = "steward-controller-statefulset"


@dataclass
class Identity:
    """A fresh ServiceAccount bound to (possibly mutated) copies of a service's roles."""

    service_account: str
    kubeconfig: Path
    lease_namespace: str
    objects: list[Doc]


@dataclass
class Site:
    """The cluster, the rendered manifests and where processes start."""

    cluster: LocalCluster
    docs: list[Doc]
    launcher: Launcher
    workdir: Path

    def namespace(self, prefix: str) -> str:
        return new_namespace(self.cluster, prefix)


@dataclass
class Bench(Site):
    """A Site with an informer and a manager running at their full rights."""

    informer: Process
    manager: Process
    admin: ClientSecurity
    """The cluster's admin (system:masters): may read the manager's registry."""
    watcher: ClientSecurity
    """A caller with a token of a ServiceAccount that may list and watch pods."""

    def address(self, process: Process) -> str:
        return process.address(grpc_port(find(self.docs, "Deployment", process.name)))


def bindings_of(docs: list[Doc], service_account: str) -> list[Doc]:
    return [
        d
        for d in docs
        if d["kind"] in ("ClusterRoleBinding", "RoleBinding")
        and any(
            s.get("kind") == "ServiceAccount" and s["name"] == service_account
            for s in d["subjects"]
        )
    ]


def roles_of(docs: list[Doc], service_account: str) -> list[Doc]:
    """The roles the manifests bind to ``service_account`` (each once)."""
    roles: dict[str, Doc] = {}
    for binding in bindings_of(docs, service_account):
        ref = binding["roleRef"]
        roles.setdefault(ref["name"], find(docs, ref["kind"], ref["name"]))
    return list(roles.values())


Part = tuple[str, str]
"""One verb (``("verbs", "delete")``) or resource (``("resources", "namespaces/status")``)
of a rule."""


_RBAC_PATHS = {
    "ServiceAccount": "/api/v1/namespaces/{namespace}/serviceaccounts",
    "ClusterRole": "/apis/rbac.authorization.k8s.io/v1/clusterroles",
    "ClusterRoleBinding": "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings",
    "RoleBinding": "/apis/rbac.authorization.k8s.io/v1/namespaces/{namespace}/rolebindings",
}
"""Where :func:`identity_for` creates each kind it copies (the manifests bind ClusterRoles
only, by ClusterRoleBindings and RoleBindings)."""


def _collection(doc: Doc) -> str:
    assert doc["kind"] in _RBAC_PATHS, f"no copy of a {doc['kind']} is made here"
    return _RBAC_PATHS[doc["kind"]].format(namespace=doc["metadata"].get("namespace", ""))


def identity_for(
    bench: Site, deployment: str, role: Doc | None, rule: int | None, part: Part | None = None
) -> Identity:
    """A fresh ServiceAccount with copies of ``deployment``'s bindings; the copy of
    ``role`` lacks rule number ``rule``, or only its ``part`` when given (no mutation when
    ``role`` is None). RoleBindings in Steward's namespace go to a fresh namespace, where
    the manager (whose --namespace is its pod's namespace) then keeps its Leases; those
    of another namespace (the token cleaner's, in kube-system) stay there. The objects
    are created by the API (each name is new: nothing to apply over), the ServiceAccount
    first and the bindings last."""
    tag = uuid.uuid4().hex[:6]
    original_sa = service_account_of(bench.docs, deployment)
    sa = f"{original_sa}-{tag}"
    lease_ns = f"leases-{tag}"
    bench.cluster.api(
        "POST",
        "/api/v1/namespaces",
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": lease_ns}},
        ok=(201,),
    )
    objects: list[Doc] = [
        {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": sa, "namespace": NAMESPACE},
        }
    ]
    names: dict[str, str] = {}
    for original in roles_of(bench.docs, original_sa):
        doc = copy.deepcopy(original)
        name = f"{original['metadata']['name']}:{tag}"
        names[original["metadata"]["name"]] = name
        doc["metadata"] = {"name": name}
        if (
            role is not None
            and rule is not None
            and original["metadata"]["name"] == role["metadata"]["name"]
        ):
            if part is None:
                del doc["rules"][rule]
            else:
                field, value = part
                doc["rules"][rule][field].remove(value)
        objects.append(doc)
    for original in bindings_of(bench.docs, original_sa):
        doc = copy.deepcopy(original)
        doc["metadata"] = {"name": f"{original['metadata']['name']}-{tag}"}
        if doc["kind"] == "RoleBinding":
            namespace = original["metadata"].get("namespace", NAMESPACE)
            doc["metadata"]["namespace"] = lease_ns if namespace == NAMESPACE else namespace
        doc["roleRef"]["name"] = names[original["roleRef"]["name"]]
        doc["subjects"] = [{"kind": "ServiceAccount", "name": sa, "namespace": NAMESPACE}]
        objects.append(doc)
    for doc in objects:
        bench.cluster.api("POST", _collection(doc), doc, ok=(201,))
    kubeconfig = write_kubeconfig(
        bench.cluster, bench.workdir / f"{sa}.kubeconfig", token(bench.cluster, NAMESPACE, sa)
    )
    return Identity(sa, kubeconfig, lease_ns, objects)


def remove(bench: Site, ident: Identity) -> None:
    """Delete what :func:`identity_for` made (its lease namespace stays: nothing here
    finalizes a namespace but the namespace controller's exercise)."""
    for doc in reversed(ident.objects):
        path = f"{_collection(doc)}/{doc['metadata']['name']}"
        bench.cluster.api("DELETE", path, ok=(200, 202, 404))


def compiled(process: Process, workdir: Path) -> Process:
    """``process`` loading its modules' bytecode from a cache of this module's (written
    by the first process to import each module): the image's are compiled when it is
    built (``UV_COMPILE_BYTECODE``), a checkout's often are not, and a service compiling
    some hundreds of modules at each start spends twice the CPU it would spend in the
    image before it does anything; this test starts one for every rule."""
    process.env.pop("PYTHONDONTWRITEBYTECODE", None)
    process.env["PYTHONPYCACHEPREFIX"] = str(workdir / "bytecode")
    return process


def start(
    bench: Site, deployment: str, ident: Identity, extra_args: tuple[str, ...] = ()
) -> Process:
    """``deployment``'s container as ``ident``, with ``extra_args`` after its own."""
    pod = Pod(name=f"{deployment}-{ident.service_account[-6:]}", namespace=ident.lease_namespace)
    process = bench.launcher.prepare(deployment, ident.kubeconfig, pod, ident.service_account)
    process.argv.extend(extra_args)
    return bench.launcher.start(compiled(process, bench.workdir))


def _ready(docs: list[Doc], process: Process) -> Callable[[], bool]:
    """Whether ``process``'s readiness probe (as its manifest states it) passes."""
    url = probe_url(find(docs, "Deployment", process.name), process, "readinessProbe")
    return lambda: http_ok(url)


# The exercises: None when the service did its work, else what went wrong. --------------
def exercise_informer(bench: Bench, ident: Identity) -> tuple[str | None, Process]:
    informer = start(bench, INFORMER, ident)
    try:
        wait_for(_ready(bench.docs, informer), "informer ready", informer)
        ns = bench.namespace("watch")
        return exercises.watch_pods(
            bench.cluster,
            bench.address(informer),
            ns,
            security=bench.watcher,
            give_up=informer.forbidden,
        ), informer
    finally:
        informer.stop()


def exercise_manager(bench: Bench, ident: Identity) -> tuple[str | None, Process]:
    manager = start(bench, MANAGER, ident)
    controller: Process | None = None
    try:
        launcher = Launcher(
            bench.docs, bench.workdir, bench.cluster, dict(bench.launcher.endpoints)
        )
        launcher.expose(MANAGER, manager)
        end_ready = _until(_ready(bench.docs, manager), manager)
        if end_ready is not None:
            return end_ready, manager
        full = identity_for(bench, JOB, None, None)
        try:
            controller = launcher.start(
                compiled(
                    launcher.prepare(JOB, full.kubeconfig, service_account=full.service_account),
                    bench.workdir,
                )
            )
            running = controller
            return exercises.wait_registered(
                bench.address(manager),
                security=bench.admin,
                give_up=lambda: manager.forbidden() or running.forbidden(),
            ), manager
        finally:
            if controller is not None:
                controller.stop()
            remove(bench, full)
    finally:
        manager.stop()


def _exercise_controller(
    bench: Bench,
    ident: Identity,
    deployment: str,
    name: str,
    run: exercises.Run,
    extra_args: tuple[str, ...] = (),
) -> tuple[str | None, Process]:
    """The controller of ``deployment`` (given ``extra_args`` too) becomes the manager's
    active ``name``, then does ``run`` in a fresh namespace (made while the controller
    starts)."""
    controller = start(bench, deployment, ident, extra_args)
    try:
        ns = bench.namespace(name)
        problem = exercises.wait_registered(
            bench.address(bench.manager), name, security=bench.admin, give_up=controller.forbidden
        )
        if problem is None:
            problem = run(bench.cluster, ns, give_up=controller.forbidden)
        return problem, controller
    finally:
        controller.stop()


def exercise_job(bench: Bench, ident: Identity) -> tuple[str | None, Process]:
    return _exercise_controller(bench, ident, JOB, "job", exercises.run_job)


def exercise_replicaset(bench: Bench, ident: Identity) -> tuple[str | None, Process]:
    return _exercise_controller(bench, ident, REPLICASET, "replicaset", exercises.run_replicaset)


def exercise_replicationcontroller(bench: Bench, ident: Identity) -> tuple[str | None, Process]:
    return _exercise_controller(
        bench,
        ident,
        REPLICATIONCONTROLLER,
        "replicationcontroller",
        exercises.run_replicationcontroller,
    )


def exercise_endpoint(bench: Bench, ident: Identity) -> tuple[str | None, Process]:
    return _exercise_controller(bench, ident, ENDPOINT, "endpoint", exercises.run_endpoints)


def exercise_endpointslice(bench: Bench, ident: Identity) -> tuple[str | None, Process]:
    return _exercise_controller(
        bench, ident, ENDPOINTSLICE, "endpointslice", exercises.run_endpointslices
    )


def exercise_daemonset(bench: Bench, ident: Identity) -> tuple[str | None, Process]:
    return _exercise_controller(bench, ident, DAEMONSET, "daemonset", exercises.run_daemonset)


def exercise_hpa(bench: Bench, ident: Identity) -> tuple[str | None, Process]:
    return _exercise_controller(bench, ident, HPA, "horizontalpodautoscaling", exercises.run_hpa)


def exercise_garbagecollector(bench: Bench, ident: Identity) -> tuple[str | None, Process]:
    return _exercise_controller(
        bench, ident, GC, "garbagecollector", exercises.run_garbagecollector
    )


def exercise_namespace(bench: Bench, ident: Identity) -> tuple[str | None, Process]:
    return _exercise_controller(
        bench, ident, NAMESPACE_CONTROLLER, "namespace", exercises.run_namespace
    )


def _identity_exercise(
    deployment: str, name: str, run: exercises.Run, extra_args: tuple[str, ...] = ()
) -> Callable[[Bench, Identity], tuple[str | None, Process]]:
    def exercise(bench: Bench, ident: Identity) -> tuple[str | None, Process]:
        return _exercise_controller(bench, ident, deployment, name, run, extra_args)

    return exercise


def _until(check: Callable[[], bool], process: Process, timeout: float = 60.0) -> str | None:
    try:
        wait_for(lambda: check() or process.forbidden(), "readiness", process, timeout)
    except AssertionError as err:
        return str(err)
    return None if check() else "refused before it was ready"


EXERCISES: dict[str, Callable[[Bench, Identity], tuple[str | None, Process]]] = {
    INFORMER: exercise_informer,
    MANAGER: exercise_manager,
    JOB: exercise_job,
    REPLICASET: exercise_replicaset,
    REPLICATIONCONTROLLER: exercise_replicationcontroller,
    ENDPOINT: exercise_endpoint,
    ENDPOINTSLICE: exercise_endpointslice,
    DAEMONSET: exercise_daemonset,
    HPA: exercise_hpa,
    GC: exercise_garbagecollector,
    NAMESPACE_CONTROLLER: exercise_namespace,
    SERVICEACCOUNT: _identity_exercise(
        SERVICEACCOUNT, "serviceaccount", identity.run_serviceaccounts
    ),
    ROOT_CA: _identity_exercise(ROOT_CA, "root-ca-cert-publisher", identity.run_root_ca),
    AGGREGATION: _identity_exercise(
        AGGREGATION, "clusterrole-aggregation", identity.run_aggregation
    ),
    CSRAPPROVING: _identity_exercise(CSRAPPROVING, "csrapproving", identity.run_csr_approving),
    CSRSIGNING: _identity_exercise(CSRSIGNING, "csrsigning", identity.run_csr_signing),
    CSRCLEANER: _identity_exercise(CSRCLEANER, "csrcleaner", identity.run_csr_cleaning),
    SA_TOKEN: _identity_exercise(SA_TOKEN, "serviceaccount-token", identity.run_sa_tokens),
    LEGACY_CLEANER: _identity_exercise(
        LEGACY_CLEANER,
        "legacy-service-account-token-cleaner",
        identity.run_legacy_cleaning,
        (identity.LEGACY_CLEAN_UP_PERIOD,),
    ),
    BOOTSTRAPSIGNER: _identity_exercise(
        BOOTSTRAPSIGNER, "bootstrapsigner", identity.run_cluster_info_signing
    ),
    TOKENCLEANER: _identity_exercise(TOKENCLEANER, "tokencleaner", identity.run_token_cleaning),
    NODELIFECYCLE: _identity_exercise(
        NODELIFECYCLE, "nodelifecycle", node.run_nodelifecycle, node.NODELIFECYCLE_ARGS
    ),
    TAINT_EVICTION: _identity_exercise(
        TAINT_EVICTION, "taint-eviction-controller", node.run_taint_eviction
    ),
    PODGC: _identity_exercise(PODGC, "podgc", node.run_podgc, node.PODGC_ARGS),
    TTL: _identity_exercise(TTL, "ttl", node.run_ttl),
    TTL_AFTER_FINISHED: _identity_exercise(
        TTL_AFTER_FINISHED, "ttl-after-finished", node.run_ttl_after_finished
    ),
    RESOURCEQUOTA: _identity_exercise(
        RESOURCEQUOTA, "resourcequota", node.run_resourcequota, node.RESOURCEQUOTA_ARGS
    ),
    CRONJOB: _identity_exercise(CRONJOB, "cronjob", run_cronjob),
    DISRUPTION: _identity_exercise(DISRUPTION, "disruption", run_disruption),
    STATEFULSET: _identity_exercise(STATEFULSET, "statefulset", run_statefulset),
}


# Rules this cluster makes redundant, each with the check that proves why. --------------
def _discovery_granted_to_everyone(bench: Bench, ident: Identity, rule: dict[str, Any]) -> bool:
    """Discovery URLs: the default ClusterRoleBinding system:discovery grants them to all
    authenticated users, so the role's own rule only matters where that was trimmed."""
    review = bench.cluster.api(
        "POST",
        "/apis/authorization.k8s.io/v1/subjectaccessreviews",
        {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SubjectAccessReview",
            "spec": {
                "user": f"system:serviceaccount:{NAMESPACE}:{ident.service_account}",
                "groups": ["system:serviceaccounts", "system:authenticated"],
                "nonResourceAttributes": {"path": "/apis", "verb": "get"},
            },
        },
        ok=(201,),
    )
    status = review.get("status") or {}
    return bool(status.get("allowed")) and "system:discovery" in status.get("reason", "")


def _owned_pod(ref: dict[str, Any]) -> Doc:
    """A pod (of the Job, ReplicaSet and ReplicationController controllers' children)
    owned through ``ref``."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "owned", "ownerReferences": [ref]},
        "spec": {"containers": [{"name": "c", "image": "busybox:1.36"}]},
    }


def _owned_slice(ref: dict[str, Any]) -> Doc:
    """An EndpointSlice (of the EndpointSlice controller's children) owned through ``ref``."""
    return {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {"name": "owned", "ownerReferences": [ref]},
        "addressType": "IPv4",
        "endpoints": [],
    }


def _owned_job(ref: dict[str, Any]) -> Doc:
    """A Job (of the CronJob controller's children) owned through ``ref``."""
    return {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": {"name": "owned", "ownerReferences": [ref]},
        "spec": _JOB_OWNER,
    }


def _owned_claim(ref: dict[str, Any]) -> Doc:
    """A PersistentVolumeClaim (a StatefulSet pod's, under ``whenScaled: Delete``) owned
    through ``ref``."""
    return {
        "apiVersion": "v1",
        "kind": "PersistentVolumeClaim",
        "metadata": {"name": "owned", "ownerReferences": [ref]},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "1Mi"}}},
    }


def _owner_references_not_enforced(
    group_version: str,
    kind: str,
    spec: dict[str, Any],
    child: Callable[[dict[str, Any]], Doc] = _owned_pod,
) -> Callable[[Bench, Identity, dict[str, Any]], bool]:
    """<owners>/finalizers (jobs, replicasets, services, daemonsets): only the
    OwnerReferencesPermissionEnforcement admission plugin (off in the local control plane)
    checks it, when a child says blockOwnerDeletion. The check creates an owner of ``kind``
    with ``spec`` (one that no controller acts on) and has the identity create, as a dry
    run, a ``child`` it owns (a pod unless said otherwise)."""

    def check(bench: Bench, ident: Identity, rule: dict[str, Any]) -> bool:
        ns = bench.namespace("ownerrefs")
        plural = f"{kind.lower()}s"
        root = "/api" if "/" not in group_version else "/apis"
        owner = bench.cluster.api(
            "POST",
            f"{root}/{group_version}/namespaces/{ns}/{plural}",
            {
                "apiVersion": group_version,
                "kind": kind,
                "metadata": {"name": "owner"},
                "spec": spec,
            },
            ok=(201,),
        )
        ref = {
            "apiVersion": group_version,
            "kind": kind,
            "name": "owner",
            "uid": owner["metadata"]["uid"],
            "controller": True,
            "blockOwnerDeletion": True,
        }
        owned = child(ref)
        owned["metadata"]["namespace"] = ns
        done = subprocess.run(
            [KUBECTL, f"--kubeconfig={ident.kubeconfig}", "create", "--dry-run=server", "-f", "-"],
            input=yaml.safe_dump(owned),
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        return done.returncode == 0

    return check


def _template(restart: str) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"owner": "none"}},
        "spec": {"restartPolicy": restart, "containers": [{"name": "c", "image": "busybox:1.36"}]},
    }


# A suspended Job managed by nobody; a ReplicaSet of no replicas.
_JOB_OWNER = {"managedBy": "steward.io/nobody", "suspend": True, "template": _template("Never")}
_RS_OWNER = {
    "replicas": 0,
    "selector": {"matchLabels": {"owner": "none"}},
    "template": _template("Always"),
}
_RC_OWNER = {**_RS_OWNER, "selector": {"owner": "none"}}
# A suspended CronJob: no controller starts its Jobs.
_CRONJOB_OWNER = {
    "schedule": "* * * * *",
    "suspend": True,
    "jobTemplate": {"spec": _JOB_OWNER},
}
# A StatefulSet of no replicas; a pod for no node.
_STS_OWNER = {
    "replicas": 0,
    "serviceName": "owner",
    "selector": {"matchLabels": {"owner": "none"}},
    "template": _template("Always"),
}
_POD_OWNER = {**_template("Always")["spec"], "nodeSelector": {"steward-test/node": "none"}}
# A Service without a selector: the EndpointSlice controller leaves it alone.
_SERVICE_OWNER = {"ports": [{"port": 80}]}
# A DaemonSet for no node (its node selector matches none).
_DS_OWNER = {
    "selector": {"matchLabels": {"owner": "none"}},
    "template": {
        **_template("Always"),
        "spec": {**_template("Always")["spec"], "nodeSelector": {"steward-test/node": "none"}},
    },
}


def _every_namespaced_type_deletes_by_collection(
    bench: Bench, ident: Identity, rule: dict[str, Any]
) -> bool:
    """The namespace controller's ``delete`` of every type: it deletes objects one at a
    time only of a type that does not serve ``deletecollection`` (an aggregated API's,
    say). This cluster serves none: every namespaced resource with ``delete`` (in each
    group's preferred version, as the controller reads discovery) has ``deletecollection``
    too, so no content here can need it."""
    versions = ["/api/v1"]
    groups = bench.cluster.api("GET", "/apis").get("groups") or []
    versions += [f"/apis/{g['preferredVersion']['groupVersion']}" for g in groups]
    for path in versions:
        for res in bench.cluster.api("GET", path).get("resources") or []:
            verbs = set(res.get("verbs") or ())
            if "/" in res["name"] or not res.get("namespaced") or "delete" not in verbs:
                continue
            if "deletecollection" not in verbs:
                return False
    return True


REDUNDANT_HERE: dict[tuple[str, str], Callable[[Bench, Identity, dict[str, Any]], bool]] = {
    ("steward:informer", "nonResourceURLs"): _discovery_granted_to_everyone,
    ("steward:controller:horizontalpodautoscaling", "nonResourceURLs"): (
        _discovery_granted_to_everyone
    ),
    ("steward:controller:job", "jobs/finalizers"): _owner_references_not_enforced(
        "batch/v1", "Job", _JOB_OWNER
    ),
    ("steward:controller:replicaset", "replicasets/finalizers"): _owner_references_not_enforced(
        "apps/v1", "ReplicaSet", _RS_OWNER
    ),
    (
        "steward:controller:replicationcontroller",
        "replicationcontrollers/finalizers",
    ): _owner_references_not_enforced("v1", "ReplicationController", _RC_OWNER),
    ("steward:controller:endpointslice", "services/finalizers"): _owner_references_not_enforced(
        "v1", "Service", _SERVICE_OWNER, _owned_slice
    ),
    ("steward:controller:daemonset", "daemonsets/finalizers"): _owner_references_not_enforced(
        "apps/v1", "DaemonSet", _DS_OWNER
    ),
    ("steward:controller:cronjob", "cronjobs/finalizers"): _owner_references_not_enforced(
        "batch/v1", "CronJob", _CRONJOB_OWNER, _owned_job
    ),
    (
        "steward:controller:statefulset",
        "statefulsets/finalizers",
    ): _owner_references_not_enforced("apps/v1", "StatefulSet", _STS_OWNER),
    ("steward:controller:statefulset", "pods/finalizers"): _owner_references_not_enforced(
        "v1", "Pod", _POD_OWNER, _owned_claim
    ),
    ("steward:controller:namespace", "* without delete"): (
        _every_namespaced_type_deletes_by_collection
    ),
}


SPLIT_RULES = {
    "steward:controller:garbagecollector",
    "steward:controller:namespace",
    "steward:controller:serviceaccount",
    "steward:controller:root-ca-cert-publisher",
    "steward:controller:clusterrole-aggregation",
    "steward:controller:csrapproving",
    "steward:controller:csrsigning",
    "steward:controller:csrcleaner",
    "steward:controller:serviceaccount-token",
    "steward:controller:legacy-service-account-token-cleaner",
    "steward:controller:bootstrapsigner",
    "steward:controller:tokencleaner",
    "steward:controller:nodelifecycle",
    "steward:controller:taint-eviction-controller",
    "steward:controller:podgc",
    "steward:controller:ttl",
    "steward:controller:ttl-after-finished",
    "steward:controller:resourcequota",
    "steward:controller:cronjob",
    "steward:controller:disruption",
    "steward:controller:statefulset",
}
"""Roles whose rules carry several verbs (or resources), each for a call of its own: those
that name every type (``*``), and the identity, certificate, node and pod controllers',
whose rules hold the informer's list and watch beside the controller's own writes (or
reads) of the same type. A
rule of several verbs or resources there is removed one verb, and one resource, at a time
(each must be needed on its own)."""


def _parts(role: Doc, rule: dict[str, Any]) -> list[Part | None]:
    """The mutations of one rule: the whole rule (None), or in :data:`SPLIT_RULES`, where
    it has several verbs or resources, each of them alone instead. A rule without one of
    them grants a subset of what the rule without all of them does not, so an exercise
    that fails without any one part fails without the whole rule too: running that case
    as well would prove nothing more, at the cost of one more exercise."""
    found: list[Part | None] = []
    if role["metadata"]["name"] in SPLIT_RULES:
        for field in ("verbs", "resources"):
            values = rule.get(field) or []
            if len(values) > 1:
                found += [(field, v) for v in values]
    return found or [None]


def _rule_key(role: Doc, rule: dict[str, Any], part: Part | None = None) -> tuple[str, str]:
    what = "nonResourceURLs" if "nonResourceURLs" in rule else ",".join(rule["resources"])
    if part is not None:
        what += f" without {part[1]}"
    return role["metadata"]["name"], what


def _describe(role: Doc, index: int, rule: dict[str, Any], part: Part | None = None) -> str:
    text = yaml.safe_dump(rule, default_flow_style=True).strip()
    without = "" if part is None else f" without its {part[0][:-1]} {part[1]}"
    return f"{role['kind']} {role['metadata']['name']} rule {index}{without} {text}"


@pytest.fixture(scope="module")
def bench(apps_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Bench]:
    cluster = apps_cluster
    docs = render("local", with_bootstrap_tokens=True)
    labels = find(docs, "Namespace", NAMESPACE)["metadata"]["labels"]
    ensure_namespace(cluster, NAMESPACE, labels)
    apply(cluster, [d for d in docs if d["kind"] in ("ClusterRole", "Role")])
    workdir = tmp_path_factory.mktemp("mutations")
    launcher = KeyedLauncher(docs, workdir, cluster)
    partial = Site(cluster, docs, launcher, workdir)
    informer = start(partial, INFORMER, identity_for(partial, INFORMER, None, None))
    manager: Process | None = None
    try:
        wait_for(_ready(docs, informer), "informer", informer)
        launcher.expose(INFORMER, informer)
        manager = start(partial, MANAGER, identity_for(partial, MANAGER, None, None))
        wait_for(_ready(docs, manager), "manager", manager)
        launcher.expose(MANAGER, manager)
        # The informer exercise's caller: a token of a ServiceAccount with the Job
        # controller's full role (pods list and watch among it).
        reader = identity_for(partial, JOB, None, None)
        watcher = caller(
            cluster, workdir, "steward-deploy-test", service_account=reader.service_account
        )
        admin = cluster.client_security("admin")
        yield Bench(cluster, docs, launcher, workdir, informer, manager, admin, watcher)
    finally:
        if manager is not None:
            manager.stop()
        informer.stop()


LANES: tuple[tuple[str, ...], ...] = (
    (
        NAMESPACE_CONTROLLER,
        GC,
        DAEMONSET,
        ENDPOINTSLICE,
        REPLICASET,
        REPLICATIONCONTROLLER,
        CRONJOB,
        STATEFULSET,
        TTL_AFTER_FINISHED,
        DISRUPTION,
    ),
    (HPA, NODELIFECYCLE, MANAGER, JOB, PODGC, TAINT_EVICTION, TTL, RESOURCEQUOTA),
    (
        INFORMER,
        LEGACY_CLEANER,
        SA_TOKEN,
        SERVICEACCOUNT,
        ROOT_CA,
        BOOTSTRAPSIGNER,
        ENDPOINT,
        TOKENCLEANER,
        CSRAPPROVING,
        CSRSIGNING,
        AGGREGATION,
        CSRCLEANER,
    ),
)
"""The deployments whose rules are judged one after the other, each lane beside the
others. A service runs as one instance at a time (in its own lane), and none beside one
whose work touches its exercise's, where a controller of full rights could do the work
the mutated one was refused, or undo it:

- the garbage collector deletes the dependents of any deleted owner (an EndpointSlice of
  a deleted Service, say) and the namespace controller empties any namespace being
  deleted: both run beside no controller whose children carry owner references but the
  Job controller, whose exercise deletes no Job (the CronJob controller's Jobs, the
  StatefulSet controller's pods and claims and the ReplicationController's pods carry
  them, the TTL-after-finished controller deletes Jobs in the foreground, which the
  garbage collector finishes, and the disruption controller's ReplicaSet names a
  Deployment that does not exist: their lane);
- the pod garbage collector's threshold of one counts terminated pods cluster-wide, and
  the only pods that terminate are Jobs' (kwok's ``pod-complete`` stage): the Job
  controller runs in its lane, and so does the manager, whose exercise starts a Job
  controller; the node lifecycle controller taints a silent node ``NoExecute``, which
  the taint eviction controller acts on, the TTL controller annotates every new node,
  the pod garbage collector deletes the pods of a missing node: all in one lane;
- the serviceaccount and tokens controllers, the token cleaners and the bootstrap
  signer, and the three controllers of CSRs work on the same objects: one lane.

The informer, the Endpoints and the HorizontalPodAutoscaler controllers (whose objects
carry no owner references) go where they even out the lanes' times, the longest
deployments first in each. Every exercise's objects live in namespaces of their own
(nodes carry a taint that keeps other pods off them); the informer and the manager at
full rights are shared."""


@dataclass
class Verdict:
    """What the runs of one deployment showed."""

    deployment: str
    unmutated: str | None = None
    """What went wrong with every rule (None: the work was done, nobody refused)."""
    needed: list[str] = field(default_factory=list)
    redundant: list[str] = field(default_factory=list)
    """Rules whose removal changed nothing here, for a reason :data:`REDUNDANT_HERE` checked."""
    unneeded: list[str] = field(default_factory=list)
    runs: int = 0
    identities: float = 0.0
    """Seconds spent making and removing the identities."""
    exercises: float = 0.0
    """Seconds spent in the exercises (each from the service's start to its stop)."""
    explanations: float = 0.0
    wall: float = 0.0

    def report(self) -> str:
        lines = [f"{self.deployment}: needed: " + "".join(f"\n  {n}" for n in self.needed)]
        lines.append(
            f"{self.deployment}: redundant on this cluster (checked): {self.redundant or 'none'}"
        )
        lines.append(
            f"{self.deployment}: {self.runs} runs in {self.wall:.0f} s (identities"
            f" {self.identities:.0f} s, exercises {self.exercises:.0f} s, explanations"
            f" {self.explanations:.0f} s)"
        )
        return "\n".join(lines)


Case = tuple[Doc, int, dict[str, Any], Part | None]
"""One mutation: the role, the number of its rule, the rule, and the part removed (None:
the whole rule)."""


def _cases(docs: list[Doc], deployment: str) -> list[Case]:
    return [
        (role, index, rule, part)
        for role in roles_of(docs, service_account_of(docs, deployment))
        for index, rule in enumerate(role["rules"])
        for part in _parts(role, rule)
    ]


def judge(bench: Bench, deployment: str, stopping: threading.Event) -> Verdict:
    """The unmutated run of ``deployment``'s exercise, then (if it did the work) one run
    per :data:`Case`, each with a fresh identity and a freshly started service."""
    verdict = Verdict(deployment)
    began = time.monotonic()
    try:
        for case in [None, *_cases(bench.docs, deployment)]:
            if stopping.is_set():
                raise RuntimeError(f"{deployment}: stopped before every rule was judged")
            started = time.monotonic()
            if case is None:
                ident = identity_for(bench, deployment, None, None)
            else:
                ident = identity_for(bench, deployment, case[0], case[1], case[3])
            verdict.identities += time.monotonic() - started
            try:
                verdict.runs += 1
                exercised = time.monotonic()
                problem, process = EXERCISES[deployment](bench, ident)
                verdict.exercises += time.monotonic() - exercised
                refused = process.forbidden()
                if case is None:
                    if problem is not None:
                        verdict.unmutated = f"the exercise fails with all rules: {problem}"
                    elif refused:
                        verdict.unmutated = "refused with all rules"
                    if verdict.unmutated is not None:
                        verdict.unmutated += f"\n{process.tail()}"
                        return verdict
                    continue
                role, index, rule, part = case
                described = _describe(role, index, rule, part)
                if problem is not None or refused:
                    why = "refused (403 or PERMISSION_DENIED)" if refused else problem
                    took = time.monotonic() - exercised
                    verdict.needed.append(f"{described}: {why} [{took:.0f} s]")
                    continue
                explaining = time.monotonic()
                explain = REDUNDANT_HERE.get(_rule_key(role, rule, part))
                if explain is not None and explain(bench, ident, rule):
                    verdict.redundant.append(described)
                else:
                    verdict.unneeded.append(described)
                verdict.explanations += time.monotonic() - explaining
            finally:
                removing = time.monotonic()
                remove(bench, ident)
                verdict.identities += time.monotonic() - removing
    finally:
        verdict.wall = time.monotonic() - began
    return verdict


class Judges:
    """Judges the chosen deployments, lane by lane (:data:`LANES`), the lanes at once,
    each in a thread of its own with a launcher of its own; a deployment's verdict is
    waited for by its test."""

    def __init__(self, bench: Bench, deployments: list[str]) -> None:
        self.verdicts: dict[str, Future[Verdict]] = {d: Future() for d in deployments}
        self.stopping = threading.Event()
        self.threads: list[threading.Thread] = []
        for lane in LANES:
            chosen = [d for d in lane if d in self.verdicts]
            if not chosen:
                continue
            launcher = KeyedLauncher(
                bench.docs, bench.workdir, bench.cluster, dict(bench.launcher.endpoints)
            )
            own = dataclasses.replace(bench, launcher=launcher)
            thread = threading.Thread(
                target=self._judge_lane, args=(own, chosen), name=f"lane-{chosen[0]}", daemon=True
            )
            self.threads.append(thread)
            thread.start()

    def _judge_lane(self, bench: Bench, deployments: list[str]) -> None:
        for deployment in deployments:
            verdict = self.verdicts[deployment]
            if not verdict.set_running_or_notify_cancel():
                continue
            try:
                verdict.set_result(judge(bench, deployment, self.stopping))
            except BaseException as err:  # its test raises it
                verdict.set_exception(err)

    def verdict(self, deployment: str) -> Verdict:
        return self.verdicts[deployment].result()

    def stop(self) -> None:
        """Judge no further rule; wait for the runs under way."""
        self.stopping.set()
        for thread in self.threads:
            thread.join()


TEST = "test_every_rule_of_the_services_roles_is_needed"


@pytest.fixture(scope="module")
def judges(bench: Bench, request: pytest.FixtureRequest) -> Iterator[Judges]:
    """The judges of the deployments this session runs the test for (all, unless some
    are deselected)."""
    chosen = [
        str(item.callspec.params["deployment"])
        for item in request.session.items
        if isinstance(item, pytest.Function)
        and item.module is request.module
        and item.originalname == TEST
    ]
    running = Judges(bench, chosen)
    try:
        yield running
    finally:
        running.stop()


def test_lanes_hold_every_deployment_once() -> None:
    """A deployment in no lane would never be judged, one in two could run twice at once."""
    laned = [d for lane in LANES for d in lane]
    assert sorted(laned) == sorted(EXERCISES), "LANES must name every deployment once"


@pytest.mark.parametrize("deployment", list(EXERCISES))
def test_every_rule_of_the_services_roles_is_needed(judges: Judges, deployment: str) -> None:
    verdict = judges.verdict(deployment)
    print(f"\n{verdict.report()}")
    assert verdict.unmutated is None, verdict.unmutated
    unneeded = verdict.unneeded
    assert not unneeded, f"{deployment} works without these rules, so they are unneeded: {unneeded}"
