"""The resource quota, taint eviction, pod GC, node lifecycle, TTL-after-finished, CronJob
and disruption controllers SIGKILLed, and the informer restarted, in the middle of their
work.

Steward's informer, manager, ``resourcequota``, ``taint-eviction-controller``,
``podgc`` (a short sweep period and quarantine, :data:`FLAGS`), ``ttl-after-finished``,
``cronjob`` and ``disruption`` run as processes
(``stack.py``, one stack for the module, each case leaving an active instance of every
controller it started behind; ``nodelifecycle`` is started by its case only, the last,
as it would taint the other cases' kubelet-less nodes) against a control plane of this
module's own whose kube-controller-manager runs none of the resource quota, taint
eviction, pod GC, node lifecycle, TTL-after-finished, CronJob and disruption controllers
(no nodes: nothing but the test touches a node it makes).

- Quotas: :data:`NAMESPACES` namespaces with a quota each (``pods``, ``requests.cpu``,
  ``count/configmaps``) and a burst of pod and ConfigMap creates, deletions and pods
  turned Failed (:class:`Burst`, the same burst on every side), the deletions going
  through the namespaces one after the other. Once Steward's controller has replenished
  some quota after a deletion (quota admission itself only adds on a create, so a quota
  lower than its creates is the controller's work) the fault strikes (the controller
  SIGKILLed, or the informer restarted), the burst goes on while it lasts, and a
  successor takes over (the manager's lease) or the informer comes back.
  Every quota's ``status.used`` must end equal to what its namespace holds, counted as
  upstream's evaluators count (pkg/quota/v1/evaluator/core/pods.go: ``pods`` and
  ``requests.cpu`` over pods neither Succeeded nor Failed; every ConfigMap for
  ``count/configmaps``), and the statuses equal to what upstream's controller writes for
  the same burst on the session ``cluster`` (no fault). A controller that does not sync
  every quota when it starts (or when its informer comes back) leaves the deletions of
  the fault's time counted.
- Taint eviction: pods bound to a node of the test's own (no kubelet: a deleted pod
  keeps its ``deletionTimestamp``), some tolerating the ``NoExecute`` taint the test adds
  forever, some for :data:`SHORT` seconds, some not at all. Right after the controller's
  first deletions it is SIGKILLed with the rest pending (the timed evictions always are)
  and a successor takes over. As upstream's controller ends
  (pkg/controller/tainteviction/taint_eviction.go: ``processPodOnNode`` deletes a pod
  tolerating none of the node's ``NoExecute`` taints at once and one tolerating them all
  for a while when the shortest ``tolerationSeconds`` has passed; ``addConditionAndDeletePod``
  first writes the ``DisruptionTarget`` condition), exactly the untolerating and the
  short-tolerating pods must end marked for deletion, each with the condition
  (reason ``DeletionByTaintManager``), and the pods tolerating it forever untouched.
  The session cluster is not the reference here: its node lifecycle controller would
  taint the test's kubelet-less node unreachable and evict the pods itself.
- Pod GC: :data:`ORPHANS` pods bound to a node of the test's own that the test then
  deletes, and bystanders that must stay: running pods on a node that exists. Right
  after the collector's first deletions (once the quarantine is over) it is SIGKILLed,
  :data:`LATE` more pods are bound to the missing node while it is down, and a successor
  takes over. As upstream's collector ends (pkg/controller/podgc/gc_controller.go:
  ``gcOrphaned`` collects the pods of a node still missing after the quarantine;
  ``markFailedAndDeletePodWithCondition`` patches an unfinished pod Failed with the
  ``DisruptionTarget`` condition, then deletes it with a grace period of 0), every orphan
  must end deleted with grace 0, Failed, with the condition (reason ``DeletionByPodGC``),
  and every bystander unchanged (its resourceVersion). The test's finalizer holds the
  deleted pods so that they can be read; it is released at the end. An instance killed
  between an orphan's patch and its delete leaves it Failed and not deleted: the
  successor must still delete it (upstream patches only unfinished pods).
- Node lifecycle: two nodes whose Leases the test renews, both healthy under Steward's
  controller (short ``--node-monitor-grace-period``, :data:`GRACE`); the test stops
  renewing one and SIGKILLs the controller within the grace period. The successor must
  still find the node stale (upstream's ``monitorNodeHealth``: a node first seen gets
  the grace period from then) and leave it as upstream does: Ready and the pressure
  conditions Unknown, tainted ``node.kubernetes.io/unreachable`` NoSchedule and
  NoExecute, the other node untouched. The session cluster's controller has upstream's
  grace period (50 s), too long to be the reference.
- TTL after finished: Jobs (no pods; a ``spec.managedBy`` no controller owns, so the
  test writes their status) finished at once, some with a TTL of 0, some of
  :data:`LATER_TTL` seconds. Right after the controller's first deletions it is
  SIGKILLed with the others pending (their requeues die with it), :data:`LATE` more
  Jobs finish with a TTL of 0 while it is down, and a successor takes over. As upstream's
  controller ends (pkg/controller/ttlafterfinished: every finished Job whose TTL has
  passed deleted), every expired Job must end deleted, and a Job never finished and one
  finished without a TTL kept.
- CronJob: daily CronJobs (``concurrencyPolicy: Forbid``) whose one due time :func:`due`
  lies 12 hours back, so that no new time falls due during the case, their Jobs managed
  by nobody (they stay active). The first :data:`EARLY_CRONJOBS` resume; right after the
  controller's first Job both the controller and the informer are SIGKILLed, the other
  :data:`LATE_CRONJOBS` resume while they are down, the informer comes back and a
  successor takes over. As upstream's controller ends (pkg/controller/cronjob/
  cronjob_controllerv2.go: ``syncCronJob`` starts one Job named after the due time;
  one it created but did not record, found by ``AlreadyExists``, goes into the active
  list; ``Forbid`` starts no other while one is active), every CronJob must end with
  exactly its one Job, ``<name>-<due minutes>`` with the scheduled-timestamp
  annotation, controlled by it, and with ``status.active`` holding it and
  ``lastScheduleTime`` the due time.
- Disruption: :data:`BUDGETS` ReplicaSets (upstream's ReplicaSet controller makes their
  pods, which stay Pending: the module has no nodes) with a budget each
  (``minAvailable``). Right after the controller's first status write it is SIGKILLed
  with the informer; while both are down every ReplicaSet is scaled and every budget's
  ``minAvailable`` raised (a new generation), then the informer comes back and a
  successor takes over. As upstream's controller ends (pkg/controller/disruption:
  ``getExpectedPodCount`` reads the ReplicaSet's ``spec.replicas``, ``countHealthyPods``
  counts Ready pods), every budget must end with ``expectedPods`` the new scale,
  ``desiredHealthy`` the new ``minAvailable``, no pod healthy, no disruption allowed,
  ``observedGeneration`` current and the ``DisruptionAllowed`` condition False
  (``InsufficientPods``).
"""

