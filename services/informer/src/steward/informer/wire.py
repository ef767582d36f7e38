"""The wire (protobuf) form of cached objects and events, built once per event and reused.

# The Watch hot path
A Watch stream sends each event to every subscriber, so an event is encoded once, when it
enters the cache, and each subscriber only frames it: :func:`event_parts` is the encoded
``Event`` without its ``resource_version`` (which may differ per subscriber, see
fanout.py), and :func:`frame_parts` appends that field and frames the event as one
``WatchResponse.events`` entry (:func:`event_body` and :func:`frame` do the same in one
piece). A response is then the concatenation of its framed
events, so no message is built or serialized again per subscriber. This relies only on
the protobuf wire format: fields may come in any order, and a repeated message field is
the concatenation of its entries. ``test_wire.py`` checks the result against the
protobuf library's own encoding.

# Chunks
An event's encoding is kept as a tuple of chunks whose concatenation is the encoded
bytes (:func:`event_parts`, :func:`frame_parts`): a small lead (the event type, the
resource type, and once framed the entry's length), the object's head (its ``metadata``
field and the start of its ``object`` field, :func:`object_head`), the object's JSON
bytes themselves, and a small tail (trace context, resource version). The JSON is never
copied into an event: the only bytes an event adds are its lead, the head and the tail,
and a stream joins the chunks once, when it writes its response.

# Objects keep no encoding
The head repeats what the object already holds (name, UID, resource version, labels...),
so it is not cached on the object: an event keeps the head it was encoded with, and
whoever encodes that object's event again in another form (another kind, with the
previous object) passes it on (:func:`event_parts`' ``head``, :func:`event_head`). Only a
snapshot builds each object's head anew, once per object and subscriber
(:func:`snapshot_parts`), and drops it once the response is written: about 4 µs of CPU
an object for every snapshot, where a cached head cost about a tenth of a 1 KB object's
memory for as long as it was held.
"""

from __future__ import annotations

from collections.abc import Iterable

from google.protobuf.timestamp_pb2 import Timestamp

from steward.informer.store import EventKind, ResourceTypeName, StoredObject
from steward.v1 import informer_pb2 as pb


def resource_type(name: ResourceTypeName) -> pb.ResourceType:
    return pb.ResourceType(group=name.group, version=name.version, resource=name.resource)


def object_meta(obj: StoredObject) -> pb.ObjectMeta:
    """The object's parsed metadata as ``ObjectMeta`` (built anew each time, see
    :func:`object_head`).

    A deletion timestamp the API server sent in a form that does not parse is left unset
    rather than failing the event (the object's JSON still carries it).
    """
    meta = pb.ObjectMeta(
        namespace=obj.namespace,
        name=obj.name,
        uid=obj.uid,
        resource_version=obj.resource_version,
        generation=obj.generation,
        labels=obj.labels,
        owner_references=[
            pb.OwnerReference(
                api_version=r.api_version,
                kind=r.kind,
                name=r.name,
                uid=r.uid,
                controller=r.controller,
                block_owner_deletion=r.block_owner_deletion,
            )
            for r in obj.owner_references
        ],
        finalizers=obj.finalizers,
    )
    if obj.deletion_timestamp:
        ts = Timestamp()
        try:
            ts.FromJsonString(obj.deletion_timestamp)
        except ValueError:
            pass
        else:
            meta.deletion_timestamp.CopyFrom(ts)
    return meta


def cached_object(obj: StoredObject) -> pb.CachedObject:
    return pb.CachedObject(metadata=object_meta(obj), object=obj.raw)


def event(
    kind: EventKind,
    rtype: pb.ResourceType,
    obj: StoredObject | None,
    rv: str,
    *,
    previous: StoredObject | None = None,
    traceparent: str = "",
    tracestate: str = "",
) -> pb.Event:
    """One wire event; markers (``obj`` None) carry only the type and resource version."""
    ev = pb.Event(type=kind.value, resource_type=rtype, resource_version=rv)  # type: ignore[arg-type]
    if obj is not None:
        ev.metadata.CopyFrom(object_meta(obj))
        ev.object = obj.raw
        if previous is not None:
            ev.previous_object = previous.raw
    if traceparent:
        ev.trace_context.traceparent = traceparent
        ev.trace_context.tracestate = tracestate
    return ev


_SMALL = [bytes((i,)) for i in range(0x80)]


def _varint(value: int) -> bytes:
    if value < 0x80:
        return _SMALL[value]
    if value < 0x4000:
        return bytes(((value & 0x7F) | 0x80, value >> 7))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(tag: int, payload: bytes) -> bytes:
    """A length-delimited field: key byte (``tag`` = field number << 3 | 2), length, bytes."""
    return bytes((tag,)) + _varint(len(payload)) + payload


# Keys of the length-delimited fields of Event (field number << 3 | wire type 2).
_RESOURCE_TYPE, _METADATA, _OBJECT, _PREVIOUS, _RV, _TRACE = 0x12, 0x1A, 0x22, 0x2A, 0x32, 0x3A
_EVENTS = 0x0A  # WatchResponse.events


def resource_type_field(rtype: pb.ResourceType) -> bytes:
    """The encoded ``resource_type`` field of an Event (the same for all of a type)."""
    return _field(_RESOURCE_TYPE, rtype.SerializeToString())


def object_head(obj: StoredObject) -> bytes:
    """The encoded ``metadata`` field of an Event and the key and length of its
    ``object`` field (``obj.raw`` follows), built anew on each call: the object keeps no
    copy (see the module docs)."""
    meta = _field(_METADATA, object_meta(obj).SerializeToString())
    return meta + bytes((_OBJECT,)) + _varint(len(obj.raw))


