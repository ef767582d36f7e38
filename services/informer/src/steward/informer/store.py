"""The informer's cache of one resource type: raw JSON objects, parsed metadata, indexes,
and a bounded history of recent events to serve resumes from.

# Memory usage
Each object is kept once, as the API server's JSON bytes plus the few metadata fields
controllers key on. The history holds references to those same objects, at most
``history_size`` events per type; older events are forgotten, and a client resuming from
before them gets a fresh snapshot instead.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any

from steward.informer.selectors import Filter, Operator

ObjectKey = tuple[str, str]
"""(namespace, name); namespace is empty for cluster-scoped objects."""


@dataclass(frozen=True, slots=True)
class ResourceTypeName:
    """A group/version/resource triple (client-go's GroupVersionResource)."""

    group: str
    version: str
    resource: str

    def __str__(self) -> str:
        if self.group:
            return f"{self.resource}.{self.version}.{self.group}"
        return f"{self.resource}.{self.version}"


class EventKind(IntEnum):
    """What a store event means; values equal the wire's ``EventType``."""

    ADDED = 1
    MODIFIED = 2
    DELETED = 3
    BOOKMARK = 4
    INITIAL_EVENTS_END = 5
    REPLACED = 6


@dataclass(frozen=True, slots=True)
class OwnerRef:
    """A parsed ``metadata.ownerReferences`` entry."""

    api_version: str
    kind: str
    name: str
    uid: str
    controller: bool
    block_owner_deletion: bool


def parse_resource_version(text: str, what: str = "resource version") -> int:
    """Parse a resource version the way this informer compares them (a decimal integer).

    Raises:
        ValueError: ``text`` is not a non-negative decimal integer; the message quotes it.
    """
    if not text.isdigit() or len(text) > 20:
        raise ValueError(
            f"malformed {what} {text!r}: expected a resource version this informer sent "
            "(a non-negative decimal integer)"
        )
    return int(text)


class StoredObject:
    """One object: the API server's JSON bytes and the parsed metadata.

    Immutable once built; shared by the store, the history and subscribers' queues.
    """

    __slots__ = (
        "deletion_timestamp",
        "generation",
        "labels",
        "name",
        "namespace",
        "owner_references",
        "raw",
        "resource_version",
        "uid",
        "wire_added",
        "wire_meta",
        "wire_meta_bytes",
    )

    def __init__(self, raw: bytes, obj: dict[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        self.raw = raw
        self.namespace: str = meta.get("namespace") or ""
        self.name: str = meta.get("name") or ""
        self.uid: str = meta.get("uid") or ""
        self.resource_version: str = meta.get("resourceVersion") or ""
        self.generation: int = int(meta.get("generation") or 0)
        self.labels: dict[str, str] = meta.get("labels") or {}
        self.owner_references: tuple[OwnerRef, ...] = tuple(
            OwnerRef(
                api_version=ref.get("apiVersion", ""),
                kind=ref.get("kind", ""),
                name=ref.get("name", ""),
                uid=ref.get("uid", ""),
                controller=bool(ref.get("controller")),
                block_owner_deletion=bool(ref.get("blockOwnerDeletion")),
            )
            for ref in meta.get("ownerReferences") or ()
        )
        self.deletion_timestamp: str | None = meta.get("deletionTimestamp")
        self.wire_meta: Any = None
        """The wire form of the metadata, built once by whoever first needs it."""
        self.wire_meta_bytes: bytes | None = None
        """The encoded ``metadata`` field of an Event (see wire.py)."""
        self.wire_added: tuple[bytes, bytes] | None = None
        """(resource_type field, encoded ADDED event body) for snapshots (see wire.py)."""

    @property
    def key(self) -> ObjectKey:
        return (self.namespace, self.name)

    def __repr__(self) -> str:
        return f"StoredObject({self.namespace}/{self.name}@{self.resource_version})"


@dataclass(slots=True)
class StoreEvent:
    """One change applied to the store (or a marker), with the type's progress after it.

    ``rv`` is the type's resource version once this event is applied; for events a relist
    synthesises it stays at the version before the relist (see :meth:`Store.replace`).
    """

    kind: EventKind
    key: ObjectKey
    obj: StoredObject | None
    previous: StoredObject | None
    rv: int
    traceparent: str = ""
    tracestate: str = ""
    framed: bytes | None = field(default=None)
    """``wire`` framed with this event's own resource version (the fast lane, fanout.py)."""
    wire: bytes | None = field(default=None)
    """The encoded Event without its resource version (wire.event_body), built once, when
    the event enters the cache or by whoever first needs it."""


class History:
    """A bounded ring of a type's recent events, to serve resumes.

    ``floor`` is the resource version after which the history is complete: a client that
    saw everything up to ``rv >= floor`` can be served the events after ``rv`` from here.
    When the ring is full the oldest event is dropped and ``floor`` moves up to it.
    """

    def __init__(self, size: int) -> None:
        if size < 1:
            raise ValueError(f"history size must be at least 1, got {size}")
        self._events: deque[StoreEvent] = deque()
        self.size = size
        self.floor = 0

    def __len__(self) -> int:
        return len(self._events)

    def reset(self, floor: int) -> None:
        """Forget everything; the history is complete from ``floor`` on."""
        self._events.clear()
        self.floor = floor

    def append(self, event: StoreEvent) -> None:
        if len(self._events) >= self.size:
            dropped = self._events.popleft()
            self.floor = dropped.rv
        self._events.append(event)

    def since(self, rv: int, current: int) -> list[StoreEvent] | None:
        """The events after ``rv``, or None when they are not all held any more.

        ``current`` is the type's resource version now; an ``rv`` beyond it (from another
        informer, or from before an API server restore) cannot be served either.
        """
        if rv < self.floor or rv > current:
            return None
        if not self._events or self._events[-1].rv <= rv:
            return []
        # Events are in rv order; scan from the end (resumes are usually recent).
        result: list[StoreEvent] = []
        for event in reversed(self._events):
            if event.rv <= rv:
                break
            result.append(event)
        result.reverse()
        return result


class Store:
    """Objects of one resource type, indexed by namespace, owner UID and label.

    Not thread-safe: the informer mutates and reads it from its event loop only.
    """

    def __init__(self, history_size: int = 10_000) -> None:
        self._objects: dict[ObjectKey, StoredObject] = {}
        self._by_namespace: dict[str, set[ObjectKey]] = {}
        self._by_owner: dict[str, set[ObjectKey]] = {}
        self._by_label: dict[tuple[str, str], set[ObjectKey]] = {}
        self.history = History(history_size)
        self.rv = 0
        """The type's resource version: the last event or bookmark applied."""

    def __len__(self) -> int:
        return len(self._objects)

    def __iter__(self) -> Iterator[StoredObject]:
        return iter(self._objects.values())

    def get(self, key: ObjectKey) -> StoredObject | None:
        return self._objects.get(key)

    def keys(self) -> Iterable[ObjectKey]:
        return self._objects.keys()

    # Indexes -----------------------------------------------------------------------
    def _index(self, obj: StoredObject) -> None:
        key = obj.key
        self._by_namespace.setdefault(obj.namespace, set()).add(key)
        for ref in obj.owner_references:
            self._by_owner.setdefault(ref.uid, set()).add(key)
        for label in obj.labels.items():
            self._by_label.setdefault(label, set()).add(key)

    def _unindex(self, obj: StoredObject) -> None:
        key = obj.key
        _discard(self._by_namespace, obj.namespace, key)
        for ref in obj.owner_references:
            _discard(self._by_owner, ref.uid, key)
        for label in obj.labels.items():
            _discard(self._by_label, label, key)

    def by_owner(self, uid: str) -> list[StoredObject]:
        """The objects with an owner reference to ``uid``."""
        return [self._objects[k] for k in self._by_owner.get(uid, ())]

    def by_namespace(self, namespace: str) -> list[StoredObject]:
        return [self._objects[k] for k in self._by_namespace.get(namespace, ())]

    def by_label(self, key: str, value: str) -> list[StoredObject]:
        return [self._objects[k] for k in self._by_label.get((key, value), ())]

    def select(self, flt: Filter) -> list[StoredObject]:
        """The objects passing ``flt``, using the narrowest index that applies (unordered)."""
        candidates: Iterable[ObjectKey]
        name = next((v for f, v in flt.fields.equals if f == "metadata.name"), None)
        field_ns = next((v for f, v in flt.fields.equals if f == "metadata.namespace"), None)
        namespace = flt.namespace or field_ns
        if name is not None and namespace is not None:
            candidates = [(namespace, name)] if (namespace, name) in self._objects else []
        elif namespace is not None:
            candidates = self._by_namespace.get(namespace, ())
        else:
            candidates = self._objects.keys()
        for req in flt.labels.requirements:
            if req.operator is Operator.EQUALS:
                (value,) = req.values
                indexed = self._by_label.get((req.key, value), set())
                if len(indexed) < len(candidates):  # type: ignore[arg-type]
                    candidates = indexed
        objects = self._objects
        if flt.everything:
            return [objects[k] for k in candidates]
        result = []
        for key in candidates:
            obj = objects[key]
            if flt.matches(obj.namespace, obj.name, obj.labels):
                result.append(obj)
        return result

    # Changes -----------------------------------------------------------------------
    def apply(
        self,
        kind: EventKind,
        obj: StoredObject,
        rv: int,
        traceparent: str = "",
        tracestate: str = "",
    ) -> StoreEvent:
        """Apply one watch event and record it in the history.

        ADDED for a key already held, or MODIFIED for one not held, are applied as the
        upsert they mean (an ADDED over an existing object is reported as MODIFIED, a
        MODIFIED of an unknown object as ADDED). A DELETED of an unknown object is still
        reported, carrying the object the API server sent.
        """
        key = obj.key
        previous = self._objects.get(key)
        if kind is EventKind.DELETED:
            if previous is not None:
                self._unindex(previous)
                del self._objects[key]
        else:
            if previous is not None:
                self._unindex(previous)
                kind = EventKind.MODIFIED
            else:
                kind = EventKind.ADDED
            self._objects[key] = obj
            self._index(obj)
        self.rv = max(self.rv, rv)
        event = StoreEvent(kind, key, obj, previous, self.rv, traceparent, tracestate)
        self.history.append(event)
        return event

    def bookmark(self, rv: int) -> None:
        """Advance the type's resource version without a change."""
        self.rv = max(self.rv, rv)

    def replace(self, objects: Iterable[StoredObject], rv: int) -> list[StoreEvent]:
        """Replace the whole content with a fresh list taken at ``rv``.

        Returns the differences as events, in key order: DELETED for objects that are
        gone (carrying their last known state), ADDED for new ones, MODIFIED for changed
        ones (DELETED then ADDED when the UID changed, i.e. the object was re-created).
        They carry the type's resource version from *before* the relist, and the history
        is reset to start at ``rv``: a client that saw only part of them must not resume
        past them. Callers follow them with a bookmark at ``rv``.
        """
        old = self._objects
        before = self.rv
        self._objects = {}
        self._by_namespace.clear()
        self._by_owner.clear()
        self._by_label.clear()
        events: list[StoreEvent] = []
        for obj in objects:
            key = obj.key
            self._objects[key] = obj
            self._index(obj)
        for key in sorted(old.keys() | self._objects.keys()):
            was = old.get(key)
            now = self._objects.get(key)
            if now is None:
                assert was is not None
                events.append(StoreEvent(EventKind.DELETED, key, was, was, before))
            elif was is None:
                events.append(StoreEvent(EventKind.ADDED, key, now, None, before))
            elif was.uid != now.uid:
                events.append(StoreEvent(EventKind.DELETED, key, was, was, before))
                events.append(StoreEvent(EventKind.ADDED, key, now, None, before))
            elif was.resource_version != now.resource_version:
                events.append(StoreEvent(EventKind.MODIFIED, key, now, was, before))
        self.rv = rv
        self.history.reset(rv)
        return events


def _discard(index: dict[Any, set[ObjectKey]], value: Any, key: ObjectKey) -> None:
    keys = index.get(value)
    if keys is not None:
        keys.discard(key)
        if not keys:
            del index[value]
