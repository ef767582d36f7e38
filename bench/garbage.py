"""The garbage collection workloads of ``make bench`` (:mod:`bench.controllers`): cascading
deletion of Deployments in the background and in the foreground, deletion of namespaces
full of objects, and the garbage collector's memory with many objects of many types.

# The cluster
Each side gets a cluster of its own for the deletions (:func:`nodes_for` kwok nodes, enough
for every pod at :data:`PODS_PER_NODE` a node of their 250) and another for the memory:
upstream's side runs kube-controller-manager with every controller on; Steward's runs it
without the controllers Steward runs itself (its registry: the garbage collector and the
namespace controller among them), and Steward's informer, manager and controllers as
``make up`` runs them. The same client rate limits on both sides (the setting), 20
garbage collector workers (upstream's ``--concurrent-gc-syncs`` and Steward's default) and
10 namespace workers (``--concurrent-namespace-syncs``, Steward's default).

# Deletion
:func:`deletion_phase` creates N Deployments of R replicas in a fresh namespace and waits
until every one is rolled out (not timed). Then it deletes them all (a few threads, one
DELETE each, with ``propagationPolicy`` Background or Foreground) and polls, every
:data:`POLL_SECONDS`, how many Deployments, ReplicaSets and pods the namespace still
holds (a list with ``limit=1``: its items and ``remainingItemCount``, so that the poll does
not weigh on kube-apiserver as a full list of 2,000 pods would). The time to gone runs
from the first DELETE to the first poll that finds none left: of the ReplicaSets and
pods with Background (the Deployments are gone at once; the collector deletes the
ReplicaSets, whose owners are gone, then their pods), of the Deployments with Foreground
(the API server keeps each until the collector has deleted its ReplicaSets, and each of
those until its pods are gone, then removes the ``foregroundDeletion`` finalizers). A pod
the collector deletes keeps its 30 s grace period; kwok, which plays its kubelet, deletes
it at once.

:func:`namespace_phase` creates M namespaces of K objects each: D Deployments of one
replica (each 3 objects: the Deployment, its ReplicaSet, its pod; pods with
``terminationGracePeriodSeconds`` 0, below) and the rest ConfigMaps and Secrets, half each
(the namespace's own ``default`` ServiceAccount and ``kube-root-ca.crt`` ConfigMap come on
top); waits until every Deployment is rolled out (not timed); deletes every namespace and
polls until none is left. With the pods' default grace period of 30 s, both namespace
controllers would find pods still terminating and look again only 16 s later (upstream's
``estimate / 2 + 1``): the span would be that wait. With 0 the API server deletes each pod
at once, and the span is the controllers' work.

# Memory
:func:`memory_phase` fills a cluster with N objects of :data:`MEMORY_TYPES` types, the
same count of each, spread over :data:`MEMORY_NAMESPACES` namespaces: ConfigMaps,
Secrets, ServiceAccounts and the custom resources of :data:`CUSTOM_TYPES` custom resource
definitions (no schema beyond ``x-kubernetes-preserve-unknown-fields``); every object's
body is a small label and one short value, no object has an owner. When is a collector
synced? Each side is shown the same signal: in each of the 20 types one *sentinel*
object whose only owner reference names a ConfigMap that does not exist
(:func:`sentinel_body`); a collector deletes it once it watches that type and has
processed it, so when every sentinel is gone the collector's graph holds every type. A
round of sentinels before the objects (the baseline: every type watched, nothing in it)
and one after them; after the second, :data:`SETTLE_SECONDS` seconds to settle and then
:data:`RSS_SAMPLES` readings of each process's resident memory (``VmRSS`` in
``/proc/<pid>/status``) one second apart, the last kept.
"""

from __future__ import annotations

import concurrent.futures
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from bench.deployment import deployment_body, rolled_out
from bench.informer import Api
from bench.job import Span
from steward.cluster.progress import Progress

CONTROLLERS = ("garbagecollector", "namespace")
"""The controllers under test (kube-controller-manager's ``--controllers`` names and
Steward's registry names)."""

