"""The StatefulSet workload of ``make bench`` (:mod:`bench.controllers`): one StatefulSet of
R replicas on kwok nodes to all Ready, then a change of its pod template rolled out.

# The cluster
The workload runs in a cluster of its own per side (:func:`nodes_for` kwok nodes). Upstream's
side runs every one of kube-controller-manager's controllers. Steward's runs Steward's
informer, manager and StatefulSet controller (the registry's ``statefulset``) and no other
of Steward's controllers, kube-controller-manager all the others. Both sides run
:data:`WORKERS` workers (kube-controller-manager's ``--concurrent-statefulset-syncs``
default). kube-scheduler binds the pods on both sides and
kwok makes each Ready as soon as it is bound.

# What is measured
The StatefulSet has the defaults that make it a StatefulSet: ``podManagementPolicy``
``OrderedReady`` (pod *i* is created only once pods 0 to *i*-1 are Ready) and the
``RollingUpdate`` strategy without a partition (pods replaced one at a time from the highest
ordinal down, each waited for to be Ready). Two spans, each polled every 0.25 s:

* **ready**: from the create request to the first poll at which the StatefulSet is
  :func:`rolled_out` (``observedGeneration`` current; ``replicas``, ``readyReplicas``,
  ``availableReplicas``, ``updatedReplicas`` and ``currentReplicas`` all R, and
  ``currentRevision`` equal to ``updateRevision``);
* **rollout**: from the patch of the pod template (a new environment variable) to the
  first poll at which it is rolled out again, at the new revision.

After each, outside the spans, the pods themselves are checked (:func:`check_pods`): pods
``<name>-0`` to ``<name>-<R-1>``, no other, each Ready and of the current revision and
template. A status that says done while the pods do not is an error.

# When it cannot finish
A span that times out says how far the status got.
"""

from __future__ import annotations

import time
from typing import Any

from bench.endpoints import wait_for_service_account
from bench.informer import Api
from bench.job import Span
from steward.cluster.progress import Progress

CONTROLLER = "statefulset"
"""The registry name of the controller the workload measures (kube-controller-manager's too)."""

IDENTITIES = {
    False: "system:serviceaccount:kube-system:statefulset-controller",
    True: f"steward:controller:{CONTROLLER}",
}
"""The StatefulSet controller's identity on each side (Steward's side: True)."""

WORKERS = 5
"""StatefulSet workers on both sides: kube-controller-manager's
``--concurrent-statefulset-syncs`` default (5)."""

PODS_PER_NODE = 200
"""Pods the workload puts on a kwok node at most (kwok's nodes take 250)."""

NAME = "web"
VERSION_ENV = "V"
"""The environment variable the template change sets (``"2"``)."""

STATUS_COUNTS = (
    "replicas",
    "readyReplicas",
    "availableReplicas",
    "updatedReplicas",
    "currentReplicas",
)
"""The status counts that must all equal the replicas."""

UPDATE = {
    "spec": {
        "template": {
            "spec": {"containers": [{"name": "main", "env": [{"name": VERSION_ENV, "value": "2"}]}]}
        }
    }
}
"""The strategic merge patch of the template change."""


