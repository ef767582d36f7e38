"""A controller's local mirror of the objects it watches, fed by the informer's Watch stream.

:class:`Mirror` keeps every object of its resource types (as the informer sent it: parsed
metadata plus the API server's JSON, decoded lazily) with indexes by namespace, by owner
UID and by any index the controller declares, and tells registered handlers what changed.

# Recovery
The stream is reopened with exponential backoff (800 ms doubling to 30 s, reset once a
stream delivers) whenever it ends or fails: the informer restarted, the network broke,
the informer said UNAVAILABLE. It resumes from the last resource version seen per type,
so nothing is missed and nothing is delivered twice. When the informer cannot serve the
resume it sends REPLACED and a fresh snapshot; the mirror then reports as deleted every
object it held of that type that the snapshot no longer has, and as modified every one
whose resource version changed. Handlers therefore see a consistent story whatever
happens to the connection.

# Catching up on demand
:meth:`Mirror.catch_up` is a read barrier: it reopens the stream (resuming, so nothing is
sent twice) and returns once every type's INITIAL_EVENTS_END has arrived on the new
stream, that is once the mirror holds everything the informer held when it was called.
A standby promoted to active calls it before its first reconcile: the events it was fed
while standing by may still sit in buffers between the informer and it, and acting on a
cache that lacks the last objects its predecessor created would create them again.

A request the informer refuses for good (NOT_FOUND for an unknown type, INVALID_ARGUMENT
for a bad selector, PERMISSION_DENIED) is not retried: :meth:`Mirror.run` raises
:class:`MirrorError` with the informer's message, unless the mirror's :attr:`Mirror.refused`
hook says the types have changed since (a type that was served a moment ago is gone).

# Types that change
A controller over every type the API server serves (the garbage collector) changes the
mirror's types while it runs: :meth:`Mirror.retarget` sets them and reopens the stream,
every type that stays resuming where it was (nothing sent twice, nothing missed) and each
new one starting with its snapshot. The objects of a type that is dropped leave the mirror
without DELETED changes: the type is no longer watched, which says nothing about them.
A mirror may start with no type at all; it opens its stream once it has one.

# Read your own writes
A controller writes to the API server and then sees its write come back through the
informer a little later; a reconcile in between would read the mirror's older copy and
act on it (count a Job's pods from a status that does not yet record them, and create
them again). So the mirror is told of every write its controller's API client completed
(:meth:`Mirror.written`, wired by the runtime) and remembers, per object, the version
that write produced and the versions it replaced. While a reconcile runs
(:func:`guard_reads`), any read that would return a copy older than the controller's own
last write raises :class:`StaleRead`; the runtime ends that reconcile and queues the key
again as soon as the mirror shows the write (:meth:`Mirror.when_current`). Resource versions are
compared as the integers kube-apiserver makes them; a version that is not an integer is
stale only when it is one a write replaced. The record of an object is dropped as soon as
the mirror shows that write or a later version, or the object's deletion.

# Memory usage
One :class:`MirrorObject` per object (the JSON bytes, or the projection the controller
asked for, and the parsed metadata in the compact, shared form of
:mod:`steward.runtime.meta`; the decoded dict only once someone asked for it), plus
index entries. Nothing of an event's protobuf message is kept: it lives in the memory of
its whole response, which would keep every object's JSON twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable, Iterable, Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field
from enum import Enum
from typing import Any

import grpc
import orjson

from steward.deepjson import loads_deep
from steward.projection import Node, Projection
from steward.runtime.meta import Meta, OwnerRef
from steward.runtime.resources import Resource
from steward.runtime.subscriptions import EVERYTHING, TypeSubscription, guard, readable_tree
from steward.runtime.workqueue import TraceContext
from steward.v1 import informer_pb2 as pb
from steward.v1 import informer_pb2_grpc as pb_grpc

log = logging.getLogger(__name__)

ObjectKey = tuple[str, str]
"""(namespace, name); namespace is empty for cluster-scoped objects."""


_PERMANENT = {
    grpc.StatusCode.NOT_FOUND,
    grpc.StatusCode.INVALID_ARGUMENT,
    grpc.StatusCode.PERMISSION_DENIED,
    grpc.StatusCode.UNAUTHENTICATED,
    grpc.StatusCode.UNIMPLEMENTED,
}


def api_path(rtype: Resource, namespace: str = "", name: str = "", subresource: str = "") -> str:
    """The API server's path of a collection (no ``name``) or of one object, e.g.
    ``/apis/batch/v1/namespaces/ns/jobs/pi/status`` (:meth:`Resource.path`)."""
    return rtype.path(namespace, name, subresource)


class MirrorError(Exception):
    """The informer refused the watch for good (bad type, selector or permissions)."""

    def __init__(self, code: grpc.StatusCode, message: str) -> None:
        super().__init__(f"informer refused the watch ({code.name}): {message}")
        self.code = code


class StaleRead(Exception):
    """A read during a reconcile found the mirror's copy older than this controller's own
    last write of that object (see the module docs, Read your own writes)."""

    def __init__(self, obj: MirrorObject, written: str) -> None:
        super().__init__(
            f"the mirror's copy of {obj.type} {obj.namespace}/{obj.name} "
            f"(version {obj.resource_version}) is older than this controller's write "
            f"(version {written})"
        )
        self.obj = obj
        self.written = written


_guarded: ContextVar[Mirror | None] = ContextVar("steward_mirror_guarded", default=None)


@contextlib.contextmanager
def guard_reads(mirror: Mirror) -> Iterator[None]:
    """While the body runs (in this task), reads of ``mirror`` raise :class:`StaleRead`
    rather than return a copy older than the controller's own writes. The runtime runs
    every reconcile inside it."""
    token = _guarded.set(mirror)
    try:
        yield
    finally:
        _guarded.reset(token)


def _as_int(version: str) -> int | None:
    return int(version) if version.isdigit() else None


@dataclass
class _Written:
    """What this controller's writes did to one object."""

    version: str
    """The version the last write produced."""
    replaced: set[str] = field(default_factory=set)
    """Versions the writes replaced (for versions that are not integers)."""
    waiters: list[Callable[[], None]] = field(default_factory=list)
    """Called once the mirror shows the write (see :meth:`Mirror.when_current`)."""
    answer: dict[str, Any] | None = None
    """For a projected type: the object the last write produced, as the API server
    answered it. A later copy that projects to the same is what the controller would see
    of the write (the informer withholds the write's own event then)."""

    def older(self, version: str) -> bool:
        ours, theirs = _as_int(self.version), _as_int(version)
        if ours is not None and theirs is not None:
            return theirs < ours
        return version in self.replaced


