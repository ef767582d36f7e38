"""The ownership graph's decisions, without an API server: which nodes a change queues;
and the collector's client limits.

Each test names the breakage it catches in upstream's terms (GraphBuilder's
processGraphChanges, addDependentToOwners, processTransitions)."""

from __future__ import annotations

import argparse

import pytest

from steward import CONFIGMAPS, DEPLOYMENTS, NAMESPACES, REPLICASETS
from steward.controllers.garbagecollector.controller import CONTROLLER
from steward.controllers.garbagecollector.graph import (
    FOREGROUND,
    ORPHAN,
    AbsentOwners,
    Graph,
    Identity,
    Work,
)
from steward.flowcontrol import add_rate_limit_arguments, bucket_from_args
from steward.runtime.meta import Meta, OwnerRef

pytestmark = pytest.mark.unit

NOW = "2026-12-06T00:00:00Z"


def ref(kind: str, name: str, uid: str, *, api: str = "apps/v1", block: bool = False) -> OwnerRef:
    return OwnerRef(api, kind, name, uid, True, block)


def meta(
    name: str,
    uid: str,
    *owners: OwnerRef,
    ns: str = "ns",
    deleting: bool = False,
    finalizers: tuple[str, ...] = (),
) -> Meta:
    return Meta(
        ns,
        name,
        uid,
        "1",
        owner_references=owners,
        deletion_timestamp=NOW if deleting else None,
        finalizers=finalizers,
    )


def deletes(work: list[Work]) -> set[str]:
    return {w.uid for w in work if w.action == "delete"}


def test_an_owner_not_observed_yet_is_virtual_and_checked() -> None:
    """Breakage caught: a dependent whose owner never existed kept forever (the virtual
    owner is never verified)."""
    g = Graph()
    work = g.upsert(REPLICASETS, meta("rs", "rs-1", ref("Deployment", "d", "d-1")), None)
    assert deletes(work) == {"d-1"}
    owner = g.get("d-1")
    assert owner is not None and not owner.observed
    assert owner.identity == Identity("apps/v1", "Deployment", "ns", "d", "d-1")
    assert {n.identity.uid for n in owner.dependents} == {"rs-1"}


def test_observing_the_owner_keeps_its_dependents() -> None:
    """Breakage caught: the observed owner replaces the virtual node and loses its
    dependents (a later foreground deletion finds none and finalizes at once)."""
    g = Graph()
    g.upsert(REPLICASETS, meta("rs", "rs-1", ref("Deployment", "d", "d-1", block=True)), None)
    work = g.upsert(DEPLOYMENTS, meta("d", "d-1"), None)
    assert work == []
    owner = g.get("d-1")
    assert owner is not None and owner.observed
    assert [n.identity.uid for n in owner.blocking_dependents()] == ["rs-1"]


def test_foreground_deletion_marks_the_owner_and_queues_the_dependents() -> None:
    """Breakage caught: a foreground deletion that never starts (the finalizer stays)."""
    g = Graph()
    g.upsert(DEPLOYMENTS, meta("d", "d-1"), None)
    g.upsert(REPLICASETS, meta("rs", "rs-1", ref("Deployment", "d", "d-1", block=True)), None)
    old = meta("d", "d-1")
    work = g.upsert(DEPLOYMENTS, meta("d", "d-1", deleting=True, finalizers=(FOREGROUND,)), old)
    assert deletes(work) == {"d-1", "rs-1"}
    node = g.get("d-1")
    assert node is not None and node.deleting_dependents and node.being_deleted


def test_an_orphaning_deletion_queues_the_owner_for_orphaning() -> None:
    """Breakage caught: the orphan finalizer never acted on."""
    g = Graph()
    g.upsert(DEPLOYMENTS, meta("d", "d-1"), None)
    work = g.upsert(DEPLOYMENTS, meta("d", "d-1", deleting=True, finalizers=(ORPHAN,)), None)
    assert work == [Work("orphan", "d-1")]


def test_an_unchanged_deletion_does_not_start_again() -> None:
    """Breakage caught: every update of an owner being deleted (a relist) restarting the
    orphaning or the foreground pass."""
    g = Graph()
    deleting = meta("d", "d-1", deleting=True, finalizers=(ORPHAN,))
    g.upsert(DEPLOYMENTS, deleting, None)
    assert g.upsert(DEPLOYMENTS, deleting, deleting) == []


def test_deleting_an_owner_queues_its_dependents_and_waiting_owners() -> None:
    """Breakage caught: dependents of a deleted owner never looked at (no background
    cascade); an owner waiting for its dependents never told the last one went."""
    g = Graph()
    g.upsert(DEPLOYMENTS, meta("d", "d-1", deleting=True, finalizers=(FOREGROUND,)), None)
    g.upsert(REPLICASETS, meta("rs", "rs-1", ref("Deployment", "d", "d-1", block=True)), None)
    g.upsert(CONFIGMAPS, meta("c", "c-1", ref("ReplicaSet", "rs", "rs-1")), None)
    work = g.delete(meta("rs", "rs-1"))
    assert deletes(work) == {"c-1", "d-1"}
    assert g.get("rs-1") is None
    owner = g.get("d-1")
    assert owner is not None and not owner.dependents