from __future__ import annotations

import contextlib
import datetime
import time
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import pytest

from steward.cluster import LocalCluster
from steward.kube import ConflictError, KubeClient, NotFoundError
from tests.conftest import local_cluster
from tests.controllers.harness import (
    admin_kube,
    drop_namespace,
    in_parallel,
    scoped_namespace,
    update,
)
from tests.controllers.nodes.eviction import (
    KEEP_OFF,
    make_pods,
    no_execute,
    pod_body,
    set_taints,
    tolerate,
)
from tests.controllers.nodes.lifecycle import (
    LEASE_NS,
    FakeKubelet,
    conditions_of,
    make_node,
    managed_taints,
    node_of,
    ready_condition,
)
from tests.controllers.nodes.podgc import HOLD, gc_view
from tests.controllers.quota.quotas import box, create, path, pod
from tests.controllers.ttlafterfinished.jobs import (
    create_job,
    finish,
    job_body,
    jobs_path,
    stamp,
)
from tests.faults.stack import Faults, faults_running
from tests.polling import wait_for

pytestmark = pytest.mark.integration

UPSTREAM_OFF = (
    "resourcequota",
    "taint-eviction-controller",
    "podgc",
    "nodelifecycle",
    "ttl-after-finished",
    "cronjob",
    "disruption",
)
"""kube-controller-manager's controllers the module's control plane runs without."""
KINDS = (
    "resourcequota",
    "taint-eviction-controller",
    "podgc",
    "ttl-after-finished",
    "cronjob",
    "disruption",
)
FLAGS: dict[str, tuple[str, ...]] = {
    "podgc": ("--pod-gc-check-period=300ms", "--pod-gc-quarantine-time=2s"),
}
"""Each controller's flags beyond the stack's (upstream's period and quarantine are 20 s
and 40 s). The collector's default threshold of terminated pods (12500) leaves the other
cases' Failed pods alone."""
WITHIN = 90.0
"""Seconds a side may take to settle (a deadline, not a measurement: the machine is busy)."""


@pytest.fixture(scope="module")
def node_fault_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A control plane of this module's own without upstream's :data:`UPSTREAM_OFF`
    (no nodes)."""
    yield from local_cluster(
        tmp_path_factory,
        "node-faults",
        nodes=0,
        controllers=",".join(["*", *(f"-{name}" for name in UPSTREAM_OFF)]),
    )


@pytest.fixture(scope="module")
def admin(node_fault_cluster: LocalCluster) -> Iterator[KubeClient]:
    yield from admin_kube(node_fault_cluster, "node-fault-test", workers=8)


@pytest.fixture(scope="module")
def upstream_admin(cluster: LocalCluster) -> Iterator[KubeClient]:
    yield from admin_kube(cluster, "node-fault-test", workers=8)


@pytest.fixture(scope="module")
def faults(
    node_fault_cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Faults]:
    yield from faults_running(
        node_fault_cluster,
        tmp_path_factory.mktemp("node-faults-logs"),
        KINDS,
        lambda kind: FLAGS.get(kind, ()),
    )


# Quotas ----------------------------------------------------------------------------------
NAMESPACES = 8
HARD = {"pods": "50", "requests.cpu": "50", "count/configmaps": "50"}

FILL = 6
"""Pods and ConfigMaps each namespace has before the fault."""
PACE = 0.2
"""Seconds between two namespaces' churn."""

QuotaEnd = dict[int, dict[str, Any]]
"""Each namespace's quota status (``hard`` and ``used``), by the namespace's index."""


def cpu_of(i: int, j: int) -> int:
    """Pod ``j`` of namespace ``i``'s cpu request in millicores (some sums whole cores)."""
    return 100 * (1 + (i + j) % 4)


def millicores(text: str) -> int:
    return int(text[:-1]) if text.endswith("m") else int(text) * 1000


