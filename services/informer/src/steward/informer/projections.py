"""Projected subscribers: each object's projected form, encoded once per projection.

A Watch target with ``fields`` or ``metadata_only`` gets every object reduced by its
:class:`~steward.projection.Projection` (see that module for what a projection keeps).
Subscribers asking for equal projections share the work: the projected JSON of an event
is built once per distinct projection, when the first feed with that projection takes
the event (an event outside every projected feed's filters is never projected), and kept
with the event (``StoreEvent.views``) while it is published; each feed that queues it
keeps its own reference, and the history keeps none. It is taken from the dict the
reflector decoded at ingest while the event is being published, else from the object's
JSON (a replay, a deletion).

# Dropping changes nobody reads
Each object remembers a hash of each of its projected forms (``StoredObject.digests``),
over the projected JSON (which never holds the resource version) and the parsed metadata
the event carries besides (labels, owners, finalizers, deletion, generation). A MODIFIED
event whose new and previous digests are equal changes nothing the subscriber can see,
and the subscriber's feed drops it (fanout.py). Python's 64-bit hash of the bytes stands
for them: two different projected forms with the same hash are about as likely as one in
2**64 comparisons, and the next change of the object, or a relist, would repair it.

# Memory usage
An object's digests cost a small tuple per object of a type that has projected
subscribers (about 100 bytes for one projection); a view lives as long as a feed has it
queued.
"""

from __future__ import annotations

from typing import Any

import orjson

from steward.deepjson import loads_deep
from steward.informer import wire
from steward.informer.store import EventKind, StoredObject, StoreEvent
from steward.projection import Projection


def decode(obj: StoredObject) -> Any:
    """The object's JSON as a dict (decoded again: the store keeps bytes only)."""
    try:
        return orjson.loads(obj.raw)
    except orjson.JSONDecodeError:
        return loads_deep(obj.raw)


def view(projection: Projection, obj: StoredObject, decoded: Any = None) -> bytes:
    """The projected JSON of ``obj`` (``decoded`` is its dict when the caller has it)."""
    try:
        return projection.encode(decoded if decoded is not None else decode(obj))
    except (orjson.JSONEncodeError, TypeError):
        # Nested beyond orjson's encoder: the slow codec, as the reflector does.
        from steward.deepjson import dumps

        return dumps(projection.apply(decoded if decoded is not None else decode(obj)))


def _digest(obj: StoredObject, projected: bytes) -> int:
    return hash(
        (
            projected,
            tuple(obj.labels.items()),
            obj.owner_references,
            obj.finalizers,
            obj.deletion_timestamp,
            obj.generation,
        )
    )


def digest(projection: Projection, obj: StoredObject, projected: bytes | None = None) -> int:
    """The hash of ``obj``'s projected form (see the module docs), remembered on it."""
    held = obj.digests
    if held is not None:
        for i in range(0, len(held), 2):
            if held[i] == projection:
                known: int = held[i + 1]
                return known
    if projected is None:
        projected = view(projection, obj)
    value = _digest(obj, projected)
    # A flat tuple of (projection, hash) pairs: an object meets one or two projections,
    # and a tuple of two costs half a dict.
    obj.digests = (*(held or ()), projection, value)
    return value


def view_of(event: StoreEvent, projection: Projection) -> bytes:
    """The projected JSON of the event's object (built now if it was not published with
    this projection in use: a resume's replay of older events)."""
    views = event.views
    if views is None:
        views = event.views = {}
    held = views.get(projection)
    if held is None:
        assert event.obj is not None
        projected = view(projection, event.obj, event.decoded)
        digest(projection, event.obj, projected)
        held = views[projection] = (projected,)
    return held[0]


def event_parts(
    kind: EventKind,
    rtype_field: bytes,
    event: StoreEvent,
    projection: Projection,
    previous: StoredObject | None = None,
    projected: bytes | None = None,
) -> tuple[bytes, ...]:
    """The encoded Event (without resource version) of ``event`` as ``kind``, its object
    projected (``projected`` when the caller kept it); with ``previous``'s projection as
    the previous object when given."""
    obj = event.obj
    assert obj is not None
    if projected is None:
        projected = view_of(event, projection)
    head = wire.view_head(obj, projected, wire.event_head(event.wire or event.framed))
    return wire.view_parts(
        kind,
        rtype_field,
        head,
        projected,
        previous=view(projection, previous) if previous is not None else None,
        traceparent=event.traceparent,
        tracestate=event.tracestate,
    )


def snapshot_parts(
    obj: StoredObject, rtype_field: bytes, projection: Projection
) -> tuple[bytes, ...]:
    """The framed ADDED event of a snapshot, the object projected (no resource version)."""
    projected = view(projection, obj)
    digest(projection, obj, projected)
    head = wire.view_head(obj, projected)
    return wire.frame_parts(wire.view_parts(EventKind.ADDED, rtype_field, head, projected), "")
