"""The informer's cache of one resource type: raw JSON objects, parsed metadata, indexes,
and a bounded history of recent events to serve resumes from.

# Memory usage
Each object version is kept once, as the API server's JSON bytes (copied to a buffer of
their exact size: the encoder's own output keeps its whole growth capacity, several times
the JSON) plus the few metadata fields controllers key on, in slots. Strings many objects
share (namespaces, owners, label keys and values) are interned, and objects with the same
labels share one mapping of them. The indexes hold the objects themselves (no key tuples),
and a value held by a single object costs no set. The history holds references to those
same objects, at most ``history_size`` events per type; older events are forgotten, and a
client resuming from before them gets a fresh snapshot instead.

Objects keep no wire encoding: an event keeps its own (see wire.py), which shares the
object's JSON bytes and adds only the encoded metadata and a few bytes of framing, and
goes with the event when the history drops it. A snapshot encodes each object's metadata
anew, for the time it takes to send it.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, TypeAlias
from weakref import WeakValueDictionary

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


class Labels(dict[str, str]):
    """An object's labels, shared by every object that has the same ones: never mutate."""

    __slots__ = ("__weakref__",)


NO_LABELS = Labels()
"""The labels of every object without any."""

_label_sets: WeakValueDictionary[tuple[tuple[str, str], ...], Labels] = WeakValueDictionary()
"""Every distinct set of labels in use, by its items (an entry goes with its last user)."""


def shared_labels(labels: Any) -> Labels:
    """The shared :class:`Labels` equal to ``labels`` (a mapping of strings, or None).

    Raises:
        TypeError: ``labels`` is not a mapping of strings to strings.
    """
    if not labels:
        return NO_LABELS
    items = tuple(labels.items())
    shared = _label_sets.get(items)
    if shared is None:
        intern = sys.intern
        shared = Labels({intern(k): intern(v) for k, v in items})
        _label_sets[tuple(shared.items())] = shared
    return shared


def _interned(value: Any) -> str:
    return sys.intern(value) if type(value) is str else str(value or "")


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
        "digests",
        "finalizers",
        "generation",
        "labels",
        "name",
        "namespace",
        "owner_references",
        "raw",
        "resource_version",
        "uid",
    )

    def __init__(self, raw: bytes, obj: Mapping[str, Any]) -> None:
        meta = obj.get("metadata") or {}
        # An exact-size copy: orjson's output keeps its buffer's growth capacity (a 1 KB
        # object holds 16 KB), and this is the one copy of the object kept.
        self.raw: bytes = bytes(memoryview(raw))
        self.namespace: str = _interned(meta.get("namespace"))
        self.name: str = meta.get("name") or ""
        self.uid: str = meta.get("uid") or ""
        self.resource_version: str = meta.get("resourceVersion") or ""
        self.generation: int = int(meta.get("generation") or 0)
        self.labels: Mapping[str, str] = shared_labels(meta.get("labels"))
        refs = meta.get("ownerReferences")
        self.owner_references: tuple[OwnerRef, ...] = (
            tuple(
                OwnerRef(
                    api_version=_interned(ref.get("apiVersion")),
                    kind=_interned(ref.get("kind")),
                    name=_interned(ref.get("name")),
                    uid=_interned(ref.get("uid")),
                    controller=bool(ref.get("controller")),
                    block_owner_deletion=bool(ref.get("blockOwnerDeletion")),
                )
                for ref in refs
            )
            if refs
            else ()
        )
        self.deletion_timestamp: str | None = meta.get("deletionTimestamp")
        self.digests: tuple[Any, ...] | None = None
        """Hashes of this object's projected forms, by projection (projections.py): what
        tells a projected subscriber that a change touched nothing it reads."""
        finalizers = meta.get("finalizers")
        self.finalizers: tuple[str, ...] = (
            tuple(_interned(f) for f in finalizers) if finalizers else ()
        )

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
    framed: tuple[bytes, ...] | None = field(default=None)
    """``wire`` framed with this event's own resource version (the fast lane, fanout.py),
    built by the first subscriber that needs it; it shares ``wire``'s chunks but the first
    and the last."""
    wire: tuple[bytes, ...] | None = field(default=None)
    """The encoded Event without its resource version (wire.event_parts), built once, when
    the event enters the cache or by whoever first needs it; its object head serves the
    other encodings of this event too (wire.event_head)."""
    relisted: bool = False
    """Made by a relist (:meth:`Store.replace`): delivered even to a projected subscriber
    whose projection did not change, so that a relist repairs whatever was missed."""
    decoded: Any = None
    """The object as a dict, while the reflector that decoded it publishes the event (the
    projections are taken from it); None once published."""
    views: dict[Any, tuple[bytes, ...]] | None = None
    """The encodings of this event for projected subscribers, by projection, built once
    for all subscribers with that projection (projections.py)."""


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