def cores(total: int) -> str:
    """A sum of millicores as apimachinery's Quantity writes it (``1500m``, ``2``, ``0``)."""
    return str(total // 1000) if total % 1000 == 0 else f"{total}m"


@dataclass
class Burst:
    """One burst's namespaces (``<prefix>-<tag>-<i>``) and its steps: what is made,
    deleted and failed in each namespace, the same on every side."""

    prefix: str
    tag: str = field(default_factory=lambda: uuid.uuid4().hex[:5])

    @property
    def names(self) -> list[str]:
        return [f"{self.prefix}-{self.tag}-{i}" for i in range(NAMESPACES)]

    def start(self, kube: KubeClient) -> None:
        """The namespaces and their quotas; returns once every quota has a status (quota
        admission refuses a pod or ConfigMap until then)."""

        def one(ns: str) -> None:
            kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
            kube.request(
                "POST",
                path(ns, "resourcequotas"),
                {"metadata": {"name": "q"}, "spec": {"hard": HARD}},
            )

        in_parallel(one, self.names)
        wait_for(
            lambda: all(quota_status(kube, ns).get("used") is not None for ns in self.names),
            "every quota's first status",
            WITHIN,
        )

    def step(
        self, kube: KubeClient, make: range, drop: range, fail: range, *, paced: bool = False
    ) -> None:
        """In every namespace at once (``paced``: one namespace after the other, a pause
        between them, so that a fault strikes in the middle): make pods and ConfigMaps
        ``make``, delete pods and ConfigMaps ``drop``, turn pods ``fail`` Failed."""

        def one(i: int) -> None:
            ns = self.names[i]
            for j in make:
                cpu = f"{cpu_of(i, j)}m"
                body = pod(f"p{j:02d}", box("c", {"cpu": cpu}, {"cpu": cpu}))
                create(kube, path(ns, "pods"), body)
                cm = {"metadata": {"name": f"c{j:02d}"}, "data": {"k": "v"}}
                create(kube, path(ns, "configmaps"), cm)
            for j in drop:
                for plural, name in (("pods", f"p{j:02d}"), ("configmaps", f"c{j:02d}")):
                    with contextlib.suppress(NotFoundError):
                        kube.request("DELETE", path(ns, plural, name))
            for j in fail:
                fail_pod(kube, ns, f"p{j:02d}")

        if not paced:
            in_parallel(one, list(range(NAMESPACES)))
            return
        for i in range(NAMESPACES):
            one(i)
            time.sleep(PACE)

    def fill(self, kube: KubeClient) -> None:
        """The burst's creates before the fault (quota admission adds them up)."""
        self.step(kube, range(0, FILL), range(0), range(0))

    def churn(self, kube: KubeClient) -> None:
        """The burst's deletions and failures the fault strikes in the middle of (the
        controller's to subtract), after :meth:`fill`."""
        self.step(kube, range(0), range(0, 2), range(2, 3), paced=True)

    def during(self, kube: KubeClient) -> None:
        """The burst's part while the fault lasts (after :meth:`churn`)."""
        self.step(kube, range(6, 8), range(3, 4), range(4, 5))
        self.step(kube, range(0), range(6, 7), range(0))

    def drop(self, kube: KubeClient) -> None:
        in_parallel(lambda ns: drop_namespace(kube, ns), self.names)


def fail_pod(kube: KubeClient, ns: str, name: str) -> None:
    def failed(got: dict[str, Any]) -> None:
        got["status"] = {**(got.get("status") or {}), "phase": "Failed"}

    update(kube, path(ns, "pods", name), failed, f"cannot fail {ns}/{name}", subresource="/status")


def quota_status(kube: KubeClient, ns: str) -> dict[str, Any]:
    return dict(kube.request("GET", path(ns, "resourcequotas", "q")).get("status") or {})


def truth(kube: KubeClient, ns: str) -> dict[str, str]:
    """What namespace ``ns`` uses of :data:`HARD`, counted as upstream's evaluators count:
    pods and their cpu requests over the pods neither Succeeded nor Failed (the burst's
    pods are unbound, so a deleted one is gone at once), and every ConfigMap (the
    published ``kube-root-ca.crt`` too)."""
    pods = kube.request("GET", path(ns, "pods")).get("items") or ()
    live = [p for p in pods if (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
    cpu = sum(
        millicores(c["resources"]["requests"]["cpu"]) for p in live for c in p["spec"]["containers"]
    )
    maps = kube.request("GET", path(ns, "configmaps")).get("items") or ()
    return {"pods": str(len(live)), "requests.cpu": cores(cpu), "count/configmaps": str(len(maps))}


def settled(kube: KubeClient, burst: Burst) -> QuotaEnd | None:
    """Every quota's status once each one's ``used`` is its namespace's :func:`truth` and
    its ``hard`` is :data:`HARD`, else None."""
    end: QuotaEnd = {}
    for i, ns in enumerate(burst.names):
        status = quota_status(kube, ns)
        if status.get("hard") != HARD or status.get("used") != truth(kube, ns):
            return None
        end[i] = status
    return end


def mismatches(kube: KubeClient, burst: Burst) -> dict[str, tuple[dict[str, Any], dict[str, str]]]:
    """Each namespace whose quota's status is not its :func:`truth`: (status, truth)."""
    found = {}
    for ns in burst.names:
        status, used = quota_status(kube, ns), truth(kube, ns)
        if status.get("hard") != HARD or status.get("used") != used:
            found[ns] = (status, used)
    return found


def quota_end(kube: KubeClient, burst: Burst, what: str) -> QuotaEnd:
    """:func:`settled`, awaited, and still the same a second later."""
    end: QuotaEnd = wait_for(
        lambda: settled(kube, burst),
        what,
        WITHIN,
        actual=lambda: f"(status, truth) differ: {mismatches(kube, burst)}",
    )
    time.sleep(1.0)
    assert settled(kube, burst) == end, f"{what}: changed after settling"
    return end


def replenished(kube: KubeClient, burst: Burst) -> int:
    """How many quotas count fewer pods than their namespace's creates: the controller's
    doing (admission only adds)."""
    return sum(1 for ns in burst.names if int(quota_status(kube, ns)["used"]["pods"]) < FILL)


@pytest.fixture(scope="module")
def expected_quotas(upstream_admin: KubeClient) -> QuotaEnd:
    """The burst's end under upstream's resource quota controller, no fault."""
    burst = Burst("quota-fault-up")
    try:
        burst.start(upstream_admin)
        burst.fill(upstream_admin)
        burst.churn(upstream_admin)
        burst.during(upstream_admin)
        return quota_end(upstream_admin, burst, "upstream's quotas to settle")
    finally:
        burst.drop(upstream_admin)


@contextlib.contextmanager
def churning(kube: KubeClient, burst: Burst) -> Iterator[int]:
    """Start the burst, :meth:`Burst.churn` on a thread, and enter once the controller
    has replenished some quota, with how many it had then; the churn is done when the
    block ends (what it raised is raised there)."""
    burst.start(kube)
    burst.fill(kube)
    with ThreadPoolExecutor(1) as pool:
        churn = pool.submit(burst.churn, kube)
        yield wait_for(lambda: replenished(kube, burst), "a quota replenished", WITHIN)
        churn.result(WITHIN)


def test_resourcequota_sigkill_mid_burst(
    faults: Faults, admin: KubeClient, expected_quotas: QuotaEnd
) -> None:
    burst = Burst("quota-fault-kill")
    try:
        with churning(admin, burst) as at_kill:
            faults.kill("resourcequota")
            killed = time.monotonic()
        burst.during(admin)
        faults.replace("resourcequota")
        end = quota_end(admin, burst, "every quota's usage after the SIGKILL")
        assert end == expected_quotas
        faults.check_exits()
        print(
            f"resourcequota SIGKILLed with {at_kill} of {NAMESPACES} quotas replenished: "
            f"settled {time.monotonic() - killed:.1f}s later"
        )
    finally:
        burst.drop(admin)


def test_informer_restart_mid_quota_burst(
    faults: Faults, admin: KubeClient, expected_quotas: QuotaEnd
) -> None:
    stack = faults.stack
    burst = Burst("quota-fault-inf")
    try:
        assert stack.informer is not None
        with churning(admin, burst) as at_kill:
            stack.informer.kill()
            killed = time.monotonic()
        burst.during(admin)
        stack.informer.start()
        stack.wait_serving(stack.informer, stack.informer_address)
        end = quota_end(admin, burst, "every quota's usage after the informer's restart")
        assert end == expected_quotas
        # The controllers kept running through the informer's restart.
        faults.check_exits()
        print(
            f"informer restarted with {at_kill} of {NAMESPACES} quotas replenished: "
            f"settled {time.monotonic() - killed:.1f}s later"
        )
    finally:
        burst.drop(admin)


# Taint eviction --------------------------------------------------------------------------
SHORT = 6
"""The short-tolerating pods' ``tolerationSeconds``."""
CONDITION = {
    "type": "DisruptionTarget",
    "status": "True",
    "reason": "DeletionByTaintManager",
    "message": "Taint manager: deleting due to NoExecute taint",
}
"""The condition upstream's controller writes before deleting (its time left out)."""
PODS: dict[str, list[dict[str, Any]]] = {
    **{f"untolerating-{i:02d}": [] for i in range(16)},
    **{f"other-value-{i}": [tolerate("no")] for i in range(2)},
    **{f"no-schedule-only-{i}": [tolerate(effect="NoSchedule")] for i in range(2)},
    **{f"short-{i}": [tolerate(seconds=SHORT)] for i in range(4)},
    **{f"forever-{i}": [tolerate("yes")] for i in range(3)},
    **{f"forever-any-{i}": [tolerate()] for i in range(3)},
}
"""The case's pods (name: tolerations of the test taint's key besides :data:`KEEP_OFF`'s)."""
EVICTED = sorted(n for n in PODS if not n.startswith("forever"))
"""What upstream's controller ends having deleted once the node carries ``no_execute("yes")``."""

PodEnd = dict[str, dict[str, Any] | None]
"""Each pod's end: its DisruptionTarget condition (time left out) if it was marked for
deletion, else None."""


def node_body(name: str) -> dict[str, Any]:
    """A node nothing manages (no kwok annotation, no kubelet), with :data:`KEEP_OFF`."""
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
        "spec": {"taints": [dict(KEEP_OFF)]},
    }


def pod_states(kube: KubeClient, ns: str) -> PodEnd:
    states: PodEnd = {}
    for got in kube.request("GET", path(ns, "pods")).get("items") or ():
        name = got["metadata"]["name"]
        if not got["metadata"].get("deletionTimestamp"):
            states[name] = None
            continue
        states[name] = {}
        for condition in (got.get("status") or {}).get("conditions") or ():
            if condition.get("type") == "DisruptionTarget":
                states[name] = {k: condition.get(k) for k in CONDITION}
    return states


def marked(kube: KubeClient, ns: str) -> list[str]:
    return sorted(n for n, s in pod_states(kube, ns).items() if s is not None)


@pytest.fixture
def eviction_ns(admin: KubeClient) -> Iterator[str]:
    ns = f"evict-fault-{uuid.uuid4().hex[:6]}"
    admin.request("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    try:
        yield ns
    finally:
        # No kubelet finishes a deletion here: the pods go at once.
        for name in PODS:
            with contextlib.suppress(NotFoundError):
                admin.request(
                    "DELETE",
                    path(ns, "pods", name),
                    {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0},
                )
        drop_namespace(admin, ns)


@contextlib.contextmanager
def unmanaged_node(kube: KubeClient) -> Iterator[str]:
    name = f"evict-fault-{uuid.uuid4().hex[:8]}"
    kube.request("POST", "/api/v1/nodes", node_body(name))
    try:
        yield name
    finally:
        with contextlib.suppress(NotFoundError, ConflictError):
            kube.request("DELETE", f"/api/v1/nodes/{name}")


def test_taint_eviction_sigkill_with_evictions_pending(
    faults: Faults, admin: KubeClient, eviction_ns: str
) -> None:
    ns = eviction_ns
    with unmanaged_node(admin) as node:
        make_pods(admin, ns, node, PODS)
        set_taints(admin, node, no_execute("yes"))
        tainted = time.monotonic()
        wait_for(lambda: marked(admin, ns), "the first deletions", WITHIN)
        faults.kill("taint-eviction-controller")
        at_kill = marked(admin, ns)
        # The timed evictions were pending: the successor must find them again.
        assert not any(n.startswith("short") for n in at_kill), at_kill
        faults.replace("taint-eviction-controller")
        wait_for(
            lambda: marked(admin, ns) == EVICTED,
            f"exactly {EVICTED} marked for deletion",
            WITHIN,
            actual=lambda: marked(admin, ns),
        )
        # The forever-tolerating pods stay: nothing is left pending to delete them.
        time.sleep(1.5)
        end = pod_states(admin, ns)
    assert sorted(n for n, s in end.items() if s is not None) == EVICTED
    assert all(end[n] == CONDITION for n in EVICTED), {n: end[n] for n in EVICTED}
    faults.check_exits()
    print(
        f"taint-eviction-controller SIGKILLed with {len(at_kill)} of {len(EVICTED)} "
        f"evictions done: all done {time.monotonic() - tainted:.1f}s after the taint"
    )


# Pod GC ----------------------------------------------------------------------------------
ORPHANS = 30
"""Pods bound to the node the test deletes before the fault."""
LATE = 5
"""Pods bound to the missing node while the collector is down."""
BYSTANDERS = 4
"""Running pods on a node that exists."""
GC_CONDITION = {
    "type": "DisruptionTarget",
    "status": "True",
    "reason": "DeletionByPodGC",
    "message": "PodGC: node no longer exists",
}
"""The condition upstream's collector writes on an orphan (its time and observed
generation left out)."""


def held_pod(name: str, node: str) -> dict[str, Any]:
    """A pod bound to ``node`` (tolerating :data:`KEEP_OFF`), held by the test's finalizer."""
    body = pod_body(name, node)
    body["metadata"]["finalizers"] = [HOLD]
    return body


def gc_pods(kube: KubeClient, ns: str) -> dict[str, dict[str, Any]]:
    return {p["metadata"]["name"]: p for p in kube.request("GET", path(ns, "pods"))["items"]}


def collected(kube: KubeClient, ns: str) -> list[str]:
    """The pods the collector has deleted (held by the test's finalizer)."""
    return sorted(n for n, p in gc_pods(kube, ns).items() if p["metadata"].get("deletionTimestamp"))


def gc_end(pod: dict[str, Any]) -> dict[str, Any]:
    """The pod's :func:`gc_view`, its condition cut to :data:`GC_CONDITION`'s fields and
    ``observedGeneration``."""
    view = gc_view(pod)
    view["disruption_target"] = [
        {k: c.get(k) for k in (*GC_CONDITION, "observedGeneration")}
        for c in view["disruption_target"]
    ]
    return view


def orphan_end(generation: int) -> dict[str, Any]:
    """What upstream's collector leaves of an orphan whose generation was ``generation``
    when it was collected (the deletion raises it): Failed at that generation, deleted
    with grace 0, the condition at that generation, the finalizer kept."""
    return {
        "phase": "Failed",
        "observed_generation": generation,
        "deleting": True,
        "grace": 0,
        "disruption_target": [{**GC_CONDITION, "observedGeneration": generation}],
        "finalizers": [HOLD],
    }


@pytest.fixture
def gc_ns(admin: KubeClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace of the case's pods; the test's finalizers released at the end."""
    yield from scoped_namespace(admin, request)


def test_podgc_sigkill_mid_collection(faults: Faults, admin: KubeClient, gc_ns: str) -> None:
    kube, ns = admin, gc_ns
    orphans = [f"orphan-{i:02d}" for i in range(ORPHANS)]
    late = [f"late-{i}" for i in range(LATE)]
    bystanders = [f"bystander-{i}" for i in range(BYSTANDERS)]
    with unmanaged_node(kube) as doomed, unmanaged_node(kube) as kept:
        try:
            made = in_parallel(
                lambda n: create(kube, path(ns, "pods"), held_pod(n, doomed)), orphans
            )
            in_parallel(lambda n: create(kube, path(ns, "pods"), held_pod(n, kept)), bystanders)
            for name in bystanders:
                kube.request(
                    "PATCH",
                    path(ns, "pods", name) + "/status",
                    {"status": {"phase": "Running"}},
                    content_type="application/merge-patch+json",
                )
            before = {n: gc_pods(kube, ns)[n] for n in bystanders}
            kube.request("DELETE", f"/api/v1/nodes/{doomed}")
            orphaned = time.monotonic()
            at_kill: list[str] = []
            deadline = orphaned + WITHIN
            while not at_kill and time.monotonic() < deadline:
                at_kill = collected(kube, ns)
                time.sleep(0.05)
            assert at_kill, "no orphan collected"
            faults.kill("podgc")
            killed = collected(kube, ns)
            # Killed mid-collection: the successor has orphans of the first instance to find.
            assert len(killed) < ORPHANS, killed
            half_done = sorted(
                n
                for n, p in gc_pods(kube, ns).items()
                if n not in killed and (p.get("status") or {}).get("phase") == "Failed"
            )
            made += in_parallel(lambda n: create(kube, path(ns, "pods"), held_pod(n, doomed)), late)
            generations = {p["metadata"]["name"]: p["metadata"]["generation"] for p in made}
            faults.replace("podgc")
            want = sorted(orphans + late)
            wait_for(
                lambda: collected(kube, ns) == want,
                f"every orphan collected: {want}",
                WITHIN,
                actual=lambda: collected(kube, ns),
            )
            # Nothing left for a sweep to collect: the bystanders stay.
            time.sleep(1.0)
            end = gc_pods(kube, ns)
            assert sorted(end) == sorted(want + bystanders)
            wrong = {
                n: gc_end(end[n]) for n in want if gc_end(end[n]) != orphan_end(generations[n])
            }
            assert not wrong, {n: (v, orphan_end(generations[n])) for n, v in wrong.items()}
            changed = {
                n: gc_view(end[n])
                for n in bystanders
                if end[n]["metadata"]["resourceVersion"] != before[n]["metadata"]["resourceVersion"]
            }
            assert not changed, changed
            assert all(gc_view(end[n])["phase"] == "Running" for n in bystanders)
            faults.check_exits()
        finally:
            # The test's finalizers released (the collected pods go) and, before their
            # node goes, the bystanders deleted at once: no kubelet finishes a deletion.
            drop_namespace(kube, ns)
            for name in bystanders:
                with contextlib.suppress(NotFoundError):
                    kube.request(
                        "DELETE",
                        path(ns, "pods", name),
                        {"kind": "DeleteOptions", "apiVersion": "v1", "gracePeriodSeconds": 0},
                    )
    print(
        f"podgc SIGKILLed with {len(killed)} of {ORPHANS} orphans deleted "
        f"({len(half_done)} more Failed, not deleted): all {len(want)} collected "
        f"{time.monotonic() - orphaned:.1f}s after the node's deletion"
    )


# TTL after finished ----------------------------------------------------------------------
NOW_JOBS = 10
LATER_JOBS = 10
LATER_TTL = 8
"""Seconds after their finish the pending Jobs expire: long after the kill."""
LATE_JOBS = 5


@pytest.fixture
def ttl_ns(admin: KubeClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace of the case's Jobs, dropped at the end."""
    yield from scoped_namespace(admin, request)


def deleted_jobs(kube: KubeClient, ns: str, names: list[str]) -> list[str]:
    """Those of ``names`` gone, or being deleted."""
    items = kube.request("GET", jobs_path(ns)).get("items") or ()
    left = {j["metadata"]["name"] for j in items if not j["metadata"].get("deletionTimestamp")}
    return sorted(n for n in names if n not in left)


def test_ttl_after_finished_sigkill_with_deletions_pending(
    faults: Faults, admin: KubeClient, ttl_ns: str
) -> None:
    kube, ns = admin, ttl_ns
    now = [f"now-{i:02d}" for i in range(NOW_JOBS)]
    later = [f"later-{i:02d}" for i in range(LATER_JOBS)]
    late = [f"late-{i}" for i in range(LATE_JOBS)]
    ttls = {**dict.fromkeys(now + late, 0), **dict.fromkeys(later, LATER_TTL)}
    in_parallel(lambda n: create_job(kube, ns, n, ttls[n]), [*ttls])
    create_job(kube, ns, "running", 0)
    create_job(kube, ns, "untimed", None)
    started = stamp(-5)
    finish(kube, ns, "untimed", "Complete", stamp(), started)
    in_parallel(lambda n: finish(kube, ns, n, "Complete", stamp(), started), now + later)
    finished = time.monotonic()
    wait_for(lambda: deleted_jobs(kube, ns, now), "the first deletions", WITHIN)
    faults.kill("ttl-after-finished")
    at_kill = deleted_jobs(kube, ns, now + later)
    # The later Jobs' deletions were pending: the successor must find them again.
    assert not any(n.startswith("later") for n in at_kill), at_kill
    in_parallel(lambda n: finish(kube, ns, n, "Complete", stamp(), started), late)
    faults.replace("ttl-after-finished")
    want = sorted(now + later + late)
    try:
        wait_for(lambda: deleted_jobs(kube, ns, want) == want, "every expired Job", WITHIN)
    except pytest.fail.Exception:
        pytest.fail(f"want {want} deleted, got {deleted_jobs(kube, ns, want)}")
    # Nothing is left pending to delete the others.
    time.sleep(1.5)
    assert deleted_jobs(kube, ns, ["running", "untimed"]) == []
    faults.check_exits()
    print(
        f"ttl-after-finished SIGKILLed with {len(at_kill)} of {len(want)} Jobs deleted: "
        f"all deleted {time.monotonic() - finished:.1f}s after they finished"
    )


# CronJob ---------------------------------------------------------------------------------
EARLY_CRONJOBS = 24
LATE_CRONJOBS = 8
SCHEDULED = "batch.kubernetes.io/cronjob-scheduled-timestamp"


def due(now: datetime.datetime) -> tuple[str, datetime.datetime]:
    """A daily schedule (UTC) whose latest time is 12 hours before ``now``, and that time:
    the next is 12 hours away, so a case's few seconds see no other."""
    at = (now - datetime.timedelta(hours=12)).replace(second=0, microsecond=0)
    return f"{at.minute} {at.hour} * * *", at


def rfc3339(t: datetime.datetime) -> str:
    return t.strftime("%Y-%m-%dT%H:%M:%SZ")


def cronjob_body(name: str, schedule: str) -> dict[str, Any]:
    """A suspended daily CronJob whose Jobs no controller runs (:data:`NOBODY`)."""
    job = job_body("", None)["spec"]
    return {
        "apiVersion": "batch/v1",
        "kind": "CronJob",
        "metadata": {"name": name},
        "spec": {
            "schedule": schedule,
            "timeZone": "Etc/UTC",
            "concurrencyPolicy": "Forbid",
            "suspend": True,
            "jobTemplate": {"spec": job},
        },
    }


def cronjob_end(kube: KubeClient, ns: str, at: datetime.datetime) -> dict[str, Any]:
    """Each CronJob's Jobs (name, controlled by it, the annotation) and status (active
    names, ``lastScheduleTime``), by name."""
    base = f"/apis/batch/v1/namespaces/{ns}"
    cronjobs = kube.request("GET", f"{base}/cronjobs").get("items") or ()
    jobs = kube.request("GET", f"{base}/jobs").get("items") or ()
    uids = {c["metadata"]["uid"]: c["metadata"]["name"] for c in cronjobs}
    owned: dict[str, list[tuple[str, bool, str]]] = {n: [] for n in uids.values()}
    for job in jobs:
        for ref in job["metadata"].get("ownerReferences") or ():
            if ref["uid"] in uids:
                annotation = (job["metadata"].get("annotations") or {}).get(SCHEDULED, "")
                owned[uids[ref["uid"]]].append(
                    (job["metadata"]["name"], bool(ref.get("controller")), annotation)
                )
    end = {}
    for c in cronjobs:
        status = c.get("status") or {}
        end[c["metadata"]["name"]] = {
            "jobs": sorted(owned[c["metadata"]["name"]]),
            "active": sorted(r["name"] for r in status.get("active") or ()),
            "lastScheduleTime": status.get("lastScheduleTime"),
        }
    return end


@pytest.fixture
def cronjob_ns(admin: KubeClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace of the case's CronJobs, dropped at the end."""
    yield from scoped_namespace(admin, request)


def test_cronjob_sigkill_with_its_informer_mid_schedule(
    faults: Faults, admin: KubeClient, cronjob_ns: str
) -> None:
    kube, ns = admin, cronjob_ns
    schedule, at = due(datetime.datetime.now(datetime.UTC))
    early = [f"early-{i:02d}" for i in range(EARLY_CRONJOBS)]
    late = [f"late-{i}" for i in range(LATE_CRONJOBS)]
    base = f"/apis/batch/v1/namespaces/{ns}/cronjobs"
    in_parallel(lambda n: kube.request("POST", base, cronjob_body(n, schedule)), early + late)
    # Last scheduled an hour before the due time: exactly one time is due.
    before = {"lastScheduleTime": rfc3339(at - datetime.timedelta(hours=1))}

    def set_status(name: str) -> None:
        def change(obj: dict[str, Any]) -> None:
            obj["status"] = before

        update(kube, f"{base}/{name}", change, f"{name}: status", subresource="/status")

    def resume(name: str) -> None:
        kube.request(
            "PATCH",
            f"{base}/{name}",
            {"spec": {"suspend": False}},
            content_type="application/merge-patch+json",
        )

    in_parallel(set_status, early + late)
    in_parallel(resume, early)
    resumed = time.monotonic()

    def started() -> int:
        return sum(1 for e in cronjob_end(kube, ns, at).values() if e["jobs"])

    wait_for(lambda: started() > 0, "the first Job", WITHIN)
    faults.kill("cronjob")
    stack = faults.stack
    assert stack.informer is not None
    stack.informer.kill()
    at_kill = started()
    in_parallel(resume, late)
    stack.informer.start()
    stack.wait_serving(stack.informer, stack.informer_address)
    faults.replace("cronjob")
    minutes = int(at.timestamp()) // 60
    want = {
        name: {
            "jobs": [(f"{name}-{minutes}", True, rfc3339(at))],
            "active": [f"{name}-{minutes}"],
            "lastScheduleTime": rfc3339(at),
        }
        for name in early + late
    }
    wait_for(
        lambda: cronjob_end(kube, ns, at) == want,
        "every CronJob with its one Job, recorded",
        WITHIN,
        actual=lambda: {n: e for n, e in cronjob_end(kube, ns, at).items() if e != want.get(n)},
    )
    # Forbid: nothing more starts while the Jobs are active.
    time.sleep(1.5)
    assert cronjob_end(kube, ns, at) == want
    faults.check_exits()
    print(
        f"cronjob and the informer SIGKILLed with {at_kill} of {len(want)} CronJobs started: "
        f"all started and recorded {time.monotonic() - resumed:.1f}s after the first resumed"
    )


# Disruption ------------------------------------------------------------------------------
BUDGETS = 30
"""Enough that the controller (one worker, 20 requests a second) is still at work when the
fault strikes."""


def replicaset_body(name: str, replicas: int) -> dict[str, Any]:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}]},
            },
        },
    }