def test_a_removed_blocking_reference_unblocks_the_waiting_owner() -> None:
    """Breakage caught: an owner in foreground deletion waiting forever after a dependent
    dropped its blocking reference (upstream's addUnblockedOwnersToDeleteQueue)."""
    g = Graph()
    g.upsert(DEPLOYMENTS, meta("d", "d-1", deleting=True, finalizers=(FOREGROUND,)), None)
    before = meta("rs", "rs-1", ref("Deployment", "d", "d-1", block=True))
    g.upsert(REPLICASETS, before, None)
    work = g.upsert(REPLICASETS, meta("rs", "rs-1"), before)
    assert deletes(work) == {"d-1"}
    owner = g.get("d-1")
    assert owner is not None and not owner.dependents


def test_an_observed_owner_of_another_namespace_is_reported_and_checked() -> None:
    """Breakage caught: no OwnerRefInvalidNamespace Event, or the dependent never
    checked (its reference to another namespace's owner counted as solid)."""
    g = Graph()
    g.upsert(CONFIGMAPS, meta("owner", "o-1", ns="other"), None)
    work = g.upsert(
        CONFIGMAPS, meta("dep", "dep-1", ref("ConfigMap", "owner", "o-1", api="v1")), None
    )
    assert deletes(work) == {"dep-1"}
    [invalid] = g.take_invalid()
    assert invalid.dependent.identity.uid == "dep-1"
    assert invalid.message() == (
        "ownerRef [v1/ConfigMap, namespace: ns, name: owner, uid: o-1] "
        'does not exist in namespace "ns"'
    )


def test_a_virtual_owner_observed_elsewhere_reports_its_dependents() -> None:
    """Breakage caught: the bad child → good parent order left unreported (the child was
    seen first, so its owner was virtual in the child's namespace)."""
    g = Graph()
    g.upsert(CONFIGMAPS, meta("dep", "dep-1", ref("ConfigMap", "owner", "o-1", api="v1")), None)
    work = g.upsert(CONFIGMAPS, meta("owner", "o-1", ns="other"), None)
    assert deletes(work) == {"dep-1"}
    assert [i.dependent.identity.uid for i in g.take_invalid()] == ["dep-1"]


def test_a_cluster_scoped_owner_serves_every_namespace() -> None:
    """Breakage caught: a cluster-scoped owner (a Namespace, a Node) treated as being of
    another namespace than its dependents."""
    g = Graph()
    g.upsert(NAMESPACES, meta("team", "n-1", ns=""), None)
    work = g.upsert(
        CONFIGMAPS, meta("dep", "dep-1", ref("Namespace", "team", "n-1", api="v1")), None
    )
    assert work == []
    assert g.take_invalid() == []


def test_a_virtual_delete_removes_the_owner_and_queues_its_dependents() -> None:
    """Breakage caught: an owner verified absent kept in the graph (its dependents never
    collected)."""
    g = Graph()
    g.upsert(REPLICASETS, meta("rs", "rs-1", ref("Deployment", "d", "d-1")), None)
    absent = Identity("apps/v1", "Deployment", "ns", "d", "d-1")
    work = g.virtual_delete(absent)
    assert deletes(work) == {"rs-1"}
    assert g.get("d-1") is None
    assert absent in g.absent


def test_a_virtual_delete_spares_an_observed_node() -> None:
    """Breakage caught: an object that exists removed from the graph because a dependent
    named it by wrong coordinates."""
    g = Graph()
    g.upsert(DEPLOYMENTS, meta("d", "d-1"), None)
    g.upsert(REPLICASETS, meta("rs", "rs-1", ref("Deployment", "wrong", "d-1")), None)
    work = g.virtual_delete(Identity("apps/v1", "Deployment", "ns", "wrong", "d-1"))
    assert deletes(work) == {"rs-1"}
    assert g.get("d-1") is not None


def test_absent_owners_keep_the_most_recent() -> None:
    """Breakage caught: the absent-owner cache growing without bound."""
    cache = AbsentOwners(size=2)
    ids = [Identity("v1", "ConfigMap", "ns", f"c{i}", f"u{i}") for i in range(3)]
    for i in ids:
        cache.add(i)
    assert ids[0] not in cache
    assert ids[1] in cache and ids[2] in cache


def test_the_collectors_client_has_twice_the_qps() -> None:
    """Breakage caught: the collector held to kube-controller-manager's 20/s where upstream
    gives its collector 40/s (each deletion is a read and a delete): half the deletion
    rate of upstream's at the same flags."""
    parser = argparse.ArgumentParser()
    add_rate_limit_arguments(parser)
    bucket = bucket_from_args(parser.parse_args([]), CONTROLLER.options.rate_limit_scale)
    assert (bucket.qps, bucket.burst) == (40.0, 30)
