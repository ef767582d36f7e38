"""The resource quota workload of ``make bench`` (:mod:`bench.controllers`): N namespaces of
P pods, a ResourceQuota in each, and how long each side's resource quota controller takes
to make every quota's ``status.used`` right again after a burst of churn.

# The cluster
The workload runs in a cluster of its own per side, of :func:`nodes_for` kwok nodes (every
pod of the burst's peak at :data:`PODS_PER_NODE` a node). Upstream's side runs
kube-controller-manager with every controller, its ``resourcequota`` controller included;
Steward's runs it without that one, and Steward's informer, manager and resource quota
controller (no other of Steward's controllers) as ``make up`` runs them. Both controllers
run :data:`WORKERS` workers and recalculate every quota every :data:`SYNC_PERIOD` seconds
(their defaults), under the same client rate limits (the setting).

# Who keeps ``status.used``
Two writers, as upstream has them (pkg/controller/resourcequota/resource_quota_controller.go
and plugin/pkg/admission/resourcequota in k8s.io/kubernetes): kube-apiserver's
ResourceQuota admission charges a pod to its namespace's quotas when it is created (and
refuses the create while a quota has no status yet), and nothing but the resource quota
controller gives the usage back when a pod is deleted: its monitor of pods sees the
deletion and queues the namespace's quotas, whose usage it recalculates from its cache of
pods. So the burst's creations are counted at once on both sides, and the time measured is
the controller's: the deletions replenished.

# What is measured
A phase creates N namespaces (prefix ``bench-quota-``) and P bare pods in each, bound to a
kwok node by ``spec.nodeName`` (the scheduler takes no part) with one container requesting
:data:`FIRST` (cpu and memory); then one ResourceQuota in each namespace
(:func:`quota_body`: ``pods``, ``requests.cpu``, ``requests.memory`` and
``count/configmaps``, limits no workload comes near, so nothing is refused). The *settle*
time runs from the first quota created to the first poll at which every quota's status
holds its usage (:func:`matches`): the controller's first calculation of every quota (not
metered).

Then the burst (metered: ``bench.controllers.Meter``, bounded by the clock): in every
namespace, half as many new pods as it holds created, requesting :data:`SECOND` (so that
every quota's right usage after the burst differs from its usage before), then as many of
its first pods deleted with ``gracePeriodSeconds`` 0 (the API server removes each at once,
so no pod lingers in a grace period, still counted); ``--threads`` namespaces at a time,
so that one namespace's deletions run beside others' creations. The span runs from the
burst's first request to the first poll (every :data:`POLL_SECONDS`, one list of every
ResourceQuota), once the burst's last request has returned, at which every quota's
``pods``, ``requests.cpu`` and ``requests.memory`` equal what its namespace holds;
``trailing`` is the part of it after the last request. What a namespace holds is known
from the requests that succeeded; after the span a list of every pod of the namespaces
computes it as the controller does (pods not Failed or Succeeded nor past a deletion's
grace period, their containers' requests summed: the pods have one container and no init
containers or overhead), and the phase fails unless the two agree and every quota still
matches.

# Why a namespace's creations come before its deletions
Upstream's design has a race that a namespace's creations beside its deletions would hit
on both sides: admission charges a pod to the quota (a status write) before the pod is
stored, so a controller can see the charged quota before it sees the new pod. A sync in
that window (queued by a deletion in the namespace) counts the pods it knows, writes a
usage without the new pod at the version it read, and succeeds; creations queue no sync,
so the quota stays short of one pod until the next full recalculation, up to
:data:`SYNC_PERIOD` later. A tiny run of interleaved churn (2 namespaces of 6 pods) ended so
in about one run of three, upstream's and Steward's alike: the span then measured where
in its resync period the burst fell, not the controller. A namespace's deletions and
creations arrive on one watch of pods, in order; when every creation of a namespace was
answered before its first deletion, a sync that a deletion queues finds every new pod
already known, and the span is the replenishment's own.

The burst's figures are per pod churned (one deleted or one created): CPU seconds of each
process, and the API requests of the resource quota controller's identity
(:data:`IDENTITIES`), whose ``update resourcequotas/status`` are its quota syncs that
changed a status.
"""

