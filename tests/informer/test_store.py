"""The store: indexes, upserts, relist differences, and the bounded history ring."""

from __future__ import annotations

import pytest

from steward.informer.selectors import parse_filter
from steward.informer.store import EventKind, History, Store, parse_resource_version
from tests.informer.objects import obj

pytestmark = pytest.mark.unit


def test_apply_upserts_and_indexes() -> None:
    store = Store()
    ev = store.apply(EventKind.ADDED, obj("a", 1, labels={"app": "web"}, owner="o1"), 1)
    assert ev.kind is EventKind.ADDED and ev.previous is None and ev.rv == 1
    store.apply(EventKind.ADDED, obj("b", 2, namespace="other"), 2)
    ev = store.apply(EventKind.MODIFIED, obj("a", 3, labels={"app": "api"}), 3)
    assert ev.kind is EventKind.MODIFIED and ev.previous is not None
    assert ev.previous.resource_version == "1"
    assert [o.name for o in store.by_namespace("default")] == ["a"]
    assert store.by_label("app", "web") == []
    assert [o.name for o in store.by_label("app", "api")] == ["a"]
    assert store.by_owner("o1") == []
    # An ADDED over a held object is a modification; a MODIFIED of an unknown one an add.
    assert store.apply(EventKind.ADDED, obj("a", 4), 4).kind is EventKind.MODIFIED
    assert store.apply(EventKind.MODIFIED, obj("c", 5), 5).kind is EventKind.ADDED
    ev = store.apply(EventKind.DELETED, obj("a", 6), 6)
    assert ev.kind is EventKind.DELETED and store.get(("default", "a")) is None
    assert store.by_namespace("default") == [store.get(("default", "c"))]
    assert store.rv == 6


def test_select_uses_filters() -> None:
    store = Store()
    for i, (ns, app) in enumerate([("a", "web"), ("a", "db"), ("b", "web")]):
        store.apply(EventKind.ADDED, obj(f"o{i}", i + 1, namespace=ns, labels={"app": app}), i + 1)
    names = lambda flt: sorted(o.name for o in store.select(flt))  # noqa: E731
    assert names(parse_filter("", "", "")) == ["o0", "o1", "o2"]
    assert names(parse_filter("a", "", "")) == ["o0", "o1"]
    assert names(parse_filter("", "app=web", "")) == ["o0", "o2"]
    assert names(parse_filter("", "app!=web", "")) == ["o1"]
    assert names(parse_filter("", "", "metadata.namespace=b")) == ["o2"]
    assert names(parse_filter("a", "", "metadata.name=o1")) == ["o1"]
    assert names(parse_filter("b", "", "metadata.name=o1")) == []


def test_replace_reports_the_differences() -> None:
    store = Store()
    store.apply(EventKind.ADDED, obj("same", 1), 1)
    store.apply(EventKind.ADDED, obj("changed", 2), 2)
    store.apply(EventKind.ADDED, obj("gone", 3), 3)
    store.apply(EventKind.ADDED, obj("recreated", 4, uid="u1"), 4)
    events = store.replace(
        [obj("same", 1), obj("changed", 7), obj("new", 8), obj("recreated", 9, uid="u2")], 10
    )
    got = [(e.kind, e.key[1]) for e in events]
    assert got == [
        (EventKind.MODIFIED, "changed"),
        (EventKind.DELETED, "gone"),
        (EventKind.ADDED, "new"),
        (EventKind.DELETED, "recreated"),
        (EventKind.ADDED, "recreated"),
    ]
    assert all(e.rv == 4 for e in events)  # the version from before the relist
    assert store.rv == 10
    assert store.history.since(4, store.rv) is None  # history restarts at the relist
    assert store.history.since(10, store.rv) == []


def test_history_ring_is_bounded_and_serves_resumes() -> None:
    store = Store(history_size=3)
    store.replace([], 10)
    for rv in range(11, 16):
        store.apply(EventKind.ADDED, obj(f"o{rv}", rv), rv)
    assert len(store.history) == 3
    assert store.history.floor == 12
    assert store.history.since(11, store.rv) is None  # 12 was forgotten
    assert [e.rv for e in store.history.since(12, store.rv) or []] == [13, 14, 15]
    assert [e.rv for e in store.history.since(14, store.rv) or []] == [15]
    assert store.history.since(15, store.rv) == []
    assert store.history.since(99, store.rv) is None  # from the future: not ours


def test_history_rejects_a_zero_size() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        History(0)


@pytest.mark.parametrize("text", ["", "abc", "-1", "1.5", "9" * 21])
def test_malformed_resource_versions(text: str) -> None:
    with pytest.raises(ValueError, match="malformed resource version"):
        parse_resource_version(text)
