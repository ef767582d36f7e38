"""The cache's memory: one exact-size copy of each object's JSON, shared labels, lazy
indexes, events that share the object's bytes, and LIST pages that do not outlive it."""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
from typing import Any

import orjson
import pytest

from steward.informer import wire
from steward.informer.apiclient import ApiClient, ListPage, ResourceInfo
from steward.informer.fanout import Fanout, Subscription, TypeFeed, encode_event
from steward.informer.metrics import InformerMetrics
from steward.informer.reflector import Reflector, ReflectorOptions
from steward.informer.selectors import parse_filter
from steward.informer.store import (
    NO_LABELS,
    EventKind,
    ResourceTypeName,
    Store,
    StoredObject,
    _label_sets,
    shared_labels,
)
from tests.informer.objects import obj

pytestmark = pytest.mark.unit

CM = ResourceTypeName("", "v1", "configmaps")


def configmap(i: int, rv: int = 1) -> dict[str, Any]:
    """A ConfigMap of about 1 KB, shaped like one ``kubectl create`` leaves."""
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {
            "name": f"config-{i:06d}",
            "namespace": f"team-{i % 7}",
            "uid": f"{i:08x}-0000-4000-8000-000000000000",
            "resourceVersion": str(rv),
            "creationTimestamp": "2026-05-01T10:00:00Z",
            "labels": {"app": f"service-{i % 20}", "tier": "backend"},
            "managedFields": [
                {
                    "manager": "kubectl-create",
                    "operation": "Update",
                    "apiVersion": "v1",
                    "time": "2026-05-01T10:00:00Z",
                    "fieldsType": "FieldsV1",
                    "fieldsV1": {"f:data": {".": {}, "f:payload": {}}},
                }
            ],
        },
        "data": {"payload": f"{i:x}".rjust(800, "x")},
    }


def test_an_object_keeps_an_exact_size_copy_of_its_json() -> None:
    doc = configmap(1)
    tracemalloc.start()
    try:
        stored = [StoredObject(orjson.dumps(doc), doc) for _ in range(50)]
        gc.collect()
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert stored[0].raw == orjson.dumps(doc)
    # orjson's own output keeps its growth capacity (several times the JSON); the copy
    # does not, so an object costs its JSON plus a few hundred bytes.
    assert held / len(stored) < len(stored[0].raw) + 1024


def test_equal_labels_are_shared_and_go_with_their_last_user() -> None:
    a = obj("a", 1, labels={"app": "web", "tier": "front"})
    b = obj("b", 2, labels={"app": "web", "tier": "front"})
    assert a.labels is b.labels and a.labels == {"app": "web", "tier": "front"}
    assert obj("c", 3).labels is NO_LABELS
    labels = {"unique": "only-here"}
    first = shared_labels(labels)
    assert shared_labels(dict(labels)) is first
    assert (("unique", "only-here"),) in _label_sets
    del first
    gc.collect()
    assert (("unique", "only-here"),) not in _label_sets


def test_indexes_are_built_on_first_use_and_kept_up_to_date() -> None:
    store = Store()
    store.apply(EventKind.ADDED, obj("a", 1, labels={"app": "web"}, owner="o1"), 1)
    assert store._by_owner is None and store._by_label == {}
    assert [o.name for o in store.by_owner("o1")] == ["a"]
    assert [o.name for o in store.by_label("app", "web")] == ["a"]
    store.apply(EventKind.ADDED, obj("b", 2, labels={"app": "web"}, owner="o1"), 2)
    store.apply(EventKind.MODIFIED, obj("a", 3, labels={"app": "db"}), 3)
    assert [o.name for o in store.by_owner("o1")] == ["b"]
    assert [o.name for o in store.by_label("app", "web")] == ["b"]
    assert [o.name for o in store.by_label("app", "db")] == ["a"]
    assert store.by_label("tier", "x") == []
    # A relist keeps the indexes that were built, filled from the new content.
    store.replace([obj("c", 5, labels={"app": "web"}, owner="o2")], 5)
    assert [o.name for o in store.by_label("app", "web")] == ["c"]
    assert store.by_owner("o1") == [] and [o.name for o in store.by_owner("o2")] == ["c"]
    names = sorted(o.name for o in store.select(parse_filter("", "app=web", "")))
    assert names == ["c"]


