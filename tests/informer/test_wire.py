"""The pre-encoded Watch path equals the protobuf library's own encoding of the events."""

from __future__ import annotations

import orjson
import pytest

from steward.informer import wire
from steward.informer.store import EventKind, StoredObject
from steward.v1 import informer_pb2 as pb

pytestmark = pytest.mark.unit

PODS = pb.ResourceType(group="", version="v1", resource="pods")


def stored(name: str, **meta: object) -> StoredObject:
    obj = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "namespace": "ns",
            "name": name,
            "uid": f"u-{name}",
            "resourceVersion": "42",
            "generation": 3,
            **meta,
        },
        "spec": {"big": "y" * 300},  # lengths past one varint byte
    }
    raw = orjson.dumps(obj)
    return StoredObject(raw, orjson.loads(raw))


def test_framed_events_decode_to_what_the_library_builds() -> None:
    rich = stored(
        "rich",
        labels={"app": "web", "tier": "front"},
        ownerReferences=[
            {
                "apiVersion": "batch/v1",
                "kind": "Job",
                "name": "j",
                "uid": "uj",
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ],
        deletionTimestamp="2026-11-30T03:00:00Z",
    )
    old = stored("rich")
    field = wire.resource_type_field(PODS)
    cases = [
        (EventKind.ADDED, rich, None, "", "", "7"),
        (EventKind.MODIFIED, rich, old, f"00-{'a' * 32}-{'b' * 16}-01", "k=v", "123456789"),
        (EventKind.DELETED, old, None, "", "", ""),
        (EventKind.INITIAL_EVENTS_END, None, None, "", "", "99"),
        (EventKind.REPLACED, None, None, "", "", ""),
    ]
    framed = [
        wire.frame(
            wire.event_body(kind, field, obj, previous=prev, traceparent=tp, tracestate=ts), rv
        )
        for kind, obj, prev, tp, ts, rv in cases
    ]
    expected = [
        wire.event(kind, PODS, obj, rv, previous=prev, traceparent=tp, tracestate=ts)
        for kind, obj, prev, tp, ts, rv in cases
    ]
    assert wire.decode_batch(framed) == expected
    decoded = wire.decode_batch(framed)[1]
    assert decoded.metadata.labels == {"app": "web", "tier": "front"}
    assert decoded.metadata.owner_references[0].controller
    assert decoded.metadata.deletion_timestamp.seconds > 0
    assert decoded.previous_object == old.raw


def test_a_head_passed_on_encodes_the_same_bytes() -> None:
    """An object's head is built anew on each call (objects keep none); one passed on from
    another encoding of the same object gives the same bytes as one built here."""
    obj = stored("reused", labels={"app": "web"}, finalizers=["f"])
    old = stored("reused")
    field = wire.resource_type_field(PODS)
    head = wire.object_head(obj)
    assert wire.object_head(obj) == head and wire.object_head(obj) is not head
    assert not hasattr(obj, "wire_head")
    ingest = wire.event_parts(EventKind.MODIFIED, field, obj)
    assert wire.event_head(ingest) == head
    assert wire.event_head(wire.frame_parts(ingest, "8")) is ingest[1]
    assert wire.event_head(wire.event_parts(EventKind.BOOKMARK, field, None)) is None
    assert wire.event_head(None) is None
    tp = f"00-{'c' * 32}-{'d' * 16}-01"
    for kind, previous in [(EventKind.MODIFIED, old), (EventKind.ADDED, None)]:
        passed = wire.event_parts(
            kind, field, obj, previous=previous, head=wire.event_head(ingest), traceparent=tp
        )
        assert passed[1] is ingest[1]
        built = wire.event_parts(kind, field, obj, previous=previous, traceparent=tp)
        assert b"".join(passed) == b"".join(built)
        (decoded,) = wire.decode_batch([b"".join(wire.frame_parts(passed, "8"))])
        assert decoded == wire.event(kind, PODS, obj, "8", previous=previous, traceparent=tp)