from __future__ import annotations

import concurrent.futures
import datetime
import threading
import time
from collections.abc import Iterable, Iterator
from fractions import Fraction
from typing import Any

from bench.endpoints import wait_for_service_account
from bench.informer import Api
from bench.job import Span
from steward.cluster.progress import Progress
from steward.runtime.quantity import parse_quantity

WORKERS = 5
"""Resource quota workers on both sides: kube-controller-manager's
``--concurrent-resource-quota-syncs`` default (5) and Steward's resource quota controller's
default."""

SYNC_PERIOD = 300.0
"""Seconds between two full recalculations of every quota on both sides:
kube-controller-manager's ``--resource-quota-sync-period`` default (5 minutes) and
Steward's."""

CONTROLLER = "resourcequota"
"""The resource quota controller's name (kube-controller-manager's ``--controllers``,
Steward's registry)."""

IDENTITIES = {
    False: "system:serviceaccount:kube-system:resourcequota-controller",
    True: "steward:controller:resourcequota",
}
"""The resource quota controller's identity on each side (Steward's side: True); upstream's
is its service account, kube-controller-manager running with
``--use-service-account-credentials``."""

STATUS_REQUEST = "update resourcequotas/status"
"""A quota sync that changed the quota's status (the audit log's verb and resource)."""

PREFIX = "bench-quota"
"""The workload's namespaces: ``bench-quota-000``, ..."""

FIRST = {"cpu": "100m", "memory": "64Mi"}
"""What each container of the pods created before the burst requests."""
SECOND = {"cpu": "50m", "memory": "32Mi"}
"""What each container of the pods the burst creates requests."""

HARD = {
    "pods": "100k",
    "requests.cpu": "10k",
    "requests.memory": "100Ti",
    "count/configmaps": "10k",
}
"""Every quota's ``spec.hard``: far above any usage of the workload."""

CHECKED = ("pods", "requests.cpu", "requests.memory")
"""The usages compared with the truth (module docs)."""

PODS_PER_NODE = 250
"""Pods per kwok node (its capacity) that :func:`nodes_for` plans for."""

POLL_SECONDS = 0.25
"""How often a phase reads every quota."""

RETRIES = 5
"""Tries of a request the API server answered with a conflict or a server error (the
quota admission's own retries on a contended quota can run out)."""

Usage = dict[str, Fraction]
"""A namespace's usage: resource name (of :data:`CHECKED`) → amount."""

Request = tuple[str, str, Any]
"""A request: method, path and body."""


def half(pods: int) -> int:
    """Pods of a namespace the burst deletes, and creates anew."""
    return pods // 2