def test_events_share_the_objects_json_bytes() -> None:
    store = Store()
    store.replace([], 1)
    feed = TypeFeed(CM, store, parse_filter("", "", ""), 100, False)
    sub = Subscription("s", [feed], 100)
    fanout = Fanout()
    fanout.add(sub)
    listed = obj("a", 2, data="x" * 500)
    store.apply(EventKind.ADDED, listed, 2)
    feed.start_with_snapshot(replaced=False)
    chunks, count = sub.take()
    assert count == 2  # the snapshot's ADDED, then INITIAL_EVENTS_END
    assert any(chunk is listed.raw for chunk in chunks)
    assert [e.type for e in wire.decode_batch(chunks)] == [1, 5]

    changed = obj("a", 3, data="y" * 500)
    event = store.apply(EventKind.MODIFIED, changed, 3)
    fanout.publish(CM, [event])
    chunks, count = sub.take()
    assert count == 1
    assert event.framed is not None and event.wire is None  # one encoded form kept
    assert any(chunk is changed.raw for chunk in event.framed)
    assert any(chunk is changed.raw for chunk in chunks)
    (decoded,) = wire.decode_batch(chunks)
    assert decoded.object == changed.raw and decoded.resource_version == "3"
    assert decoded == wire.event(EventKind.MODIFIED, wire.resource_type(CM), changed, "3")


def test_event_parts_are_the_encoding_in_pieces() -> None:
    field = wire.resource_type_field(wire.resource_type(CM))
    a, b = obj("a", 1, labels={"k": "v"}), obj("a", 2)
    event = Store().apply(EventKind.ADDED, a, 1, "00-" + "a" * 32 + "-" + "b" * 16 + "-01")
    parts = encode_event(event, field)
    assert b"".join(parts) == wire.event_body(
        EventKind.ADDED, field, a, traceparent=event.traceparent
    )
    framed = wire.frame_parts(wire.event_parts(EventKind.MODIFIED, field, b, previous=a), "9")
    expected = wire.frame(wire.event_body(EventKind.MODIFIED, field, b, previous=a), "9")
    assert b"".join(framed) == expected
    assert b"".join(wire.snapshot_parts(a, field)) == wire.frame(
        wire.event_body(EventKind.ADDED, field, a), ""
    )


class _PagedApi(ApiClient):
    """An API client serving ConfigMaps from memory, in pages (no connection)."""

    def __init__(self, count: int) -> None:  # no connection: pages are made up
        self.count = count

    async def run(self, fn: Any, *args: Any) -> Any:
        return fn(*args)

    def get_json(self, path: str, query: dict[str, str] | None = None) -> dict[str, Any]:
        query = query or {}
        start = int(query.get("continue") or 0)
        end = min(self.count, start + int(query["limit"]))
        items = [configmap(i, 10 + i) for i in range(start, end)]
        for item in items:
            del item["apiVersion"], item["kind"]
        meta = {"resourceVersion": "9999", "continue": str(end) if end < self.count else ""}
        return {"kind": "ConfigMapList", "apiVersion": "v1", "metadata": meta, "items": items}


def test_a_list_keeps_no_page_and_costs_little_more_than_the_json() -> None:
    info = ResourceInfo(CM, True, "ConfigMap", frozenset({"list", "watch"}))
    count = 2000
    reflector = Reflector(
        _PagedApi(count),
        info,
        Fanout(),
        InformerMetrics(),
        ReflectorOptions(page_size=100),
    )

    async def list_and_snapshot() -> int:
        await reflector._list()
        feed = TypeFeed(CM, reflector.store, parse_filter("", "", ""), 10_000, False)
        feed.start_with_snapshot(replaced=False)
        sub = Subscription("s", [feed], 500)
        taken = 0
        while True:
            _, n = sub.take()
            if not n:
                return taken
            taken += n

    gc.collect()
    tracemalloc.start()
    try:
        before, _ = tracemalloc.get_traced_memory()
        assert asyncio.run(list_and_snapshot()) == count + 1
        gc.collect()
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert len(reflector.store) == count
    assert not [o for o in gc.get_objects() if isinstance(o, ListPage)]
    raw = sum(len(o.raw) for o in reflector.store)
    # The JSON, the parsed metadata and the cached metadata encoding: within 1.5 times
    # the JSON for 1 KB objects (before the store kept one copy, ten times).
    assert (held - before) / raw < 1.5