_Bucket: TypeAlias = "StoredObject | set[StoredObject]"
"""An index entry: the one object with that value, or the set of them when several."""

_EMPTY: dict[str, Any] = {}


class Store:
    """Objects of one resource type, indexed by namespace, owner UID and label.

    The owner index, and the index of each label key, is built the first time a lookup
    or a selector needs it, and kept up to date from then on: an index nobody uses costs
    nothing.

    Not thread-safe: the informer mutates and reads it from its event loop only.
    """

    def __init__(self, history_size: int = 10_000) -> None:
        self._objects: dict[str, dict[str, StoredObject]] = {}
        """Namespace, then name (the namespace index too)."""
        self._count = 0
        self._by_owner: dict[str, _Bucket] | None = None
        """Owner UID to objects; None until first needed."""
        self._by_label: dict[str, dict[str, _Bucket]] = {}
        """Label key, then value, to objects; only for the keys looked up so far."""
        self.history = History(history_size)
        self.rv = 0
        """The type's resource version: the last event or bookmark applied."""

    def __len__(self) -> int:
        return self._count

    def __iter__(self) -> Iterator[StoredObject]:
        for names in self._objects.values():
            yield from names.values()

    def get(self, key: ObjectKey) -> StoredObject | None:
        return self._objects.get(key[0], _EMPTY).get(key[1])

    def keys(self) -> Iterable[ObjectKey]:
        return [(ns, name) for ns, names in self._objects.items() for name in names]

    # Indexes -----------------------------------------------------------------------
    def _put(self, obj: StoredObject) -> StoredObject | None:
        """Hold and index ``obj``; the object it replaced, if any (unindexed)."""
        names = self._objects.get(obj.namespace)
        if names is None:
            names = self._objects[obj.namespace] = {}
        previous = names.get(obj.name)
        if previous is not None:
            self._unindex(previous)
        else:
            self._count += 1
        names[obj.name] = obj
        self._index(obj)
        return previous

    def _index(self, obj: StoredObject, change: _Change | None = None) -> None:
        """Enter ``obj`` in the indexes built so far (``change`` ``_remove``: take it out)."""
        change = change or _add
        by_owner = self._by_owner
        if by_owner is not None:
            for ref in obj.owner_references:
                change(by_owner, ref.uid, obj)
        by_label = self._by_label
        if by_label:
            for key, value in obj.labels.items():
                values = by_label.get(key)
                if values is not None:
                    change(values, value, obj)

    def _drop(self, obj: StoredObject) -> None:
        names = self._objects[obj.namespace]
        del names[obj.name]
        if not names:
            del self._objects[obj.namespace]
        self._count -= 1
        self._unindex(obj)

    def _unindex(self, obj: StoredObject) -> None:
        self._index(obj, _remove)

    def _owner_index(self) -> dict[str, _Bucket]:
        by_owner = self._by_owner
        if by_owner is None:
            by_owner = self._by_owner = {}
            for obj in self:
                for ref in obj.owner_references:
                    _add(by_owner, ref.uid, obj)
        return by_owner

    def _label_index(self, key: str) -> dict[str, _Bucket]:
        values = self._by_label.get(key)
        if values is None:
            values = self._by_label[key] = {}
            for obj in self:
                value = obj.labels.get(key)
                if value is not None:
                    _add(values, value, obj)
        return values

    def by_owner(self, uid: str) -> list[StoredObject]:
        """The objects with an owner reference to ``uid``."""
        return list(_members(self._owner_index().get(uid)))

    def by_namespace(self, namespace: str) -> list[StoredObject]:
        return list(self._objects.get(namespace, _EMPTY).values())

    def by_label(self, key: str, value: str) -> list[StoredObject]:
        return list(_members(self._label_index(key).get(value)))

    def select(self, flt: Filter) -> list[StoredObject]:
        """The objects passing ``flt``, using the narrowest index that applies (unordered)."""
        candidates: Iterable[StoredObject]
        name = next((v for f, v in flt.fields.equals if f == "metadata.name"), None)
        field_ns = next((v for f, v in flt.fields.equals if f == "metadata.namespace"), None)
        namespace = flt.namespace or field_ns
        if name is not None and namespace is not None:
            held = self.get((namespace, name))
            candidates = [held] if held is not None else []
        elif namespace is not None:
            candidates = self._objects.get(namespace, _EMPTY).values()
        else:
            candidates = self
        count = len(candidates)
        for req in flt.labels.requirements:
            if req.operator is Operator.EQUALS:
                (value,) = req.values
                indexed = _members(self._label_index(req.key).get(value))
                if len(indexed) < count:
                    candidates, count = indexed, len(indexed)
        if flt.everything:
            return list(candidates)
        if flt.owner is not None:
            admits = flt.admits
            return [
                obj
                for obj in candidates
                if admits(obj.namespace, obj.name, obj.labels, obj.owner_references)
            ]
        matches = flt.matches
        return [obj for obj in candidates if matches(obj.namespace, obj.name, obj.labels)]

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
        if kind is EventKind.DELETED:
            previous = self.get(key)
            if previous is not None:
                self._drop(previous)
        else:
            previous = self._put(obj)
            kind = EventKind.ADDED if previous is None else EventKind.MODIFIED
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
        self._count = 0
        if self._by_owner is not None:
            self._by_owner = {}
        self._by_label = {key: {} for key in self._by_label}
        events: list[StoreEvent] = []
        for obj in objects:
            self._put(obj)
        new = self._objects
        keys = {(ns, name) for ns, names in old.items() for name in names}
        keys.update((ns, name) for ns, names in new.items() for name in names)
        for key in sorted(keys):
            was = old.get(key[0], _EMPTY).get(key[1])
            now = new.get(key[0], _EMPTY).get(key[1])
            if now is None:
                assert was is not None
                events.append(StoreEvent(EventKind.DELETED, key, was, was, before, relisted=True))
            elif was is None:
                events.append(StoreEvent(EventKind.ADDED, key, now, None, before, relisted=True))
            elif was.uid != now.uid:
                events.append(StoreEvent(EventKind.DELETED, key, was, was, before, relisted=True))
                events.append(StoreEvent(EventKind.ADDED, key, now, None, before, relisted=True))
            elif was.resource_version != now.resource_version:
                events.append(StoreEvent(EventKind.MODIFIED, key, now, was, before, relisted=True))
        self.rv = rv
        self.history.reset(rv)
        return events


_Change: TypeAlias = "Callable[[dict[str, _Bucket], str, StoredObject], None]"


def _add(index: dict[str, _Bucket], value: str, obj: StoredObject) -> None:
    held = index.get(value)
    if held is None:
        index[value] = obj
    elif type(held) is set:
        held.add(obj)
    else:
        index[value] = {held, obj}  # type: ignore[arg-type]


def _remove(index: dict[str, _Bucket], value: str, obj: StoredObject) -> None:
    held = index.get(value)
    if held is obj:
        del index[value]
    elif type(held) is set:
        held.discard(obj)
        if len(held) == 1:
            index[value] = next(iter(held))


def _members(held: _Bucket | None) -> tuple[StoredObject, ...] | set[StoredObject]:
    if held is None:
        return ()
    if type(held) is set:
        return held
    return (held,)  # type: ignore[return-value]