def nodes_for(namespaces: int, pods: int) -> int:
    """kwok nodes for the burst's peak (every old pod and every new one at once) at
    :data:`PODS_PER_NODE` a node, and at least 2."""
    peak = namespaces * (pods + half(pods))
    return max(2, -(-peak // PODS_PER_NODE))


def namespace_name(i: int) -> str:
    return f"{PREFIX}-{i:03d}"


def quota_body() -> dict[str, Any]:
    """The ResourceQuota of every namespace (named ``quota``): :data:`HARD`."""
    return {
        "apiVersion": "v1",
        "kind": "ResourceQuota",
        "metadata": {"name": "quota"},
        "spec": {"hard": dict(HARD)},
    }


def pod_body(name: str, node: str, requests: dict[str, str]) -> dict[str, Any]:
    """A bare pod bound to ``node`` whose one container requests ``requests``."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "labels": {"app": PREFIX}},
        "spec": {
            "nodeName": node,
            "terminationGracePeriodSeconds": 0,
            "containers": [
                {"name": "main", "image": "busybox:1", "resources": {"requests": dict(requests)}}
            ],
        },
    }


def usage_of(pods: int, first: int) -> Usage:
    """The usage of ``pods`` pods of which ``first`` request :data:`FIRST` and the rest
    :data:`SECOND`."""
    second = pods - first
    return {
        "pods": Fraction(pods),
        "requests.cpu": first * parse_quantity(FIRST["cpu"])
        + second * parse_quantity(SECOND["cpu"]),
        "requests.memory": first * parse_quantity(FIRST["memory"])
        + second * parse_quantity(SECOND["memory"]),
    }


def counted(pod: dict[str, Any], now: float) -> bool:
    """Whether the pods evaluator counts a pod at ``now`` (``time.time()``): not Failed or
    Succeeded, and not past the end of a deletion's grace period (upstream's
    ``QuotaV1Pod``, pkg/quota/v1/evaluator/core/pods.go)."""
    if (pod.get("status") or {}).get("phase", "") in ("Failed", "Succeeded"):
        return False
    meta = pod["metadata"]
    stamp, grace = meta.get("deletionTimestamp"), meta.get("deletionGracePeriodSeconds")
    if stamp is None or grace is None:
        return True
    deleted = datetime.datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    return not now > deleted + grace


def truth(pods: Iterable[dict[str, Any]], now: float | None = None) -> dict[str, Usage]:
    """Each namespace's usage as the pods evaluator computes it from its pods at ``now``
    (default: now): counted pods (:func:`counted`), their containers' requests summed."""
    when = time.time() if now is None else now
    found: dict[str, Usage] = {}
    for pod in pods:
        if not counted(pod, when):
            continue
        ns = pod["metadata"]["namespace"]
        usage = found.setdefault(ns, {name: Fraction(0) for name in CHECKED})
        usage["pods"] += 1
        for container in pod["spec"]["containers"]:
            requests = (container.get("resources") or {}).get("requests") or {}
            for resource in ("cpu", "memory"):
                if resource in requests:
                    usage[f"requests.{resource}"] += parse_quantity(requests[resource])
    return found


def matches(quota: dict[str, Any], expected: Usage) -> bool:
    """Whether a quota's ``status.used`` holds ``expected`` (the usages of :data:`CHECKED`;
    a missing one is wrong)."""
    used = (quota.get("status") or {}).get("used") or {}
    try:
        return all(
            name in used and parse_quantity(used[name]) == amount
            for name, amount in expected.items()
        )
    except ValueError:
        return False


def _retried(api: Api, method: str, path: str, body: Any = None) -> None:
    """One request, tried again on a conflict (409, not AlreadyExists on a create tried
    again) or a server error (5xx) up to :data:`RETRIES` times.

    Raises:
        RuntimeError: the last try failed.
    """
    for attempt in range(RETRIES):
        try:
            reply = api.request(method, path, body)
        except RuntimeError as err:  # "<method> <path>: <status> <body>"
            status = str(err).removeprefix(f"{method} {path}: ")[:3]
            if attempt + 1 < RETRIES and status.startswith("5"):
                time.sleep(0.1 * (attempt + 1))
                continue
            raise
        if not (isinstance(reply, dict) and reply.get("kind") == "Status"):
            return
        if reply.get("reason") == "AlreadyExists" and attempt:
            return  # an earlier try got through
        if attempt + 1 == RETRIES:
            raise RuntimeError(f"{method} {path}: {reply.get('message', reply)}")
        time.sleep(0.1 * (attempt + 1))


def _parallel(
    api: Api,
    threads: int,
    sequences: list[list[Request]],
    out: Progress | None = None,
) -> None:
    """The requests (``(method, path, body)``, :func:`_retried`) of each sequence one after
    the other, ``threads`` sequences at once; with ``out``, how many are done."""
    total = sum(len(sequence) for sequence in sequences)
    done = 0
    lock = threading.Lock()

    def run(sequence: list[Request]) -> None:
        nonlocal done
        for request in sequence:
            _retried(api, *request)
            with lock:
                done += 1
                count = done
            if out is not None:
                out.tick(f"  {count:,}/{total:,} requests of the burst answered")

    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        for future in [pool.submit(run, sequence) for sequence in sequences]:
            future.result()


def first_pods(
    namespaces: list[str], pods: int, nodes: int
) -> Iterator[tuple[str, dict[str, Any]]]:
    """The POSTs of every namespace's first pods (``old-<i>``), spread over the nodes."""
    for k, ns in enumerate(namespaces):
        for i in range(pods):
            node = f"kwok-node-{(k * pods + i) % nodes}"
            yield f"/api/v1/namespaces/{ns}/pods", pod_body(f"old-{i:04d}", node, FIRST)


def burst_requests(namespaces: list[str], pods: int, nodes: int) -> list[list[Request]]:
    """The burst, a sequence of requests per namespace: half its pods created anew
    (``new-<i>``, requesting :data:`SECOND`), then as many of its first pods deleted
    (``gracePeriodSeconds`` 0). Why in that order: the module docs."""
    churn = half(pods)
    out: list[list[Request]] = []
    for k, ns in enumerate(namespaces):
        base = f"/api/v1/namespaces/{ns}/pods"
        out.append(
            [
                (
                    "POST",
                    base,
                    pod_body(f"new-{i:04d}", f"kwok-node-{(k * pods + pods + i) % nodes}", SECOND),
                )
                for i in range(churn)
            ]
            + [("DELETE", f"{base}/old-{i:04d}?gracePeriodSeconds=0", None) for i in range(churn)]
        )
    return out


def list_pods(api: Api) -> list[dict[str, Any]]:
    """Every pod of the workload's namespaces (pages of 500)."""
    items: list[dict[str, Any]] = []
    token = ""
    while True:
        page = api.request(
            "GET", f"/api/v1/pods?labelSelector=app%3D{PREFIX}&limit=500&continue={token}"
        )
        items += page["items"]
        token = (page.get("metadata") or {}).get("continue") or ""
        if not token:
            return items


def quotas(api: Api) -> dict[str, dict[str, Any]]:
    """Every quota of the workload's namespaces, by namespace."""
    items = api.request("GET", "/api/v1/resourcequotas")["items"]
    return {
        q["metadata"]["namespace"]: q
        for q in items
        if q["metadata"]["namespace"].startswith(f"{PREFIX}-")
    }


def _shown(usage: Usage) -> dict[str, str]:
    return {name: f"{float(amount):g}" for name, amount in usage.items()}


def wait_running(api: Api, timeout: float, out: Progress) -> None:
    """Until kwok has made every pod of the workload Running (the burst then meets no
    status update of the pods made before it).

    Raises:
        RuntimeError: not within ``timeout`` seconds.
    """
    deadline = time.monotonic() + timeout
    selector = f"labelSelector=app%3D{PREFIX}&fieldSelector=status.phase%21%3DRunning"
    while True:
        left = len(api.request("GET", f"/api/v1/pods?{selector}&limit=500")["items"])
        if not left:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"pods not Running in {timeout:.0f} s: {left} (or more) left")
        out.tick(f"  {left}{'+' if left == 500 else ''} pods not Running yet")
        time.sleep(1.0)