IDENTITIES = {
    False: {
        "garbagecollector": "system:serviceaccount:kube-system:generic-garbage-collector",
        "namespace": "system:serviceaccount:kube-system:namespace-controller",
    },
    True: {
        "garbagecollector": "steward:controller:garbagecollector",
        "namespace": "steward:controller:namespace",
    },
}
"""Each controller's identity on each side (Steward's side: True); upstream's are its
service accounts, kube-controller-manager running with
``--use-service-account-credentials``."""

POLICIES = ("Background", "Foreground")
"""The propagation policies of the deletion phases, in the order they run."""

PODS_PER_NODE = 200
"""Pods per kwok node (of 250 each) that :func:`nodes_for` plans for."""

POLL_SECONDS = 0.25
"""How often a phase looks whether what it deleted is gone."""

GROUP = "gcbench.steward.io"
"""The API group of the memory phase's custom resources."""

CUSTOM_TYPES = 17
"""Custom resource definitions of the memory phase."""

MEMORY_NAMESPACES = 10
"""Namespaces the memory phase's objects are spread over."""

SETTLE_SECONDS = 10.0
"""Seconds between the last sentinel gone and the first reading of resident memory."""

RSS_SAMPLES = 5
"""Readings of resident memory, one second apart; the last is kept (all are reported)."""


