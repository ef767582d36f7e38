"""The cache's memory: one exact-size copy of each object's JSON, shared labels, lazy
indexes, events that share the object's bytes, objects that keep no encoding, and LIST
pages that do not outlive it."""

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
    assert_holds_no_encoding(listed)

    changed = obj("a", 3, data="y" * 500)
    event = store.apply(EventKind.MODIFIED, changed, 3)
    fanout.publish(CM, [event])
    chunks, count = sub.take()
    assert count == 1
    # Both forms kept, sharing every chunk but the framed one's first and last.
    assert event.framed is not None and event.wire is not None
    assert all(a is b for a, b in zip(event.framed[1:-1], event.wire[1:-1], strict=True))
    assert any(chunk is changed.raw for chunk in event.framed)
    assert any(chunk is changed.raw for chunk in chunks)
    (decoded,) = wire.decode_batch(chunks)
    assert decoded.object == changed.raw and decoded.resource_version == "3"
    assert decoded == wire.event(EventKind.MODIFIED, wire.resource_type(CM), changed, "3")


def assert_holds_no_encoding(stored: StoredObject) -> None:
    """``stored`` keeps its JSON and parsed fields only: no encoded head (wire.py)."""
    assert not hasattr(stored, "__dict__")
    assert [s for s in StoredObject.__slots__ if s.startswith("wire")] == []
    assert [r for r in gc.get_referents(stored) if isinstance(r, bytes)] == [stored.raw]


def test_a_snapshot_leaves_no_encoding_on_the_objects() -> None:
    store = Store()
    objects = [obj(f"o{i}", i + 2, labels={"app": "web"}, owner="o1") for i in range(20)]
    store.replace(objects, 30)
    for _ in range(2):  # a second subscriber builds the heads again, equal to the first's
        feed = TypeFeed(CM, store, parse_filter("", "", ""), 100, False)
        feed.start_with_snapshot(replaced=False)
        chunks: list[bytes] = []
        assert feed.take(1000, chunks) == 21
        decoded = wire.decode_batch(chunks)
        rtype = wire.resource_type(CM)
        by_name = {o.name: o for o in objects}
        assert decoded[:-1] == [
            wire.event(EventKind.ADDED, rtype, by_name[e.metadata.name], "") for e in decoded[:-1]
        ]
        for stored in objects:
            assert_holds_no_encoding(stored)


def test_other_forms_of_an_event_reuse_its_encoded_metadata() -> None:
    """A subscriber that gets the previous object, or another kind of event, takes the
    object's head from the event's encoding instead of encoding the metadata again."""
    store = Store()
    store.replace([obj("a", 2, labels={"app": "db"})], 2)
    fast = TypeFeed(CM, store, parse_filter("", "", ""), 100, False)
    with_previous = TypeFeed(CM, store, parse_filter("", "", ""), 100, True)
    entering = TypeFeed(CM, store, parse_filter("", "app=web", ""), 100, False)
    feeds = [fast, with_previous, entering]
    fanout = Fanout()
    for i, feed in enumerate(feeds):
        feed.start_with_snapshot(replaced=False)
        fanout.add(Subscription(f"s{i}", [feed], 100))
        feed.take(100, [])
    changed = obj("a", 3, labels={"app": "web"})
    event = store.apply(EventKind.MODIFIED, changed, 3)
    fanout.publish(CM, [event])
    assert event.wire is not None
    head = wire.event_head(event.wire)
    assert head is not None and head == wire.object_head(changed)
    rtype = wire.resource_type(CM)
    previous = event.previous
    expected = {
        "fast": wire.event(EventKind.MODIFIED, rtype, changed, "3"),
        "with_previous": wire.event(EventKind.MODIFIED, rtype, changed, "3", previous=previous),
        "entering": wire.event(EventKind.ADDED, rtype, changed, "3"),
    }
    for name, feed in zip(expected, feeds, strict=True):
        out: list[bytes] = []
        assert feed.take(100, out) == 1
        assert any(chunk is head for chunk in out), name
        assert wire.decode_batch(out) == [expected[name]], name
    assert event.framed is not None and wire.event_head(event.framed) is head
    assert_holds_no_encoding(changed)


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
    for stored in reflector.store:
        assert_holds_no_encoding(stored)
    raw = sum(len(o.raw) for o in reflector.store)
    # The JSON and the parsed metadata (the snapshot's encodings are gone): within 1.5
    # times the JSON for 1 KB objects (before the store kept one copy, ten times).
    assert (held - before) / raw < 1.5