def wait_correct(
    api: Api, expected: dict[str, Usage], timeout: float, out: Progress, what: str
) -> float:
    """Poll every quota each :data:`POLL_SECONDS` until each matches its namespace's
    ``expected`` usage; returns the time of that poll (perf_counter).

    Raises:
        RuntimeError: not within ``timeout`` seconds (with how many were right).
    """
    deadline = time.monotonic() + timeout
    while True:
        found = quotas(api)
        now = time.perf_counter()
        wrong = [ns for ns, usage in expected.items() if not matches(found.get(ns, {}), usage)]
        right = len(expected) - len(wrong)
        if not wrong:
            return now
        if time.monotonic() > deadline:
            used = (found.get(wrong[0], {}).get("status") or {}).get("used")
            raise RuntimeError(
                f"{what}: only {right} of {len(expected)} quotas right in {timeout:.0f} s; "
                f"e.g. {wrong[0]}: status.used {used}, not {_shown(expected[wrong[0]])}"
            )
        out.tick(f"  {right}/{len(expected)} quotas right")
        time.sleep(POLL_SECONDS)


def check_truth(api: Api, expected: dict[str, Usage], what: str) -> None:
    """The usage computed from a list of the pods (:func:`truth`) is ``expected``, and
    every quota matches it.

    Raises:
        RuntimeError: what differs.
    """
    actual = truth(list_pods(api))
    wrong = sorted(ns for ns in expected if actual.get(ns) != expected[ns])
    if wrong or set(actual) - set(expected):
        ns = (wrong or sorted(set(actual) - set(expected)))[0]
        raise RuntimeError(
            f"{what}: the pods of {len(wrong)} namespaces are not what the requests made, "
            f"e.g. {ns}: {actual.get(ns)} instead of {expected.get(ns)}"
        )
    found = quotas(api)
    stale = sorted(ns for ns in expected if not matches(found.get(ns, {}), expected[ns]))
    if stale:
        raise RuntimeError(f"{what}: {len(stale)} quotas no longer right, e.g. {stale[0]}")