def parse_path(path: str) -> tuple[Resource, str, str] | None:
    """``(type, namespace, name)`` of an API path (name empty for a collection), or None
    when it is not a resource path."""
    parts = path.split("?", 1)[0].strip("/").split("/")
    if len(parts) >= 3 and parts[0] == "api":
        group, version, rest = "", parts[1], parts[2:]
    elif len(parts) >= 4 and parts[0] == "apis":
        group, version, rest = parts[1], parts[2], parts[3:]
    else:
        return None
    namespace = ""
    if rest[0] == "namespaces" and len(rest) >= 3:
        namespace, rest = rest[1], rest[2:]
    return Resource(group, version, rest[0]), namespace, rest[1] if len(rest) > 1 else ""


_View = tuple[Projection, dict[str, Node]]
"""A projected type's projection and the tree of what may be read of its objects."""


class MirrorObject:
    """One mirrored object: parsed metadata, the API server's JSON (or, for a projected
    type, the informer's projection of it), decoded on demand."""

    __slots__ = ("_decoded", "meta", "raw", "type", "view")

    def __init__(
        self,
        rtype: Resource,
        meta: pb.ObjectMeta | Meta,
        raw: bytes,
        view: _View | None = None,
    ) -> None:
        self.type = rtype
        self.meta = Meta.of(meta)
        """The parsed metadata (:class:`~steward.runtime.meta.Meta`, read like the
        event's ``ObjectMeta``)."""
        self.raw = raw
        self.view = view
        """The projection the object came in, None for a whole object."""
        self._decoded: dict[str, Any] | None = None

    @property
    def key(self) -> ObjectKey:
        return (self.meta.namespace, self.meta.name)

    @property
    def namespace(self) -> str:
        return self.meta.namespace

    @property
    def name(self) -> str:
        return self.meta.name

    @property
    def resource_version(self) -> str:
        return self.meta.resource_version

    @property
    def object(self) -> dict[str, Any]:
        """The object as a dict (decoded once; treat it as read-only). Objects nested
        deeper than orjson decodes (custom resources may nest thousands of levels) are
        decoded by :func:`steward.deepjson.loads_deep` instead."""
        if self._decoded is None:
            try:
                decoded = orjson.loads(self.raw)
            except orjson.JSONDecodeError:
                decoded = loads_deep(self.raw)
            view = self.view
            if view is not None:
                # The informer leaves out what the parsed metadata carries already.
                meta = self.meta
                metadata = decoded.setdefault("metadata", {})
                metadata["name"] = meta.name
                if meta.namespace:
                    metadata["namespace"] = meta.namespace
                metadata["uid"] = meta.uid
                metadata["resourceVersion"] = meta.resource_version
                decoded = guard(decoded, view[1], view[0])
            self._decoded = decoded
        return self._decoded

    def controller_owner(self) -> OwnerRef | None:
        """The owner reference with ``controller: true``, if any."""
        for ref in self.meta.owner_references:
            if ref.controller:
                return ref
        return None

    def __repr__(self) -> str:
        return f"MirrorObject({self.meta.namespace}/{self.meta.name}@{self.resource_version})"


