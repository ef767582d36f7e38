"""The DaemonSet workload of ``make bench`` (:mod:`bench.controllers`): D DaemonSets on N
kwok nodes rolled out, then a rolling update of all of them.

# The cluster
The workload runs in a cluster of its own per side (``--daemonset-nodes`` kwok nodes,
50 by default, and no other node), so that every DaemonSet belongs on every node and the
other workloads keep their own node count. Both sides' controllers run
:data:`WORKERS` workers: kube-controller-manager's ``--concurrent-daemonset-syncs``
default and Steward's DaemonSet controller's default. Either side's pods are bound by
kube-scheduler (the controllers pin each pod to its node with a node affinity).

# What is measured
A phase creates the DaemonSets (one container, the default ``RollingUpdate`` strategy:
``maxUnavailable`` 1, no surge) in a fresh namespace and measures the time from the first
create request until every DaemonSet is rolled out (:func:`rolled_out`: ``status`` has
``observedGeneration`` current and desired, current, updated, ready and available all
equal to the number of nodes, none misscheduled — what ``kubectl rollout status``
waits for, and more), polled every 0.25 s. Then it changes every pod template at once (a
new environment variable) and measures the time from the first update request until
every DaemonSet is rolled out again: each replaces its N pods one node at a time.

After each, outside the measured times, the pods themselves are checked
(:func:`check_pods`, one list of the namespace's pods, the same on both sides): exactly one
live pod of each DaemonSet on each node, every one of the current template. A status that
says rolled out while the pods do not is an error.

# When it cannot finish
A phase that times out says how many DaemonSets were rolled out and the sums of their
status counts, so a controller that stalls shows where.
"""

from __future__ import annotations

import concurrent.futures
import time
from collections import Counter
from typing import Any

from bench.endpoints import wait_for_service_account
from bench.informer import Api
from bench.job import Span
from steward.cluster.progress import Progress

WORKERS = 2
"""DaemonSet workers on both sides: kube-controller-manager's ``--concurrent-daemonset-syncs``
default (2) and Steward's DaemonSet controller's default ``--workers`` (2)."""

STATUS_COUNTS = (
    "desiredNumberScheduled",
    "currentNumberScheduled",
    "updatedNumberScheduled",
    "numberReady",
    "numberAvailable",
)
"""The status counts that must all equal the number of nodes."""

VERSION_ENV = "V"
"""The environment variable the rolling update sets (``"2"``)."""


def daemonset_body(name: str) -> dict[str, Any]:
    """A DaemonSet of one container, the default update strategy."""
    return {
        "apiVersion": "apps/v1",
        "kind": "DaemonSet",
        "metadata": {"name": name},
        "spec": {
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": "busybox:1"}]},
            },
        },
    }


UPDATE = {
    "spec": {
        "template": {
            "spec": {"containers": [{"name": "main", "env": [{"name": VERSION_ENV, "value": "2"}]}]}
        }
    }
}
"""The strategic merge patch of the rolling update."""


def rolled_out(ds: dict[str, Any], nodes: int) -> bool:
    """Whether a DaemonSet's status shows it rolled out on all ``nodes`` nodes at its
    current generation."""
    st = ds.get("status") or {}
    return bool(
        st.get("observedGeneration", 0) >= ds["metadata"]["generation"]
        and all(st.get(count, 0) == nodes for count in STATUS_COUNTS)
        and st.get("numberMisscheduled", 0) == 0
        and st.get("numberUnavailable", 0) == 0
    )


def _progress(items: list[dict[str, Any]], nodes: int) -> str:
    """How far the DaemonSets are: rolled out, and the sums of their status counts."""
    done = sum(1 for d in items if rolled_out(d, nodes))
    sums = Counter[str]()
    for d in items:
        for count in STATUS_COUNTS:
            sums[count] += int((d.get("status") or {}).get(count, 0))
    shown = ", ".join(f"{c} {sums[c]}" for c in STATUS_COUNTS)
    return f"{done}/{len(items)} rolled out ({shown}; of {len(items) * nodes})"


