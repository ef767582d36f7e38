"""The parsed metadata a mirror keeps of each object, compact and shared.

Every event of the informer carries its object's parsed metadata (``ObjectMeta`` in
informer.proto). A mirror keeps it for every object it holds, so its form is what a
controller's memory follows: kept as the protobuf message, it cost about 1.5 KB per
object (the message's own memory arena), more than a projected object's JSON. A
:class:`Meta` keeps the same fields in slots, and what many objects have in common once:
the strings are interned, objects with the same labels share one mapping of them, and
equal owner references (a ReplicaSet's pods all have the same one) are one object.

:class:`Meta` reads like the message (``meta.labels``, ``meta.owner_references``,
``meta.HasField("deletion_timestamp")``, ``meta.generation``, ...); treat it and what it
holds as read-only.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any
from weakref import WeakValueDictionary

from steward.v1 import informer_pb2 as pb


class Labels(dict[str, str]):
    """An object's labels, shared by every object that has the same ones: never mutate."""

    __slots__ = ("__weakref__",)


class OwnerRef:
    """A parsed owner reference (``pb.OwnerReference``'s fields), shared by every object
    that has an equal one."""

    __slots__ = (
        "__weakref__",
        "api_version",
        "block_owner_deletion",
        "controller",
        "kind",
        "name",
        "uid",
    )

    def __init__(
        self,
        api_version: str,
        kind: str,
        name: str,
        uid: str,
        controller: bool,
        block_owner_deletion: bool,
    ) -> None:
        self.api_version = api_version
        self.kind = kind
        self.name = name
        self.uid = uid
        self.controller = controller
        self.block_owner_deletion = block_owner_deletion

    def __eq__(self, other: object) -> bool:
        return isinstance(other, OwnerRef) and _ref_key(self) == _ref_key(other)

    def __hash__(self) -> int:
        return hash(_ref_key(self))

    def __repr__(self) -> str:
        flag = ", controller" if self.controller else ""
        return f"OwnerRef({self.api_version} {self.kind} {self.name} {self.uid}{flag})"


def _ref_key(ref: Any) -> tuple[str, str, str, str, bool, bool]:
    return (
        ref.api_version,
        ref.kind,
        ref.name,
        ref.uid,
        bool(ref.controller),
        bool(ref.block_owner_deletion),
    )


NO_LABELS = Labels()
_labels: WeakValueDictionary[tuple[tuple[str, str], ...], Labels] = WeakValueDictionary()
_refs: WeakValueDictionary[tuple[str, str, str, str, bool, bool], OwnerRef] = WeakValueDictionary()
_intern = sys.intern


def shared_labels(labels: Mapping[str, str]) -> Labels:
    """The shared :class:`Labels` equal to ``labels``."""
    if not labels:
        return NO_LABELS
    items = tuple(sorted(labels.items()))
    shared = _labels.get(items)
    if shared is None:
        shared = Labels({_intern(k): _intern(v) for k, v in items})
        _labels[items] = shared
    return shared


def shared_ref(ref: Any) -> OwnerRef:
    """The shared :class:`OwnerRef` equal to ``ref`` (one with the same six fields)."""
    key = _ref_key(ref)
    shared = _refs.get(key)
    if shared is None:
        shared = OwnerRef(
            _intern(key[0]), _intern(key[1]), _intern(key[2]), _intern(key[3]), key[4], key[5]
        )
        _refs[key] = shared
    return shared


class Meta:
    """An object's parsed metadata (see the module docs)."""

    __slots__ = (
        "deletion_timestamp",
        "finalizers",
        "generation",
        "labels",
        "name",
        "namespace",
        "owner_references",
        "resource_version",
        "uid",
    )

    def __init__(
        self,
        namespace: str = "",
        name: str = "",
        uid: str = "",
        resource_version: str = "",
        generation: int = 0,
        labels: Mapping[str, str] | None = None,
        owner_references: tuple[OwnerRef, ...] = (),
        deletion_timestamp: str | None = None,
        finalizers: tuple[str, ...] = (),
    ) -> None:
        self.namespace = _intern(namespace)
        self.name = name
        self.uid = uid
        self.resource_version = resource_version
        self.generation = generation
        self.labels: Mapping[str, str] = shared_labels(labels or {})
        self.owner_references = owner_references
        self.deletion_timestamp = deletion_timestamp
        """RFC 3339, as the API server wrote it; None when the object is not being
        deleted."""
        self.finalizers = finalizers

    @classmethod
    def of(cls, message: pb.ObjectMeta | Meta) -> Meta:
        """The metadata of an event (a ``pb.ObjectMeta``; a :class:`Meta` as it is)."""
        if isinstance(message, Meta):
            return message
        deleted = (
            message.deletion_timestamp.ToJsonString()
            if message.HasField("deletion_timestamp")
            else None
        )
        return cls(
            message.namespace,
            message.name,
            message.uid,
            message.resource_version,
            message.generation,
            message.labels,
            tuple(shared_ref(r) for r in message.owner_references),
            deleted,
            tuple(_intern(f) for f in message.finalizers),
        )

    def to_message(self) -> pb.ObjectMeta:
        """The metadata as the event's message again."""
        message = pb.ObjectMeta(
            namespace=self.namespace,
            name=self.name,
            uid=self.uid,
            resource_version=self.resource_version,
            generation=self.generation,
            labels=dict(self.labels),
            owner_references=[
                pb.OwnerReference(
                    api_version=r.api_version,
                    kind=r.kind,
                    name=r.name,
                    uid=r.uid,
                    controller=r.controller,
                    block_owner_deletion=r.block_owner_deletion,
                )
                for r in self.owner_references
            ],
            finalizers=list(self.finalizers),
        )
        if self.deletion_timestamp is not None:
            message.deletion_timestamp.FromJsonString(self.deletion_timestamp)
        return message

    def HasField(self, field: str) -> bool:
        """Whether an optional field is set, as on the message (``deletion_timestamp``)."""
        if field == "deletion_timestamp":
            return self.deletion_timestamp is not None
        raise ValueError(f"Meta has no optional field {field!r}")

    def __repr__(self) -> str:
        return f"Meta({self.namespace}/{self.name}@{self.resource_version})"