def nodes_for(pods: int) -> int:
    """kwok nodes for ``pods`` pods: at most :data:`PODS_PER_NODE` each, and at least 2."""
    return max(2, -(-pods // PODS_PER_NODE))


def split_objects(objects: int, deployments: int) -> dict[str, int]:
    """A namespace's ``objects`` objects: ``deployments`` Deployments of one replica (3
    objects each, with the ReplicaSet and the pod) and the rest ConfigMaps and Secrets,
    half each (the odd one a ConfigMap).

    Raises:
        ValueError: the Deployments alone come to more than ``objects``.
    """
    rest = objects - 3 * deployments
    if deployments < 0 or rest < 0:
        raise ValueError(
            f"{deployments} Deployments are {3 * deployments} objects, more than {objects}"
        )
    return {"deployments": deployments, "configmaps": rest - rest // 2, "secrets": rest // 2}


def remaining(list_reply: dict[str, Any]) -> int:
    """How many objects a list asked with ``limit=1`` (and no selector) stands for: its
    items and the ``remainingItemCount`` the API server gives with a continue token."""
    meta = list_reply.get("metadata") or {}
    return len(list_reply.get("items") or ()) + int(meta.get("remainingItemCount") or 0)


def _count(api: Api, path: str) -> int:
    return remaining(api.request("GET", f"{path}?limit=1"))


def _parallel(threads: int, work: Callable[[Any], Any], items: list[Any]) -> None:
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(work, items))


def _wait_rolled_out(
    api: Api,
    path: str,
    count: int,
    replicas: int,
    timeout: float,
    out: Progress,
    namespace_prefix: str = "",
) -> None:
    """Until the ``count`` Deployments listed at ``path`` (those of namespaces whose name
    starts with ``namespace_prefix``) are rolled out (not timed)."""
    deadline = time.monotonic() + timeout
    while True:
        items = [
            d
            for d in api.request("GET", path)["items"]
            if d["metadata"]["namespace"].startswith(namespace_prefix)
        ]
        done = sum(1 for d in items if rolled_out(d, replicas))
        if done == count and len(items) == count:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{path}: only {done} of {count} Deployments rolled out")
        out.tick(f"  {done}/{count} Deployments rolled out")
        time.sleep(1.0)


def deletion_phase(
    api: Api,
    ns: str,
    count: int,
    replicas: int,
    policy: str,
    threads: int,
    timeout: float,
    out: Progress,
    meter: Span,
) -> dict[str, Any]:
    """``count`` Deployments of ``replicas`` rolled out in namespace ``ns``, then all
    deleted with ``policy`` and timed until gone (module docs); ``meter`` spans the
    deletion."""
    api.namespace(ns)
    names = [f"web-{i:04d}" for i in range(count)]
    base = f"/apis/apps/v1/namespaces/{ns}/deployments"
    started = time.perf_counter()
    _parallel(threads, lambda n: api.request("POST", base, deployment_body(n, replicas)), names)
    _wait_rolled_out(api, base, count, replicas, timeout, out)
    out.say(
        f"  {count} x {replicas} rolled out in {time.perf_counter() - started:.1f} s; "
        f"deleting them ({policy})"
    )
    paths = {
        "deployments": base,
        "replicasets": f"/apis/apps/v1/namespaces/{ns}/replicasets",
        "pods": f"/api/v1/namespaces/{ns}/pods",
    }
    meter.begin()
    started = time.perf_counter()
    body = {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": policy}
    _parallel(threads, lambda n: api.request("DELETE", f"{base}/{n}", body), names)
    deleted = time.perf_counter()
    gone: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    while len(gone) < len(paths):
        left = {kind: _count(api, path) for kind, path in paths.items() if kind not in gone}
        now = time.perf_counter()
        for kind, n in left.items():
            if n == 0:
                gone[kind] = now
        if time.monotonic() > deadline:
            raise RuntimeError(f"{ns}: not gone in {timeout:.0f} s: {left}")
        out.tick("  left: " + ", ".join(f"{n} {k}" for k, n in left.items()))
        if len(gone) < len(paths):
            time.sleep(POLL_SECONDS)
    measured = meter.end()
    last = max(gone["replicasets"], gone["pods"]) if policy == "Background" else gone["deployments"]
    return measured | {
        "deployments": count,
        "replicas": replicas,
        "policy": policy,
        "seconds": round(last - started, 3),
        "delete_requests_seconds": round(deleted - started, 3),
        "gone_seconds": {k: round(t - started, 3) for k, t in sorted(gone.items())},
    }


def _pod_template(name: str) -> dict[str, Any]:
    body = deployment_body(name, 1)
    body["spec"]["template"]["spec"]["terminationGracePeriodSeconds"] = 0
    return body


def namespace_requests(
    names: list[str], split: dict[str, int]
) -> Iterator[tuple[str, dict[str, Any]]]:
    """The POSTs that fill the namespaces ``names`` as ``split`` says (:func:`split_objects`)."""
    for ns in names:
        for i in range(split["configmaps"]):
            yield (
                f"/api/v1/namespaces/{ns}/configmaps",
                {"metadata": {"name": f"cm-{i:04d}"}, "data": {"k": "v"}},
            )
        for i in range(split["secrets"]):
            yield (
                f"/api/v1/namespaces/{ns}/secrets",
                {"metadata": {"name": f"secret-{i:04d}"}, "stringData": {"k": "v"}},
            )
        for i in range(split["deployments"]):
            yield f"/apis/apps/v1/namespaces/{ns}/deployments", _pod_template(f"web-{i:02d}")


def namespace_phase(
    api: Api,
    prefix: str,
    namespaces: int,
    objects: int,
    deployments: int,
    threads: int,
    timeout: float,
    out: Progress,
    meter: Span,
) -> dict[str, Any]:
    """``namespaces`` namespaces of ``objects`` objects each, then all deleted and timed
    until gone (module docs); ``meter`` spans the deletion."""
    split = split_objects(objects, deployments)
    label = f"{prefix}=1"
    names = [f"{prefix}-{i:03d}" for i in range(namespaces)]
    _parallel(
        threads,
        lambda n: api.request(
            "POST", "/api/v1/namespaces", {"metadata": {"name": n, "labels": {prefix: "1"}}}
        ),
        names,
    )
    total = namespaces * (split["configmaps"] + split["secrets"] + split["deployments"])
    took = api.create_all(namespace_requests(names, split), threads=threads, out=out, total=total)
    _wait_rolled_out(
        api, "/apis/apps/v1/deployments", namespaces * deployments, 1, timeout, out, f"{prefix}-"
    )
    out.say(
        f"  {namespaces} namespaces of {objects} objects ({split}) in {took:.1f} s and rolled "
        "out; deleting the namespaces"
    )
    meter.begin()
    started = time.perf_counter()
    _parallel(threads, lambda n: api.request("DELETE", f"/api/v1/namespaces/{n}"), names)
    deleted = time.perf_counter()
    gone: dict[str, float] = {}
    deadline = time.monotonic() + timeout
    while len(gone) < namespaces:
        items = api.request("GET", f"/api/v1/namespaces?labelSelector={label}")["items"]
        now = time.perf_counter()
        present = {ns["metadata"]["name"] for ns in items}
        for name in names:
            if name not in present and name not in gone:
                gone[name] = now
        if time.monotonic() > deadline:
            raise RuntimeError(
                f"{len(present)} of {namespaces} namespaces not gone in {timeout:.0f} s"
            )
        out.tick(f"  {len(present)}/{namespaces} namespaces left")
        if len(gone) < namespaces:
            time.sleep(POLL_SECONDS)
    measured = meter.end()
    times = sorted(t - started for t in gone.values())
    return measured | {
        "namespaces": namespaces,
        "objects_per_namespace": objects,
        "split": split,
        "seconds": round(times[-1], 3),
        "first_gone_seconds": round(times[0], 3),
        "median_gone_seconds": round(times[len(times) // 2], 3),
        "delete_requests_seconds": round(deleted - started, 3),
    }


# ----------------------------------------------------------------------------- memory


def custom_kinds() -> list[str]:
    """The memory phase's custom kinds: ``Thing00``, ``Thing01``, ..."""
    return [f"Thing{i:02d}" for i in range(CUSTOM_TYPES)]


def crd_body(kind: str) -> dict[str, Any]:
    """A namespaced custom resource definition of ``kind`` in :data:`GROUP`, any content."""
    plural = kind.lower() + "s"
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"{plural}.{GROUP}"},
        "spec": {
            "group": GROUP,
            "scope": "Namespaced",
            "names": {"kind": kind, "plural": plural, "singular": kind.lower()},
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


MEMORY_TYPES: tuple[tuple[str, str, str], ...] = (
    ("/api/v1", "configmaps", "ConfigMap"),
    ("/api/v1", "secrets", "Secret"),
    ("/api/v1", "serviceaccounts", "ServiceAccount"),
    *((f"/apis/{GROUP}/v1", kind.lower() + "s", kind) for kind in custom_kinds()),
)
"""The memory phase's types: (API path prefix, resource, kind)."""


def object_body(prefix: str, kind: str, name: str) -> dict[str, Any]:
    """One small object of a memory type: a label and one short value."""
    body: dict[str, Any] = {
        "apiVersion": prefix.removeprefix("/apis/").removeprefix("/api/"),
        "kind": kind,
        "metadata": {"name": name, "labels": {"bench": "gc"}},
    }
    if kind == "ConfigMap":
        body["data"] = {"k": "v"}
    elif kind == "Secret":
        body["stringData"] = {"k": "v"}
    elif kind != "ServiceAccount":
        body["spec"] = {"k": "v"}
    return body


def sentinel_body(prefix: str, kind: str, name: str) -> dict[str, Any]:
    """An object whose only owner is a ConfigMap that does not exist: a synced garbage
    collector deletes it (module docs)."""
    body = object_body(prefix, kind, name)
    body["metadata"]["ownerReferences"] = [
        {"apiVersion": "v1", "kind": "ConfigMap", "name": "absent", "uid": str(uuid.uuid4())}
    ]
    return body


def memory_requests(objects: int) -> Iterator[tuple[str, dict[str, Any]]]:
    """The POSTs of ``objects`` objects, as many of each type (round down), spread over the
    namespaces, the types interleaved."""
    per_type = objects // len(MEMORY_TYPES)
    for i in range(per_type):
        ns = f"bench-gc-memory-{i % MEMORY_NAMESPACES}"
        for prefix, resource, kind in MEMORY_TYPES:
            yield (
                f"{prefix}/namespaces/{ns}/{resource}",
                object_body(prefix, kind, f"o-{i:06d}"),
            )


def sentinels(api: Api, round_name: str, timeout: float, out: Progress) -> float:
    """Create a sentinel of every type and wait until every one is gone; the seconds."""
    ns = "bench-gc-memory-0"
    started = time.perf_counter()
    made = []
    for prefix, resource, kind in MEMORY_TYPES:
        name = f"sentinel-{round_name}"
        api.request(
            "POST", f"{prefix}/namespaces/{ns}/{resource}", sentinel_body(prefix, kind, name)
        )
        made.append(f"{prefix}/namespaces/{ns}/{resource}/{name}")
    deadline = time.monotonic() + timeout
    while True:
        left = [p for p in made if exists(api, p)]
        if not left:
            return time.perf_counter() - started
        if time.monotonic() > deadline:
            raise RuntimeError(f"sentinels not collected in {timeout:.0f} s: {left}")
        out.tick(f"  {len(left)}/{len(made)} sentinels left")
        made = left
        time.sleep(1.0)


def exists(api: Api, path: str) -> bool:
    """Whether the object at ``path`` exists (a GET answers it, or 404)."""
    try:
        api.request("GET", path)
    except RuntimeError as err:
        if " 404 " in str(err):
            return False
        raise
    return True


def rss_bytes(pids: dict[str, int]) -> dict[str, int]:
    """Resident memory of each process now (``VmRSS``), by name."""
    found: dict[str, int] = {}
    for name, pid in pids.items():
        try:
            status = Path(f"/proc/{pid}/status").read_text()
        except OSError:
            continue
        for line in status.splitlines():
            if line.startswith("VmRSS:"):
                found[name] = int(line.split()[1]) * 1024
    return found


def _samples(pids: dict[str, int]) -> list[dict[str, int]]:
    taken = []
    for i in range(RSS_SAMPLES):
        if i:
            time.sleep(1.0)
        taken.append(rss_bytes(pids))
    return taken


def memory_phase(
    api: Api,
    pids: dict[str, int],
    objects: int,
    threads: int,
    timeout: float,
    out: Progress,
) -> dict[str, Any]:
    """Fill the cluster with ``objects`` objects of :data:`MEMORY_TYPES`; resident memory of
    the processes ``pids`` (name → pid) once the collector holds none of them and once it
    holds all (module docs)."""
    for i in range(MEMORY_NAMESPACES):
        api.namespace(f"bench-gc-memory-{i}")
    for kind in custom_kinds():
        api.request(
            "POST", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions", crd_body(kind)
        )
    _wait_established(api, timeout, out)
    first = sentinels(api, "before", timeout, out)
    out.say(f"  every type collected in {first:.1f} s; resident memory before the objects")
    time.sleep(SETTLE_SECONDS)
    before = _samples(pids)
    per_type = objects // len(MEMORY_TYPES)
    total = per_type * len(MEMORY_TYPES)
    took = api.create_all(memory_requests(objects), threads=threads, out=out, total=total)
    out.say(f"  {total:,} objects created in {took:.1f} s; waiting for the sentinels")
    second = sentinels(api, "after", timeout, out)
    time.sleep(SETTLE_SECONDS)
    after = _samples(pids)
    return {
        "objects": total,
        "types": len(MEMORY_TYPES),
        "per_type": per_type,
        "create_seconds": round(took, 3),
        "sentinels_before_seconds": round(first, 3),
        "sentinels_after_seconds": round(second, 3),
        "rss_before": before[-1],
        "rss_after": after[-1],
        "rss_after_samples": after,
        "rss_growth_per_object": {
            n: round((after[-1][n] - before[-1].get(n, 0)) / max(total, 1), 1) for n in after[-1]
        },
    }


def _wait_established(api: Api, timeout: float, out: Progress) -> None:
    deadline = time.monotonic() + timeout
    want = {f"{k.lower()}s.{GROUP}" for k in custom_kinds()}
    while True:
        items = api.request("GET", "/apis/apiextensions.k8s.io/v1/customresourcedefinitions")[
            "items"
        ]
        ready = {
            c["metadata"]["name"]
            for c in items
            if any(
                x.get("type") == "Established" and x.get("status") == "True"
                for x in (c.get("status") or {}).get("conditions") or ()
            )
        }
        if want <= ready:
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"custom resource definitions not established: {want - ready}")
        out.tick(f"  {len(want & ready)}/{len(want)} custom resource definitions established")
        time.sleep(0.5)
