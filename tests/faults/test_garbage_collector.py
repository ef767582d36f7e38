"""The garbage collector SIGKILLed, and the informer restarted, in the middle of cascades.

Steward's informer, manager and garbage collector run as processes (``stack.py``)
against a control plane of this module's own whose kube-controller-manager has no
collector. In a namespace of each case, :func:`build` makes owners and dependents (all
ConfigMaps, cheap to make in hundreds) and :func:`cascade` starts their deletions: a
foreground deletion of an owner with many blocking dependents, a background one of
another, an orphaning one of a third, beside bystanders the collector must keep (a
dependent with a second, live owner, whose dangling reference it must drop; an owner
and its dependent left alone). While the first cascade is under way the fault strikes;
then the case waits for the end state and compares it with the same cases' end state
under upstream's collector (the session ``cluster``, no fault): the namespace's objects
with their finalizers and owner references must be the same, so nothing upstream keeps
was deleted and nothing it deletes was kept.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from steward.cluster import LocalCluster
from steward.kube import KubeClient, NotFoundError, load_access
from tests.conftest import local_cluster
from tests.faults.stack import Stack
from tests.polling import wait_for

pytestmark = pytest.mark.integration

DEPENDENTS = 100
"""Blocking dependents of the foreground owner: enough to be mid-way when the fault
strikes (the collector deletes at its client's rate)."""
WITHIN = 180.0

Snapshot = list[tuple[str, tuple[str, ...], tuple[str, ...]]]


@pytest.fixture(scope="module")
def gc_fault_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    """A control plane of this module's own without upstream's collector (no nodes)."""
    yield from local_cluster(
        tmp_path_factory, "gc-faults", nodes=0, controllers="*,-garbagecollector"
    )


@pytest.fixture(scope="module")
def admin(gc_fault_cluster: LocalCluster) -> Iterator[KubeClient]:
    api = KubeClient(load_access(str(gc_fault_cluster.kubeconfig)), user_agent="gc-fault-test")
    try:
        yield api
    finally:
        api.close()


@pytest.fixture(scope="module")
def upstream_admin(cluster: LocalCluster) -> Iterator[KubeClient]:
    api = KubeClient(load_access(str(cluster.kubeconfig)), user_agent="gc-fault-test")
    try:
        yield api
    finally:
        api.close()


@pytest.fixture
def stack(gc_fault_cluster: LocalCluster, tmp_path: Path) -> Iterator[Stack]:
    running = Stack(gc_fault_cluster, tmp_path / "logs")
    try:
        running.start_informer()
        running.start_manager()
        first = running.start_controller("garbagecollector", flags=["--workers=5"])
        running.wait_holder("garbagecollector", first)
        yield running
    finally:
        running.stop()


def namespace(kube: KubeClient) -> str:
    ns = f"gc-fault-{uuid.uuid4().hex[:6]}"
    kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    return ns


def cm_path(ns: str, name: str = "") -> str:
    return f"/api/v1/namespaces/{ns}/configmaps" + (f"/{name}" if name else "")


def make(kube: KubeClient, ns: str, name: str, *owners: dict[str, Any]) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if owners:
        meta["ownerReferences"] = [
            {
                "apiVersion": "v1",
                "kind": "ConfigMap",
                "name": o["metadata"]["name"],
                "uid": o["metadata"]["uid"],
                "blockOwnerDeletion": True,
            }
            for o in owners
        ]
    return kube.request(
        "POST", cm_path(ns), {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}
    )


def build(kube: KubeClient, ns: str) -> None:
    """The owners, dependents and bystanders (see the module docs)."""
    fg = make(kube, ns, "fg-owner")
    for i in range(DEPENDENTS):
        make(kube, ns, f"fg-dep-{i:03d}", fg)
    bg = make(kube, ns, "bg-owner")
    for i in range(20):
        make(kube, ns, f"bg-dep-{i:02d}", bg)
    orphaner = make(kube, ns, "orphan-owner")
    for i in range(5):
        make(kube, ns, f"orphan-dep-{i}", orphaner)
    keeper = make(kube, ns, "keeper")
    make(kube, ns, "two-owners", bg, keeper)
    make(kube, ns, "kept-dep", keeper)


def delete(kube: KubeClient, ns: str, name: str, policy: str) -> None:
    kube.request(
        "DELETE",
        cm_path(ns, name),
        {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": policy},
    )


def cascade(kube: KubeClient, ns: str) -> None:
    delete(kube, ns, "fg-owner", "Foreground")
    delete(kube, ns, "bg-owner", "Background")
    delete(kube, ns, "orphan-owner", "Orphan")


def snapshot(kube: KubeClient, ns: str) -> Snapshot:
    found: Snapshot = []
    for obj in kube.request("GET", cm_path(ns)).get("items") or ():
        meta = obj["metadata"]
        if meta["name"] == "kube-root-ca.crt":
            continue
        owners = tuple(r["name"] for r in meta.get("ownerReferences") or ())
        found.append((meta["name"], tuple(meta.get("finalizers") or ()), owners))
    return sorted(found)


def settled(kube: KubeClient, ns: str) -> Snapshot | None:
    """The end state once every cascade is done: no finalizer left, no reference to a
    deleted owner."""
    snap = snapshot(kube, ns)
    names = {name for name, _, _ in snap}
    if any(f for _, f, _ in snap) or any(o not in names for _, _, owners in snap for o in owners):
        return None
    return snap


def remaining(kube: KubeClient, ns: str) -> int:
    return sum(1 for name, _, _ in snapshot(kube, ns) if name.startswith("fg-dep-"))


def drop(kube: KubeClient, ns: str) -> None:
    with contextlib.suppress(NotFoundError):
        kube.request("DELETE", f"/api/v1/namespaces/{ns}")


@pytest.fixture(scope="module")
def expected(upstream_admin: KubeClient) -> Snapshot:
    """The end state of the same cases under upstream's collector, no fault."""
    ns = namespace(upstream_admin)
    try:
        build(upstream_admin, ns)
        cascade(upstream_admin, ns)
        end: Snapshot = wait_for(
            lambda: settled(upstream_admin, ns), "upstream's end state", WITHIN
        )
        return end
    finally:
        drop(upstream_admin, ns)


def mid_cascade(kube: KubeClient, ns: str) -> None:
    """Wait until the foreground cascade is under way and not done."""
    wait_for(
        lambda: remaining(kube, ns) < DEPENDENTS - 10,
        "the foreground cascade under way",
        WITHIN,
    )
    assert remaining(kube, ns) > 0, "the cascade ended before the fault could strike"


def test_collector_sigkill_mid_cascade(stack: Stack, admin: KubeClient, expected: Snapshot) -> None:
    ns = namespace(admin)
    try:
        build(admin, ns)
        cascade(admin, ns)
        mid_cascade(admin, ns)
        stack.active("garbagecollector").kill()
        killed = time.monotonic()
        successor = stack.start_controller("garbagecollector", flags=["--workers=5"])
        stack.wait_holder("garbagecollector", successor)
        end = wait_for(lambda: settled(admin, ns), "the end state after the SIGKILL", WITHIN)
        assert end == expected
        exited = stack.exited()
        assert [e.split(":", 1)[0] for e in exited] == ["garbagecollector-0"], exited
        print(f"collector SIGKILL mid-cascade: settled {time.monotonic() - killed:.1f}s later")
    finally:
        drop(admin, ns)


def test_informer_restart_mid_cascade(stack: Stack, admin: KubeClient, expected: Snapshot) -> None:
    ns = namespace(admin)
    try:
        build(admin, ns)
        cascade(admin, ns)
        mid_cascade(admin, ns)
        assert stack.informer is not None
        stack.informer.kill()
        killed = time.monotonic()
        time.sleep(1.0)
        stack.informer.start()
        stack.wait_serving(stack.informer, stack.informer_address)
        end = wait_for(lambda: settled(admin, ns), "the end state after the restart", WITHIN)
        assert end == expected
        # The collector kept running through the informer's restart.
        assert not stack.exited(), stack.exited()
        print(f"informer restart mid-cascade: settled {time.monotonic() - killed:.1f}s later")
    finally:
        drop(admin, ns)