class ChangeKind(Enum):
    """What happened to an object in the mirror."""

    ADDED = "added"
    MODIFIED = "modified"
    DELETED = "deleted"


@dataclass(frozen=True, slots=True)
class Change:
    """One change to the mirror, as handed to handlers."""

    kind: ChangeKind
    obj: MirrorObject
    """The new state (for DELETED, the last known state)."""
    old: MirrorObject | None
    """The previous state for MODIFIED."""
    trace: TraceContext | None
    """The trace context the informer sent with the event (None for synthesised changes)."""


Handler = Callable[[Change], None]
"""Called on the event loop for every change, in order; must not block."""

Indexer = Callable[[MirrorObject], Iterable[str]]
"""Index values of an object (e.g. its node name); the object is found by any of them."""


@dataclass
class _TypeState:
    objects: dict[ObjectKey, MirrorObject] = field(default_factory=dict)
    resource_version: str = ""
    synced: bool = False
    replacing: set[ObjectKey] | None = None
    """Keys seen in a fresh snapshot after REPLACED, until its INITIAL_EVENTS_END."""
    indexes: dict[str, dict[str, set[ObjectKey]]] = field(default_factory=dict)
    written: dict[ObjectKey, _Written] = field(default_factory=dict)
    """This controller's writes the mirror has not shown yet, by object."""


@dataclass
class MirrorOptions:
    """How a mirror watches. Every field has a working default."""

    namespace: str = ""
    """Only this namespace; empty (the default) for all."""
    label_selector: str = ""
    """Kubernetes label selector; empty (the default) for everything."""
    field_selector: str = ""
    """Field selector (metadata.name, metadata.namespace); empty for everything."""
    subscriber: str = ""
    """Name the informer shows for this subscriber (e.g. the controller's name)."""
    max_batch_size: int = 0
    """Events per message; 0 (the default) for the informer's default."""
    initial_backoff: float = 0.8
    """First reconnection delay in seconds. Defaults to 0.8."""
    max_backoff: float = 30.0
    """Longest reconnection delay in seconds. Defaults to 30."""