def budget_body(name: str, min_available: int) -> dict[str, Any]:
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name},
        "spec": {"minAvailable": min_available, "selector": {"matchLabels": {"app": name}}},
    }


def budget_end(kube: KubeClient, ns: str) -> dict[str, Any]:
    """Each budget's status (the condition without its time), and whether it is of the
    budget's generation, by name."""
    found = kube.request("GET", f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets")
    end = {}
    for budget in found.get("items") or ():
        status = budget.get("status") or {}
        end[budget["metadata"]["name"]] = {
            "current": status.get("observedGeneration") == budget["metadata"]["generation"],
            **{
                k: status.get(k)
                for k in ("expectedPods", "desiredHealthy", "currentHealthy", "disruptionsAllowed")
            },
            "condition": [
                (c.get("type"), c.get("status"), c.get("reason"))
                for c in status.get("conditions") or ()
            ],
        }
    return end


@pytest.fixture
def budget_ns(admin: KubeClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A namespace of the case's ReplicaSets and budgets, dropped at the end."""
    yield from scoped_namespace(admin, request)


def test_disruption_sigkill_with_its_informer_while_owners_scale(
    faults: Faults, admin: KubeClient, budget_ns: str
) -> None:
    kube, ns = admin, budget_ns
    names = [f"web-{i:02d}" for i in range(BUDGETS)]
    apps = f"/apis/apps/v1/namespaces/{ns}/replicasets"
    policy = f"/apis/policy/v1/namespaces/{ns}/poddisruptionbudgets"
    in_parallel(lambda n: kube.request("POST", apps, replicaset_body(n, 2)), names)
    in_parallel(lambda n: kube.request("POST", policy, budget_body(n, 1)), names)
    started = time.monotonic()

    def synced() -> int:
        return sum(1 for e in budget_end(kube, ns).values() if e["current"])

    wait_for(lambda: synced() > 0, "the first budget's status", WITHIN)
    faults.kill("disruption")
    stack = faults.stack
    assert stack.informer is not None
    stack.informer.kill()
    at_kill = synced()

    def change(name: str) -> None:
        kube.request(
            "PATCH",
            f"{apps}/{name}",
            {"spec": {"replicas": 3}},
            content_type="application/merge-patch+json",
        )
        kube.request(
            "PATCH",
            f"{policy}/{name}",
            {"spec": {"minAvailable": 2}},
            content_type="application/merge-patch+json",
        )

    in_parallel(change, names)
    stack.informer.start()
    stack.wait_serving(stack.informer, stack.informer_address)
    faults.replace("disruption")
    settled = {
        "current": True,
        "expectedPods": 3,
        "desiredHealthy": 2,
        "currentHealthy": 0,
        "disruptionsAllowed": 0,
        "condition": [("DisruptionAllowed", "False", "InsufficientPods")],
    }
    want = dict.fromkeys(names, settled)
    wait_for(
        lambda: budget_end(kube, ns) == want,
        "every budget's status of the new scale and generation",
        WITHIN,
        actual=lambda: {n: e for n, e in budget_end(kube, ns).items() if e != settled},
    )
    faults.check_exits()
    print(
        f"disruption and the informer SIGKILLed with {at_kill} of {BUDGETS} budgets synced: "
        f"all current {time.monotonic() - started:.1f}s after the budgets were made"
    )


# Node lifecycle --------------------------------------------------------------------------
GRACE = 6
"""Seconds of Steward's ``--node-monitor-grace-period`` here (upstream's default is 50)."""
LIFECYCLE_FLAGS = (
    f"--node-monitor-grace-period={GRACE}s",
    f"--node-startup-grace-period={GRACE}s",
    "--node-monitor-period=1s",
    "--node-eviction-rate=10",
)
UNREACHABLE = "node.kubernetes.io/unreachable"
DEAD_CONDITIONS: dict[str, tuple[str, str, str]] = {
    "Ready": ("Unknown", "NodeStatusUnknown", "Kubelet stopped posting node status."),
    **{
        kind: ("Unknown", "NodeStatusNeverUpdated", "Kubelet never posted node status.")
        for kind in ("MemoryPressure", "DiskPressure", "PIDPressure")
    },
}
"""A node whose Lease went stale, as upstream's ``tryUpdateNodeHealth``
(pkg/controller/nodelifecycle/node_lifecycle_controller.go) leaves its conditions: Ready
(posted by the test) Unknown, the pressure conditions (never posted) added Unknown."""


@pytest.fixture
def lifecycle_nodes(admin: KubeClient) -> Iterator[list[str]]:
    """Nodes a case made (no kwok annotation), deleted at the end with their Leases."""
    made: list[str] = []
    yield made
    for name in made:
        with contextlib.suppress(NotFoundError):
            admin.request("DELETE", f"/api/v1/nodes/{name}")
        with contextlib.suppress(NotFoundError):
            admin.request(
                "DELETE", f"/apis/coordination.k8s.io/v1/namespaces/{LEASE_NS}/leases/{name}"
            )


def node_health(
    kube: KubeClient, name: str
) -> tuple[dict[str, tuple[str, str, str]], set[tuple[str, str]]]:
    """The node's conditions (status, reason, message) and its ``node.kubernetes.io/``
    taints (key, effect)."""
    node = node_of(kube, name)
    conditions = {
        kind: (c["status"], c.get("reason", ""), c.get("message", ""))
        for kind, c in conditions_of(node).items()
    }
    return conditions, managed_taints(node)


def healthy(kube: KubeClient, name: str) -> bool:
    conditions, taints = node_health(kube, name)
    return conditions["Ready"][0] == "True" and not taints


def test_nodelifecycle_sigkill_while_a_lease_goes_stale(
    faults: Faults, admin: KubeClient, lifecycle_nodes: list[str]
) -> None:
    kube, stack = admin, faults.stack
    # Two nodes, one of them kept alive: with every node down the controller would take
    # the fault to be its own (FullDisruption everywhere) and taint nothing NoExecute.
    dying = make_node(kube, [], "nl-fault-dying", conditions=[ready_condition()])
    alive = make_node(kube, [], "nl-fault-alive", conditions=[ready_condition()])
    lifecycle_nodes.extend([dying, alive])
    kubelet = FakeKubelet(kube)
    kubelet.alive.update({dying, alive})
    with kubelet.running("node-fault-kubelet"):
        first = stack.start_controller("nodelifecycle", flags=LIFECYCLE_FLAGS)
        stack.wait_holder("nodelifecycle", first)
        # The API server's admission taints a new node not-ready:NoSchedule; the
        # controller removes it from a Ready node.
        wait_for(
            lambda: healthy(kube, dying) and healthy(kube, alive), "both nodes healthy", WITHIN
        )
        kubelet.alive.discard(dying)
        stale = time.monotonic()
        time.sleep(1.0)
        faults.kill("nodelifecycle")
        killed = time.monotonic() - stale
        assert healthy(kube, dying), "the grace period ended before the fault"
        successor = stack.start_controller("nodelifecycle", flags=LIFECYCLE_FLAGS)
        stack.wait_holder("nodelifecycle", successor)

        def dead() -> bool:
            taints = node_health(kube, dying)[1]
            return {(UNREACHABLE, "NoSchedule"), (UNREACHABLE, "NoExecute")} <= taints

        wait_for(dead, "the stale node tainted unreachable", WITHIN)
        conditions, taints = node_health(kube, dying)
        assert {k: conditions[k] for k in DEAD_CONDITIONS} == DEAD_CONDITIONS
        assert taints == {(UNREACHABLE, "NoSchedule"), (UNREACHABLE, "NoExecute")}
        assert healthy(kube, alive), node_health(kube, alive)
    faults.check_exits()
    print(
        f"nodelifecycle SIGKILLed {killed:.1f}s into the grace period: the stale node "
        f"tainted unreachable {time.monotonic() - stale:.1f}s after its Lease's last renewal"
    )
