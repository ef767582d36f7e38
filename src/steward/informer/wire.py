"""The wire (protobuf) form of cached objects and events, built once per object and reused."""

from __future__ import annotations

from google.protobuf.timestamp_pb2 import Timestamp

from steward.informer.store import EventKind, ResourceTypeName, StoredObject
from steward.v1 import informer_pb2 as pb


def resource_type(name: ResourceTypeName) -> pb.ResourceType:
    return pb.ResourceType(group=name.group, version=name.version, resource=name.resource)


def object_meta(obj: StoredObject) -> pb.ObjectMeta:
    """The object's parsed metadata as ``ObjectMeta``, cached on the object.

    A deletion timestamp the API server sent in a form that does not parse is left unset
    rather than failing the event (the object's JSON still carries it).
    """
    cached = obj.wire_meta
    if cached is not None:
        meta: pb.ObjectMeta = cached
        return meta
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
    )
    if obj.deletion_timestamp:
        ts = Timestamp()
        try:
            ts.FromJsonString(obj.deletion_timestamp)
        except ValueError:
            pass
        else:
            meta.deletion_timestamp.CopyFrom(ts)
    obj.wire_meta = meta
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