class Mirror:
    """The local mirror of some resource types, kept by one Watch stream.

    ``run()`` blocks until cancelled (or raises :class:`MirrorError`); read methods are
    safe at any time and answer from what has been received so far.
    """

    BUILTIN_INDEXES = ("namespace", "owner")
    """Indexes every type has: by namespace, and by the UID of each owner."""

    def __init__(
        self,
        channel: grpc.aio.Channel,
        types: Iterable[Resource],
        options: MirrorOptions | None = None,
        indexers: dict[str, Indexer] | None = None,
        subscriptions: Mapping[Resource, TypeSubscription] | None = None,
    ) -> None:
        self._stub = pb_grpc.InformerServiceStub(channel)
        self._types = list(dict.fromkeys(types))
        self._subscriptions = {t: (subscriptions or {}).get(t, EVERYTHING) for t in self._types}
        """What is read of each type (steward.runtime.subscriptions): its WatchTarget."""
        self._views: dict[Resource, _View | None] = {}
        for t, sub in self._subscriptions.items():
            projection = sub.projection()
            self._views[t] = (projection, readable_tree(projection)) if projection else None
        self._by_wire = {(t.group, t.version, t.plural): t for t in self._types}
        self.options = options or MirrorOptions()
        self._indexers: dict[str, Indexer] = {
            "namespace": lambda o: (o.namespace,),
            "owner": lambda o: tuple(r.uid for r in o.meta.owner_references),
        }
        for name, fn in (indexers or {}).items():
            if name in self._indexers:
                raise ValueError(f"index {name!r} is built in")
            self._indexers[name] = fn
        self._state = {k: _TypeState() for k in self._types}
        self._handlers: list[Handler] = []
        self._synced = asyncio.Event()
        self.reconnects = 0
        """How often the stream was reopened (for metrics and tests)."""
        self._call: grpc.aio.UnaryStreamCall[pb.WatchRequest, pb.WatchResponse] | None = None
        self._reopen = False
        self._barriers: list[asyncio.Future[None]] = []
        """Callers of :meth:`catch_up` waiting for the next stream to reach the present."""
        self._stream_barriers: list[asyncio.Future[None]] = []
        """Those the current stream answers once it has sent every INITIAL_EVENTS_END."""
        self._stream_ended: set[Resource] = set()
        self._has_types = asyncio.Event()
        if self._types:
            self._has_types.set()
        self.refused: Callable[[MirrorError], Awaitable[bool]] | None = None
        """Asked when the informer refuses the watch for good: True when the mirror's
        types have been changed since (:meth:`retarget`), so the watch is tried again
        (after the backoff); False (or no hook) ends :meth:`run` with the error."""

    # Reading ----------------------------------------------------------------------------
    def get(self, rtype: Resource, namespace: str, name: str) -> MirrorObject | None:
        """The object, or None if the mirror does not hold it. During a reconcile, raises
        :class:`StaleRead` for a copy older than the controller's own write."""
        state = self._type(rtype)
        obj = state.objects.get((namespace, name))
        if obj is not None and state.written and _guarded.get() is self:
            self._check(state, obj)
        return obj

    def objects(self, rtype: Resource, namespace: str | None = None) -> list[MirrorObject]:
        """Every object of the type, or of one namespace of it."""
        state = self._type(rtype)
        if namespace is None:
            found = list(state.objects.values())
            if state.written and _guarded.get() is self:
                for obj in found:
                    self._check(state, obj)
            return found
        return self.by_index(rtype, "namespace", namespace)

    def by_index(self, rtype: Resource, index: str, value: str) -> list[MirrorObject]:
        """Objects whose ``index`` yields ``value`` (KeyError for an unknown index)."""
        if index not in self._indexers:
            raise KeyError(f"no index {index!r}; declared: {sorted(self._indexers)}")
        state = self._type(rtype)
        keys = state.indexes.get(index, {}).get(value, ())
        found = [state.objects[k] for k in keys]
        if state.written and _guarded.get() is self:
            for obj in found:
                self._check(state, obj)
        return found

    def _check(self, state: _TypeState, obj: MirrorObject) -> None:
        record = state.written.get(obj.key)
        if record is not None and record.older(obj.resource_version):
            raise StaleRead(obj, record.version)

    def is_stale(self, obj: MirrorObject) -> bool:
        """Whether ``obj`` (a copy this mirror holds) is older than the controller's own
        last write of it."""
        state = self._state.get(obj.type)
        record = state.written.get(obj.key) if state is not None else None
        return record is not None and record.older(obj.resource_version)

    def written(self, method: str, path: str, body: object, answer: dict[str, Any]) -> None:
        """Record a write the controller's API client completed (a
        :data:`~steward.kube.WriteObserver`): ``answer`` is the object as the API server
        stored it. Writes of types this mirror does not watch are ignored."""
        parsed = parse_path(path)
        if parsed is None:
            return
        rtype, namespace, name = parsed
        state = self._state.get(rtype)
        meta = answer.get("metadata") if isinstance(answer, dict) else None
        if state is None or not isinstance(meta, dict) or answer.get("kind") == "Status":
            return
        version = str(meta.get("resourceVersion") or "")
        name = str(meta.get("name") or name)
        if not version or not name:
            return
        key = (str(meta.get("namespace") or namespace), name)
        record = state.written.get(key)
        if record is None:
            record = state.written[key] = _Written(version)
        elif not record.older(version):
            record.version = version
        sent = body.get("metadata") if isinstance(body, dict) else None
        if isinstance(sent, dict) and sent.get("resourceVersion"):
            record.replaced.add(str(sent["resourceVersion"]))
        held = state.objects.get(key)
        if held is not None and held.resource_version != version:
            record.replaced.add(held.resource_version)
        record.replaced.discard(record.version)
        if held is not None and not record.older(held.resource_version):
            self._caught_up(state, key)  # the mirror already shows this write (or later)
        elif held is not None and held.view is not None:
            if _same_view(held, answer):
                # The write changed nothing this controller reads: the informer will send
                # nothing of it, and the copy held is already what the controller sees.
                self._caught_up(state, key)
            else:
                record.answer = answer  # an earlier version may come that projects as it

    def when_current(self, obj: MirrorObject, callback: Callable[[], None]) -> None:
        """Call ``callback`` (on the event loop, once) as soon as the mirror shows the
        controller's own last write of ``obj``, or the object's deletion; at once if it
        already does. A reconcile that met :class:`StaleRead` is queued again this way."""
        state = self._state.get(obj.type)
        record = state.written.get(obj.key) if state is not None else None
        if record is None:
            callback()
        else:
            record.waiters.append(callback)

    def _caught_up(self, state: _TypeState, key: ObjectKey) -> None:
        record = state.written.pop(key, None)
        for waiter in record.waiters if record is not None else ():
            try:
                waiter()
            except Exception:  # a waiter's bug must not stop the mirror
                log.exception("mirror: a waiter for %s/%s failed", *key)

    def resource_version(self, rtype: Resource) -> str:
        """The last resource version seen of a type (the resume point)."""
        return self._type(rtype).resource_version

    def watched_types(self) -> list[Resource]:
        """The resource types this mirror watches."""
        return list(self._types)

    def retarget(
        self, subscriptions: Mapping[Resource, TypeSubscription]
    ) -> tuple[list[Resource], list[Resource]]:
        """Watch exactly these types from now on, each with its subscription (see the
        module docs): returns the types added and those dropped. A type that stays keeps
        its objects and resumes; a stream that is open is reopened at once when anything
        changed. Types are matched as :class:`Resource` values are (group, version, plural),
        so a type's kind and scope come from the mapping for new types only."""
        wanted = list(dict.fromkeys(subscriptions))
        added = [t for t in wanted if t not in self._state]
        dropped = [t for t in self._types if t not in subscriptions]
        if not added and not dropped:
            return [], []
        for rtype in dropped:
            state = self._state.pop(rtype)
            for key in list(state.written):
                self._caught_up(state, key)
            del self._subscriptions[rtype]
            del self._views[rtype]
            self._stream_ended.discard(rtype)
        for rtype in added:
            sub = subscriptions[rtype]
            self._subscriptions[rtype] = sub
            projection = sub.projection()
            self._views[rtype] = (projection, readable_tree(projection)) if projection else None
            self._state[rtype] = _TypeState()
        self._types = [t for t in self._types if t in subscriptions] + added
        self._by_wire = {(t.group, t.version, t.plural): t for t in self._types}
        if self._types:
            self._has_types.set()
        else:
            self._has_types.clear()
        call = self._call
        if call is not None and not call.done():
            self._reopen = True
            call.cancel()
        return added, dropped

    def subscription(self, rtype: Resource) -> TypeSubscription:
        """What the mirror reads of a type (its WatchTarget's filters and projection)."""
        self._type(rtype)
        return self._subscriptions[rtype]

    def synced(self, rtype: Resource) -> bool:
        """True once the type's initial snapshot has arrived."""
        return self._type(rtype).synced

    def has_synced(self) -> bool:
        """True once every type's initial snapshot has arrived (for a mirror whose types
        change, once every type it had at first did: a type added later does not make it
        unsynced again; :meth:`synced` tells of one type)."""
        return self._synced.is_set()

    async def wait_synced(self) -> None:
        """Wait until every type's initial snapshot has arrived."""
        await self._synced.wait()

    async def catch_up(self) -> None:
        """Wait until the mirror holds everything the informer holds now (see the module
        docs); the wait spans reconnections, so an informer that is down delays it."""
        done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._barriers.append(done)
        call = self._call
        if call is not None and not call.done():
            self._reopen = True
            call.cancel()
        try:
            await done
        finally:
            for waiting in (self._barriers, self._stream_barriers):
                if done in waiting:
                    waiting.remove(done)

    def add_handler(self, handler: Handler) -> None:
        """Call ``handler`` for every change from now on (after the objects already held
        are replayed to it as ADDED, so it never misses one)."""
        self._handlers.append(handler)
        for state in self._state.values():
            for obj in list(state.objects.values()):
                handler(Change(ChangeKind.ADDED, obj, None, None))

    def _type(self, rtype: Resource) -> _TypeState:
        try:
            return self._state[rtype]
        except KeyError:
            raise KeyError(f"the mirror does not watch {rtype}") from None

    # Running ----------------------------------------------------------------------------
    async def run(self) -> None:
        """Watch until cancelled, reconnecting and resuming as the module docs say."""
        delay = self.options.initial_backoff
        while True:
            await self._has_types.wait()
            delivered = False
            for state in self._state.values():
                # A snapshot cut off midway is not a complete picture: never infer
                # deletions from it (the next REPLACED starts a new one).
                state.replacing = None
            # Barriers not answered by the last stream (it ended early) wait for this one.
            self._stream_barriers += self._barriers
            self._barriers = []
            self._stream_ended = set()
            self._reopen = False
            call = self._call = self._stub.Watch(self._request())
            try:
                async for response in call:
                    delivered = True
                    self._apply(response.events)
                log.info("informer ended the watch stream; reconnecting")
            except asyncio.CancelledError:
                task = asyncio.current_task()
                if not self._reopen or (task is not None and task.cancelling()):
                    raise
                # catch_up() ended this stream to resume at once on a new one.
                self.reconnects += 1
                continue
            except grpc.aio.AioRpcError as err:
                if err.code() in _PERMANENT:
                    error = MirrorError(err.code(), err.details() or "")
                    if self.refused is None or not await self.refused(error):
                        raise error from None
                    log.info("watch refused (%s); the types changed, watching again", error)
                log.warning(
                    "watch stream failed (%s: %s); reconnecting in %.1fs",
                    err.code().name,
                    err.details(),
                    delay,
                )
            finally:
                self._call = None
                # What this stream did not answer (it ended early) waits for the next one.
                self._barriers += self._stream_barriers
                self._stream_barriers = []
            if delivered:
                delay = self.options.initial_backoff
            self.reconnects += 1
            await asyncio.sleep(delay)
            delay = min(delay * 2, self.options.max_backoff)

    def _request(self) -> pb.WatchRequest:
        o = self.options
        return pb.WatchRequest(
            targets=[
                self._subscriptions[t].target(t, self._state[t].resource_version)
                for t in self._types
            ],
            namespace=o.namespace,
            label_selector=o.label_selector,
            field_selector=o.field_selector,
            subscriber=o.subscriber,
            max_batch_size=o.max_batch_size,
        )

    def _apply(self, events: Iterable[pb.Event]) -> None:
        for event in events:
            wire = event.resource_type
            key = self._by_wire.get((wire.group, wire.version, wire.resource))
            if key is None:
                continue
            state = self._state[key]
            kind = event.type
            if kind == pb.EVENT_TYPE_REPLACED:
                state.replacing = set()
            elif kind == pb.EVENT_TYPE_INITIAL_EVENTS_END:
                if state.replacing is not None:
                    self._finish_replace(key, state, state.replacing)
                    state.replacing = None
                state.synced = True
                if all(s.synced for s in self._state.values()):
                    self._synced.set()
                self._stream_ended.add(key)
                if self._stream_barriers and len(self._stream_ended) == len(self._state):
                    for done in self._stream_barriers:
                        if not done.done():
                            done.set_result(None)
                    self._stream_barriers = []
            elif kind in (pb.EVENT_TYPE_ADDED, pb.EVENT_TYPE_MODIFIED):
                obj = MirrorObject(key, event.metadata, event.object, self._views[key])
                if state.replacing is not None:
                    state.replacing.add(obj.key)
                self._upsert(state, obj, event)
            elif kind == pb.EVENT_TYPE_DELETED:
                obj = MirrorObject(key, event.metadata, event.object, self._views[key])
                gone = state.objects.get(obj.key)
                if gone is not None:
                    self._unindex(state, gone)
                    del state.objects[obj.key]
                self._caught_up(state, obj.key)
                self._emit(Change(ChangeKind.DELETED, obj, None, _trace(event)))
            if event.resource_version:
                state.resource_version = event.resource_version

    def _upsert(self, state: _TypeState, obj: MirrorObject, event: pb.Event) -> None:
        old = state.objects.get(obj.key)
        if old is not None:
            if old.resource_version == obj.resource_version:
                return  # the same state again (a snapshot after REPLACED): nothing changed
            self._unindex(state, old)
        state.objects[obj.key] = obj
        self._index(state, obj)
        record = state.written.get(obj.key)
        if record is not None and (
            not record.older(obj.resource_version)
            # A version between the controller's writes that projects as the last one
            # does: the informer withholds the last, which changes nothing it would show.
            or (
                obj.view is not None
                and record.answer is not None
                and _same_view(obj, record.answer)
            )
        ):
            self._caught_up(state, obj.key)  # the mirror caught up with our write
        kind = ChangeKind.ADDED if old is None else ChangeKind.MODIFIED
        self._emit(Change(kind, obj, old, _trace(event)))

    def _finish_replace(self, key: Resource, state: _TypeState, seen: set[ObjectKey]) -> None:
        for obj_key in [k for k in state.objects if k not in seen]:
            gone = state.objects.pop(obj_key)
            self._unindex(state, gone)
            self._caught_up(state, obj_key)
            self._emit(Change(ChangeKind.DELETED, gone, None, None))

    def _index(self, state: _TypeState, obj: MirrorObject) -> None:
        for name, fn in self._indexers.items():
            idx = state.indexes.setdefault(name, {})
            for value in fn(obj):
                idx.setdefault(value, set()).add(obj.key)

    def _unindex(self, state: _TypeState, obj: MirrorObject) -> None:
        for name, fn in self._indexers.items():
            idx = state.indexes.get(name, {})
            for value in fn(obj):
                keys = idx.get(value)
                if keys is not None:
                    keys.discard(obj.key)
                    if not keys:
                        del idx[value]

    def _emit(self, change: Change) -> None:
        for handler in self._handlers:
            try:
                handler(change)
            except Exception:  # a handler's bug must not stop the mirror
                log.exception("mirror handler failed on %s %r", change.kind.value, change.obj)

    def __iter__(self) -> Iterator[MirrorObject]:
        for state in self._state.values():
            yield from state.objects.values()