def run_phase(
    api: Api,
    namespaces: int,
    pods: int,
    nodes: int,
    steward: bool,
    threads: int,
    timeout: float,
    out: Progress,
    meter: Span,
) -> dict[str, Any]:
    """``namespaces`` namespaces of ``pods`` pods and a quota each, settled; then the burst,
    measured by ``meter`` (module docs). ``steward``: whose identity is counted."""
    names = [namespace_name(i) for i in range(namespaces)]
    _parallel(
        api, threads, [[("POST", "/api/v1/namespaces", {"metadata": {"name": n}})] for n in names]
    )
    for n in names:
        wait_for_service_account(api, n, timeout)
    took = api.create_all(
        first_pods(names, pods, nodes), threads=threads, out=out, total=namespaces * pods
    )
    wait_running(api, timeout, out)
    before = dict.fromkeys(names, usage_of(pods, pods))
    out.say(
        f"  {namespaces * pods:,} pods created in {took:.1f} s, every one Running; now a "
        "quota in each namespace"
    )
    started = time.perf_counter()
    _parallel(
        api,
        threads,
        [[("POST", f"/api/v1/namespaces/{n}/resourcequotas", quota_body())] for n in names],
    )
    settled = wait_correct(api, before, timeout, out, "settle")
    check_truth(api, before, "settle")
    churn = half(pods)
    burst = burst_requests(names, pods, nodes)
    out.say(
        f"  every quota right {settled - started:.1f} s after the first was created; the "
        f"burst: {namespaces * churn:,} pods deleted and as many created"
    )
    after = dict.fromkeys(names, usage_of(pods, pods - churn))
    meter.begin()
    burst_started = time.perf_counter()
    _parallel(api, threads, burst, out)
    burst_done = time.perf_counter()
    correct = wait_correct(api, after, timeout, out, "burst")
    measured = meter.end()
    check_truth(api, after, "burst")
    user = IDENTITIES[steward]
    status_writes = sum(
        int(per_user.get(user, {}).get(STATUS_REQUEST, 0))
        for per_user in measured["requests"].values()
    )
    return measured | {
        "namespaces": namespaces,
        "pods_per_namespace": pods,
        "pods_churned": 2 * namespaces * churn,
        "workers": WORKERS,
        "sync_period_seconds": SYNC_PERIOD,
        "nodes": nodes,
        "pods_created_seconds": round(took, 3),
        "settle_seconds": round(settled - started, 3),
        "seconds": round(correct - burst_started, 3),
        "burst_requests_seconds": round(burst_done - burst_started, 3),
        "trailing_seconds": round(correct - burst_done, 3),
        "status_writes": status_writes,
    }