def wait_all(api: Api, ns: str, count: int, nodes: int, timeout: float, out: Progress) -> float:
    """Poll until all ``count`` DaemonSets are rolled out; returns when (perf_counter).

    Raises:
        RuntimeError: not all were rolled out within ``timeout`` seconds (the message says
            how far they got).
    """
    deadline = time.monotonic() + timeout
    while True:
        items = api.request("GET", f"/apis/apps/v1/namespaces/{ns}/daemonsets")["items"]
        now = time.perf_counter()
        if len(items) == count and all(rolled_out(d, nodes) for d in items):
            return now
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{ns}: not every DaemonSet rolled out in {timeout:.0f} s: "
                f"{_progress(items, nodes)}"
            )
        out.tick(f"  {_progress(items, nodes)}")
        time.sleep(0.25)


def check_pods(pods: list[dict[str, Any]], names: list[str], nodes: set[str], version: str) -> None:
    """Exactly one live pod of each DaemonSet on each node, of the template ``version``
    (the value of :data:`VERSION_ENV`, ``""`` for none); pods being deleted are ignored.

    Raises:
        RuntimeError: naming what is wrong.
    """
    placed: Counter[tuple[str, str]] = Counter()
    wrong: list[str] = []
    for pod in pods:
        meta = pod["metadata"]
        if meta.get("deletionTimestamp"):
            continue
        app = (meta.get("labels") or {}).get("app", "")
        node = (pod.get("spec") or {}).get("nodeName", "")
        placed[app, node] += 1
        env = {
            e["name"]: e.get("value", "")
            for c in pod["spec"]["containers"]
            for e in c.get("env") or ()
        }
        if env.get(VERSION_ENV, "") != version:
            wrong.append(meta["name"])
    expected = {(name, node) for name in names for node in nodes}
    missing = expected - set(placed)
    extra = sorted(key for key, n in placed.items() if key not in expected or n > 1)
    if missing or extra or wrong:
        raise RuntimeError(
            f"the pods do not match the rolled-out status: {len(missing)} (DaemonSet, node) "
            f"without a pod, e.g. {sorted(missing)[:3]}; unexpected or doubled {extra[:3]}; "
            f"{len(wrong)} of an old template, e.g. {wrong[:3]}"
        )


def _check(api: Api, ns: str, names: list[str], nodes: set[str], version: str) -> None:
    pods = api.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
    check_pods(pods, names, nodes, version)


def ready_nodes(api: Api) -> set[str]:
    """The names of the cluster's Ready nodes."""
    found: set[str] = set()
    for node in api.request("GET", "/api/v1/nodes")["items"]:
        for cond in (node.get("status") or {}).get("conditions") or ():
            if cond.get("type") == "Ready" and cond.get("status") == "True":
                found.add(node["metadata"]["name"])
    return found


def run_phase(
    api: Api,
    ns: str,
    count: int,
    threads: int,
    timeout: float,
    out: Progress,
    meter: Span | None = None,
) -> dict[str, Any]:
    """Roll out ``count`` DaemonSets in namespace ``ns`` on every node, then update them
    all (module docs); the two times. ``meter`` (``bench.controllers.Meter``) spans both,
    and its figures join the result."""
    nodes = ready_nodes(api)
    api.namespace(ns)
    wait_for_service_account(api, ns, timeout)
    names = [f"daemon-{i:03d}" for i in range(count)]
    path = f"/apis/apps/v1/namespaces/{ns}/daemonsets"
    if meter is not None:
        meter.begin()
    started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda n: api.request("POST", path, daemonset_body(n)), names))
    created = wait_all(api, ns, count, len(nodes), timeout, out)
    out.say(f"  rollout: {created - started:.1f} s; now the rolling update")
    _check(api, ns, names, nodes, "")
    update_started = time.perf_counter()
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(
            pool.map(
                lambda n: api.request(
                    "PATCH", f"{path}/{n}", UPDATE, "application/strategic-merge-patch+json"
                ),
                names,
            )
        )
    patched = time.perf_counter()
    finished = wait_all(api, ns, count, len(nodes), timeout, out)
    measured = meter.end() if meter is not None else {}
    _check(api, ns, names, nodes, "2")
    return measured | {
        "daemonsets": count,
        "nodes": len(nodes),
        "workers": WORKERS,
        "rollout_seconds": round(created - started, 3),
        "update_requests_seconds": round(patched - update_started, 3),
        "rolling_update_seconds": round(finished - update_started, 3),
    }