def _trace_field(traceparent: str, tracestate: str) -> bytes:
    """The encoded ``trace_context`` field of an Event; empty when not traced."""
    if not traceparent:
        return b""
    ctx = pb.TraceContext(traceparent=traceparent, tracestate=tracestate)
    return _field(_TRACE, ctx.SerializeToString())


def view_head(obj: StoredObject, view: bytes, head: bytes | None = None) -> bytes:
    """The head of an event that carries ``view`` (a projection of ``obj``, see
    projections.py) as its object: ``obj``'s metadata field, then the key and length of
    the ``object`` field. ``head`` is ``obj``'s own :func:`object_head` when the caller
    has it (its metadata field is reused, not encoded again)."""
    if head is None:
        meta = _field(_METADATA, object_meta(obj).SerializeToString())
    else:
        meta = head[: len(head) - 1 - len(_varint(len(obj.raw)))]
    return meta + bytes((_OBJECT,)) + _varint(len(view))


def view_parts(
    kind: EventKind,
    rtype_field: bytes,
    head: bytes,
    view: bytes,
    *,
    previous: bytes | None = None,
    traceparent: str = "",
    tracestate: str = "",
) -> tuple[bytes, ...]:
    """:func:`event_parts` of an event whose object is a projection: ``head`` from
    :func:`view_head`, ``view`` the projected JSON, ``previous`` the projected previous
    object when the subscriber asked for it."""
    tail = _trace_field(traceparent, tracestate)
    lead = _lead(kind, rtype_field)
    if previous is None:
        return (lead, head, view, tail)
    return (lead, head, view, bytes((_PREVIOUS,)) + _varint(len(previous)), previous, tail)


def event_head(parts: tuple[bytes, ...] | None) -> bytes | None:
    """The object's head (:func:`object_head`) in an event's chunks, framed or not; None
    when there are none or they are a marker's (no object)."""
    if parts is None or len(parts) < 4:
        return None
    return parts[1]


_leads: dict[tuple[int, bytes], bytes] = {}


def _lead(kind: EventKind, rtype_field: bytes) -> bytes:
    """The encoded ``type`` and ``resource_type`` fields (shared by all such events)."""
    lead = _leads.get((kind, rtype_field))
    if lead is None:
        lead = _leads[(kind, rtype_field)] = b"\x08" + _varint(kind.value) + rtype_field
    return lead


def event_parts(
    kind: EventKind,
    rtype_field: bytes,
    obj: StoredObject | None,
    *,
    previous: StoredObject | None = None,
    head: bytes | None = None,
    traceparent: str = "",
    tracestate: str = "",
) -> tuple[bytes, ...]:
    """An encoded Event without its resource version, as chunks (see the module docs):
    the lead first, the tail (trace context, maybe empty) last, shared bytes between.

    ``head`` is ``obj``'s :func:`object_head` when the caller has it already (from another
    encoding of the same object, :func:`event_head`); otherwise it is built here.
    """
    tail = _trace_field(traceparent, tracestate)
    lead = _lead(kind, rtype_field)
    if obj is None:
        return (lead, tail)
    if head is None:
        head = object_head(obj)
    if previous is None:
        return (lead, head, obj.raw, tail)
    raw = previous.raw
    previous_head = bytes((_PREVIOUS,)) + _varint(len(raw))
    return (lead, head, obj.raw, previous_head, raw, tail)


def frame_parts(parts: tuple[bytes, ...], rv: str) -> tuple[bytes, ...]:
    """:func:`frame` of chunks: ``parts`` plus the resource version, framed, as chunks
    (only the first and the last are new)."""
    tail = parts[-1]
    if rv:
        encoded = rv.encode()
        tail += b"\x32" + _varint(len(encoded)) + encoded  # field 6, resource_version
    size = sum(map(len, parts[:-1])) + len(tail)
    return (b"\x0a" + _varint(size) + parts[0], *parts[1:-1], tail)


def snapshot_parts(obj: StoredObject, rtype_field: bytes) -> tuple[bytes, bytes, bytes]:
    """The framed ADDED event of a snapshot (no resource version), as chunks (the head
    built for this call only, see the module docs)."""
    lead = _lead(EventKind.ADDED, rtype_field)
    head = object_head(obj)
    raw = obj.raw
    size = len(lead) + len(head) + len(raw)
    return (b"\x0a" + _varint(size) + lead, head, raw)


def event_body(
    kind: EventKind,
    rtype_field: bytes,
    obj: StoredObject | None,
    *,
    previous: StoredObject | None = None,
    traceparent: str = "",
    tracestate: str = "",
) -> bytes:
    """An encoded Event without its resource version (see the module docs), in one piece."""
    return b"".join(
        event_parts(
            kind,
            rtype_field,
            obj,
            previous=previous,
            traceparent=traceparent,
            tracestate=tracestate,
        )
    )


def frame(body: bytes, rv: str) -> bytes:
    """One ``WatchResponse.events`` entry: ``body`` plus the resource version, framed."""
    if rv:
        encoded = rv.encode()
        body += b"\x32" + _varint(len(encoded)) + encoded  # field 6, resource_version
    return b"\x0a" + _varint(len(body)) + body  # WatchResponse.events entry


def decode_batch(batch: Iterable[bytes]) -> list[pb.Event]:
    """The events of framed entries or their chunks (for tests and tools; the server never
    decodes)."""
    return list(pb.WatchResponse.FromString(b"".join(batch)).events)