def nodes_for(replicas: int) -> int:
    """kwok nodes for ``replicas`` pods: at most :data:`PODS_PER_NODE` each, at least 2."""
    return max(2, -(-replicas // PODS_PER_NODE))


def statefulset_body(name: str, replicas: int) -> dict[str, Any]:
    """A StatefulSet of ``replicas`` one-container pods, every policy at its default."""
    return {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": name},
        "spec": {
            "replicas": replicas,
            "serviceName": name,
            "selector": {"matchLabels": {"app": name}},
            "template": {
                "metadata": {"labels": {"app": name}},
                "spec": {"containers": [{"name": "main", "image": "busybox:1"}]},
            },
        },
    }


def rolled_out(sts: dict[str, Any]) -> bool:
    """Whether a StatefulSet's status shows every replica Ready at the current revision
    and generation (module docs)."""
    st = sts.get("status") or {}
    replicas = sts["spec"]["replicas"]
    return bool(
        st.get("observedGeneration", 0) >= sts["metadata"]["generation"]
        and all(st.get(count, 0) == replicas for count in STATUS_COUNTS)
        and st.get("updateRevision")
        and st.get("currentRevision") == st.get("updateRevision")
    )


def describe(sts: dict[str, Any]) -> str:
    """How far a StatefulSet is: its status counts and revisions."""
    st = sts.get("status") or {}
    counts = ", ".join(f"{c} {st.get(c, 0)}" for c in STATUS_COUNTS)
    return (
        f"{counts} of {sts['spec']['replicas']}; revision {st.get('currentRevision', '-')} → "
        f"{st.get('updateRevision', '-')}"
    )


def wait_rolled_out(api: Api, ns: str, name: str, timeout: float, out: Progress) -> float:
    """Poll until the StatefulSet is rolled out; returns when (perf_counter).

    Raises:
        RuntimeError: it was not within ``timeout`` seconds (the message says how far).
    """
    deadline = time.monotonic() + timeout
    while True:
        sts = api.request("GET", f"/apis/apps/v1/namespaces/{ns}/statefulsets/{name}")
        now = time.perf_counter()
        if rolled_out(sts):
            return now
        if time.monotonic() > deadline:
            raise RuntimeError(f"{ns}/{name}: not rolled out in {timeout:.0f} s: {describe(sts)}")
        out.tick(f"  {describe(sts)}")
        time.sleep(0.25)


def _ready(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or ()
    )


def check_pods(
    pods: list[dict[str, Any]], name: str, replicas: int, revision: str, version: str
) -> None:
    """Pods ``<name>-0`` to ``<name>-<replicas-1>`` and no other live pod, each Ready, of
    the controller revision ``revision`` and the template ``version`` (the value of
    :data:`VERSION_ENV`, ``""`` for none); pods being deleted are ignored.

    Raises:
        RuntimeError: naming what is wrong.
    """
    live = {p["metadata"]["name"]: p for p in pods if not p["metadata"].get("deletionTimestamp")}
    wanted = {f"{name}-{i}" for i in range(replicas)}
    missing, extra = sorted(wanted - live.keys()), sorted(live.keys() - wanted)
    wrong: list[str] = []
    for pod_name in sorted(wanted & live.keys()):
        pod = live[pod_name]
        labels = pod["metadata"].get("labels") or {}
        env = {
            e["name"]: e.get("value", "")
            for c in pod["spec"]["containers"]
            for e in c.get("env") or ()
        }
        if (
            not _ready(pod)
            or labels.get("controller-revision-hash") != revision
            or env.get(VERSION_ENV, "") != version
        ):
            wrong.append(pod_name)
    if missing or extra or wrong:
        raise RuntimeError(
            f"the pods do not match the rolled-out status: missing {missing[:3]} "
            f"({len(missing)}), unexpected {extra[:3]} ({len(extra)}), not Ready or of "
            f"another revision {wrong[:3]} ({len(wrong)})"
        )


def _check(api: Api, ns: str, name: str, replicas: int, version: str) -> str:
    """:func:`check_pods` against the StatefulSet's ``updateRevision``; returns it."""
    sts = api.request("GET", f"/apis/apps/v1/namespaces/{ns}/statefulsets/{name}")
    revision = str(sts["status"]["updateRevision"])
    pods = api.request("GET", f"/api/v1/namespaces/{ns}/pods")["items"]
    check_pods(pods, name, replicas, revision, version)
    return revision


def run_phase(
    api: Api,
    ns: str,
    replicas: int,
    timeout: float,
    out: Progress,
    meter: Span | None = None,
) -> dict[str, Any]:
    """Create the StatefulSet of ``replicas`` in namespace ``ns``, wait for it, change its
    template and wait again (module docs); the two times. ``meter``
    (``bench.controllers.Meter``) spans both, and its figures join the result."""
    api.namespace(ns)
    wait_for_service_account(api, ns, timeout)
    path = f"/apis/apps/v1/namespaces/{ns}/statefulsets"
    if meter is not None:
        meter.begin()
    started = time.perf_counter()
    api.request("POST", path, statefulset_body(NAME, replicas))
    ready = wait_rolled_out(api, ns, NAME, timeout, out)
    out.say(f"  all {replicas} Ready: {ready - started:.1f} s; now the template change")
    first = _check(api, ns, NAME, replicas, "")
    update_started = time.perf_counter()
    api.request("PATCH", f"{path}/{NAME}", UPDATE, "application/strategic-merge-patch+json")
    finished = wait_rolled_out(api, ns, NAME, timeout, out)
    measured = meter.end() if meter is not None else {}
    second = _check(api, ns, NAME, replicas, "2")
    if second == first:
        raise RuntimeError(f"{ns}/{NAME}: the template change made no new revision ({first})")
    return measured | {
        "replicas": replicas,
        "workers": WORKERS,
        "ready_seconds": round(ready - started, 3),
        "rollout_seconds": round(finished - update_started, 3),
    }