def _same_view(held: MirrorObject, answer: dict[str, Any]) -> bool:
    """Whether ``answer`` (an object as the API server stored it) projects to what the
    mirror holds of it: the projected JSON and the parsed metadata the informer compares
    before it withholds a change (see the informer's projections.py)."""
    assert held.view is not None
    try:
        projected = held.view[0].encode(answer)
    except (TypeError, orjson.JSONEncodeError):
        return False
    if projected != held.raw:
        return False
    meta = answer.get("metadata") or {}
    parsed = held.meta
    refs = [
        (
            r.get("apiVersion", ""),
            r.get("kind", ""),
            r.get("name", ""),
            r.get("uid", ""),
            bool(r.get("controller")),
            bool(r.get("blockOwnerDeletion")),
        )
        for r in meta.get("ownerReferences") or ()
    ]
    held_refs = [
        (r.api_version, r.kind, r.name, r.uid, r.controller, r.block_owner_deletion)
        for r in parsed.owner_references
    ]
    return (
        dict(meta.get("labels") or {}) == dict(parsed.labels)
        and refs == held_refs
        and list(meta.get("finalizers") or ()) == list(parsed.finalizers)
        and bool(meta.get("deletionTimestamp")) == (parsed.deletion_timestamp is not None)
        and int(meta.get("generation") or 0) == parsed.generation
    )


def _trace(event: pb.Event) -> TraceContext | None:
    ctx = event.trace_context
    if not ctx.traceparent:
        return None
    return TraceContext(ctx.traceparent, ctx.tracestate)
