"""Which changes queue which namespace, for both controllers (no cluster): upstream's
event handlers of the serviceaccount controller and the root CA publisher."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from steward import CONFIGMAPS, NAMESPACES, Request
from steward.controllers.rootcacertpublisher.controller import Publisher, namespace_changed
from steward.controllers.serviceaccount.controller import (
    SERVICEACCOUNTS,
    ServiceAccountsReconciler,
    not_deleted,
)
from steward.runtime.meta import Meta
from steward.runtime.mirror import Change, ChangeKind, MirrorObject
from steward.runtime.resources import Resource

pytestmark = pytest.mark.unit

ADDED, MODIFIED, DELETED = ChangeKind.ADDED, ChangeKind.MODIFIED, ChangeKind.DELETED


def obj(rtype: Resource, namespace: str, name: str, body: dict[str, Any]) -> MirrorObject:
    return MirrorObject(rtype, Meta(namespace, name, "uid-1", "1"), orjson.dumps(body))


def change(kind: ChangeKind, new: MirrorObject, old: MirrorObject | None = None) -> Change:
    return Change(kind, new, old if kind is MODIFIED else None, None)


def ns(phase: str | None) -> MirrorObject:
    return obj(NAMESPACES, "", "team", {"status": {"phase": phase}} if phase else {})


def test_namespaces_queue_the_account_sync_unless_deleted() -> None:
    assert not_deleted(change(ADDED, ns("Active")))
    assert not_deleted(change(MODIFIED, ns("Terminating"), ns("Active")))
    assert not not_deleted(change(DELETED, ns("Active")))


def test_only_deleted_accounts_queue_their_namespace() -> None:
    sa = obj(SERVICEACCOUNTS, "team", "default", {})
    mapper = ServiceAccountsReconciler.account_deleted
    reconciler: Any = None  # the mapper reads nothing of the reconciler
    assert mapper(reconciler, change(DELETED, sa)) == [Request("", "team")]
    assert mapper(reconciler, change(ADDED, sa)) == []
    assert mapper(reconciler, change(MODIFIED, sa, sa)) == []


def test_namespaces_queue_the_publisher_when_added_or_active() -> None:
    assert namespace_changed(change(ADDED, ns("Terminating")))  # every addition
    assert namespace_changed(change(MODIFIED, ns("Active"), ns("Active")))
    assert not namespace_changed(change(MODIFIED, ns("Terminating"), ns("Active")))
    assert not namespace_changed(change(MODIFIED, ns(None), ns(None)))
    assert not namespace_changed(change(DELETED, ns("Active")))


def test_the_configmap_queues_its_namespace_when_changed_or_deleted() -> None:
    cm = obj(CONFIGMAPS, "team", "kube-root-ca.crt", {"data": {}})
    mapper = Publisher.configmap_changed
    reconciler: Any = None
    assert mapper(reconciler, change(MODIFIED, cm, cm)) == [Request("", "team")]
    assert mapper(reconciler, change(DELETED, cm)) == [Request("", "team")]
    assert mapper(reconciler, change(ADDED, cm)) == []  # upstream has no add handler
    other = obj(CONFIGMAPS, "team", "other", {"data": {}})
    assert mapper(reconciler, change(DELETED, other)) == []
