"""Per-subscriber flow control: coalescing queues between the reflectors and each Watch.

A reflector hands every change to :meth:`Fanout.publish`, which filters it for each
subscriber of that type and queues it without ever waiting: publishing costs a dict
update per subscriber, whatever the subscribers' speed. Each Watch stream drains its own
:class:`Subscription` in batches at the pace its client reads.

# Coalescing
Pending events are kept per object, in resource-version order of their latest change:
the latest state wins (ADDED then MODIFIED is one ADDED; MODIFIED then MODIFIED is one
MODIFIED that keeps the state the client had as ``previous``); ADDED then DELETED while
pending cancel out; MODIFIED then DELETED delivers DELETED; DELETED then ADDED (a
re-creation) delivers both. A deletion is never lost.

# Fast lane
A subscriber that keeps up (nothing queued, no snapshot under way) takes each published
batch whole, filtered by namespace only, and is sent every event exactly as it was
encoded at ingest, framed once for all such subscribers: no per-subscriber work but a
list slice. As soon as more than :data:`FAST_LANE_LIMIT` events wait in that lane (the
client fell behind), they move into the coalescing queue below and stay there until it
drains: slow subscribers get coalescing, fast ones pay nothing for it.

# Memory usage
A type's queue holds at most ``bound`` objects. Past it, the queue is dropped and the
subscriber gets REPLACED, a fresh snapshot of the type and INITIAL_EVENTS_END: it is
never left with a silent gap, and a stalled client costs at most ``bound`` entries plus,
while a snapshot is being sent, one reference per cached object. Queues hold references
to the store's events and objects, never copies: an encoded event is the object's encoded
metadata and a few bytes of framing around its own JSON bytes (see wire.py), kept by the
event, framed once for the fast lane and shared by every subscriber in it.

# Resource versions
Each delivered event carries a resource version the client may safely resume from: one
such that every change at or before it is reflected in what the client got. With
coalescing that may lag behind the event's own version (when an earlier change of
another object is still queued). Snapshot events and REPLACED carry none (an empty
string); the snapshot's version comes with its INITIAL_EVENTS_END.
"""

from __future__ import annotations

import asyncio
import heapq
from collections import OrderedDict, deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from steward.informer import projections, wire
from steward.informer.selection import Selection
from steward.informer.selectors import Filter
from steward.informer.store import (
    EventKind,
    ObjectKey,
    ResourceTypeName,
    Store,
    StoredObject,
    StoreEvent,
)
from steward.projection import Projection

FAST_LANE_LIMIT = 1024
"""Events a subscriber may have waiting in the fast lane before they are coalesced."""

_END_KEY: ObjectKey = ("", "\x00initial-events-end")
"""Queue key of the INITIAL_EVENTS_END marker after a resume's replay (never an object)."""


@dataclass(slots=True)
class _Pending:
    kind: EventKind
    event: StoreEvent
    """The latest change coalesced here (its object is the state to deliver)."""
    previous: StoredObject | None
    """For MODIFIED: the state the client has."""
    first_rv: int
    """The earliest change coalesced here that the client has not seen."""
    view: bytes | None = None
    """For a projected feed, the projection of ``event``'s object when it was queued (the
    event keeps it only while it is published, projections.py)."""


class TypeFeed:
    """One subscriber's queue for one resource type (see the module docs)."""

    def __init__(
        self,
        name: ResourceTypeName,
        store: Store,
        flt: Filter,
        bound: int,
        send_previous: bool,
        on_replaced: Callable[[], None] | None = None,
        fast_limit: int = FAST_LANE_LIMIT,
        projection: Projection | None = None,
        selection: tuple[ResourceTypeName, Selection] | None = None,
    ) -> None:
        self.name = name
        self.projection = projection
        self.selecting: ResourceTypeName | None = None
        """The type whose objects select this feed's (selection.py), if any."""
        self.selection: Selection | None = None
        if selection is not None:
            self.selecting, self.selection = selection
        self._everything = flt.everything and self.selection is None
        """The paths this subscriber reads (None: whole objects), see projections.py."""
        self.sent = 0
        """Events sent (markers included), for the per-subscriber metrics."""
        self.withheld = 0
        """Changes of the type this subscriber was not sent: outside its filters, or
        touching nothing its projection keeps."""
        self.fast_limit = fast_limit
        self.on_replaced = on_replaced
        self.store = store
        self.filter = flt
        self.bound = bound
        self.send_previous = send_previous
        self.wire_type = wire.resource_type_field(wire.resource_type(name))
        self.pending: OrderedDict[ObjectKey, list[_Pending]] = OrderedDict()
        self._heap: list[tuple[int, ObjectKey]] = []
        self.fast: deque[list[StoreEvent]] = deque()
        """Fast lane: whole published batches (see the module docs); the first is consumed
        from index ``fast_pos``."""
        self.fast_pos = 0
        self.fast_len = 0
        # The fast lane can filter by namespace alone and sends whole objects; other
        # selectors, owner filters and projections need the slow path.
        self._fast_namespace: str | None = (
            flt.namespace
            if flt.labels.empty
            and flt.fields.empty
            and flt.owner is None
            and projection is None
            and selection is None
            else None
        )
        self.progress = store.rv
        """Everything published up to here is queued or delivered."""
        self.sent_rv = -1
        self.snapshot: deque[StoredObject] | None = None
        self.snapshot_rv = 0
        self.needs_snapshot = False
        self.send_replaced = False
        self.bookmark_due = False
        self.replaced_count = 0
        """How often this feed was dropped and replaced by a snapshot (for tests, metrics)."""

    # Starting points ------------------------------------------------------------------
    def start_with_snapshot(self, replaced: bool) -> None:
        """Send a snapshot (after REPLACED when ``replaced``) before anything else."""
        self.pending.clear()
        self._heap.clear()
        self.fast.clear()
        self.fast_pos = self.fast_len = 0
        self.needs_snapshot = True
        self.send_replaced = replaced
        self.snapshot = None

    def start_with_replay(self, events: Iterable[StoreEvent]) -> None:
        """Queue the history after a resume point, then INITIAL_EVENTS_END."""
        self.progress = self.store.rv
        for event in events:
            self.offer(event)
        if self.needs_snapshot:  # the replay alone overflowed the bound
            return
        marker = StoreEvent(EventKind.INITIAL_EVENTS_END, _END_KEY, None, None, self.store.rv)
        self._enqueue_new(_END_KEY, _Pending(marker.kind, marker, None, marker.rv))

    # Producer side ---------------------------------------------------------------------
    def lag(self) -> int:
        """Objects waiting to be sent (queued changes plus the rest of a snapshot)."""
        # O(1) and safe to call from the metrics thread: objects queued, not events.
        waiting = len(self.pending) + self.fast_len
        snapshot = self.snapshot
        if snapshot is not None:
            waiting += len(snapshot)
        if self.needs_snapshot:
            waiting += len(self.store)
        return waiting

    def offer_batch(self, events: list[StoreEvent]) -> bool:
        """Queue published changes (in order); True when something was queued."""
        ns = self._fast_namespace
        if (
            ns is not None
            and not self.pending
            and self.snapshot is None
            and not self.needs_snapshot
            and not self.send_replaced
            and not self.send_previous
        ):
            selected = events if not ns else [e for e in events if e.key[0] == ns]
            self.withheld += len(events) - len(selected)
            if not selected:
                self.progress = max(self.progress, events[-1].rv)
                return False
            self.fast.append(selected)
            self.fast_len += len(selected)
            self.progress = max(self.progress, events[-1].rv)
            if self.fast_len > self.fast_limit:
                self._leave_fast_lane()
            return True
        queued = False
        for event in events:
            queued = self.offer(event) or queued
        return queued

    def _leave_fast_lane(self) -> None:
        """Move what waits in the fast lane into the coalescing queue, in order."""
        chunks = list(self.fast)
        first = self.fast_pos
        self.fast.clear()
        self.fast_pos = self.fast_len = 0
        for i, chunk in enumerate(chunks):
            for event in chunk[first if i == 0 else 0 :]:
                self.offer(event)

    def offer(self, event: StoreEvent) -> bool:
        """Queue one change if it concerns this subscriber; True when something was queued."""
        if self.fast:
            self._leave_fast_lane()
        self.progress = max(self.progress, event.rv)
        if self.needs_snapshot:
            return False  # the coming snapshot will include it
        kind = event.kind
        if not self._everything:
            obj = event.obj
            prev = event.previous
            passes = self._passes
            now = obj is not None and passes(obj)
            was = prev is not None and passes(prev)
            if kind is EventKind.ADDED:
                if not now:
                    self.withheld += 1
                    return False
            elif kind is EventKind.MODIFIED:
                if now and not was:
                    kind = EventKind.ADDED
                elif was and not now:
                    # Gone for this subscriber: with its last state that passed, so that
                    # it can tell what the object was to it (the Services that selected
                    # a pod relabelled away from all of them).
                    kind = EventKind.DELETED
                    assert prev is not None
                    event = StoreEvent(
                        kind,
                        event.key,
                        prev,
                        prev,
                        event.rv,
                        event.traceparent,
                        event.tracestate,
                    )
                elif not now:
                    self.withheld += 1
                    return False
            elif kind is EventKind.DELETED and not (now or was):
                self.withheld += 1
                return False
        projection = self.projection
        view = None
        if projection is not None and event.obj is not None and kind is not EventKind.DELETED:
            # Projected (and remembered) now, while the ingest's dict is at hand; the
            # previous state's was remembered when it came.
            view = projections.view_of(event, projection)
            now_digest = projections.digest(projection, event.obj, view)
            if (
                kind is EventKind.MODIFIED
                and not event.relisted
                and event.previous is not None
                and projections.digest(projection, event.previous) == now_digest
            ):
                # Nothing this subscriber reads changed: its copy is right as it is.
                self.withheld += 1
                return False
        return self._queue(kind, event, view)

    def _passes(self, obj: StoredObject) -> bool:
        """Whether the subscriber receives ``obj``: its filter and selection."""
        if not self.filter.admits(obj.namespace, obj.name, obj.labels, obj.owner_references):
            return False
        selection = self.selection
        return selection is None or selection.selects(obj.namespace, obj.labels)

    def selector_changed(self, event: StoreEvent) -> bool:
        """Take a change of the selecting type (selection.py): objects a changed selector
        starts to select are queued as ADDED, those no selector selects any more as
        DELETED. True when something was queued."""
        selection = self.selection
        obj = event.obj
        if selection is None or obj is None:
            return False
        if self.fast:
            self._leave_fast_lane()
        selector = (
            None if event.kind is EventKind.DELETED else selection.selector_of(obj, event.decoded)
        )
        namespace = obj.namespace
        old = selection.selector(namespace, obj.name)
        if old == selector:
            return False
        if self.needs_snapshot:  # the coming snapshot is taken with the new selectors
            selection.update(namespace, obj.name, selector)
            return False
        candidates = [
            o
            for o in self.store.by_namespace(namespace)
            if (
                (old is not None and old.matches(o.labels))
                or (selector is not None and selector.matches(o.labels))
            )
            and self.filter.admits(o.namespace, o.name, o.labels, o.owner_references)
        ]
        before = [selection.selects(namespace, o.labels) for o in candidates]
        selection.update(namespace, obj.name, selector)
        queued = False
        rv = self.store.rv
        for o, was in zip(candidates, before, strict=True):
            now = selection.selects(namespace, o.labels)
            if now == was:
                continue
            kind = EventKind.ADDED if now else EventKind.DELETED
            change = StoreEvent(kind, o.key, o, None if now else o, rv, relisted=True)
            queued = self._queue(kind, change) or queued
        return queued

    def _queue(self, kind: EventKind, event: StoreEvent, view: bytes | None = None) -> bool:
        """Queue a change that passed the filters, coalescing per object (``view``: its
        object projected, for a projected feed)."""
        key = event.key
        entry = self.pending.get(key)
        if entry is None:
            previous = event.previous if kind is EventKind.MODIFIED else None
            self._enqueue_new(key, _Pending(kind, event, previous, event.rv, view))
            return True
        self.pending.move_to_end(key)
        last = entry[-1]
        if last.kind is EventKind.ADDED:
            if kind is EventKind.DELETED:
                entry.pop()
                if not entry:
                    del self.pending[key]
            else:
                last.event, last.view = event, view
        elif last.kind is EventKind.MODIFIED:
            last.event, last.view = event, view
            if kind is EventKind.DELETED:
                last.kind = EventKind.DELETED
                last.previous = None
        elif kind is not EventKind.DELETED:  # re-created after a queued deletion
            entry.append(_Pending(EventKind.ADDED, event, None, event.rv, view))
        return True

    def _enqueue_new(self, key: ObjectKey, pending: _Pending) -> None:
        self.pending[key] = [pending]
        heapq.heappush(self._heap, (pending.first_rv, key))
        if len(self.pending) > self.bound:
            self.replaced_count += 1
            self.start_with_snapshot(replaced=True)
            if self.on_replaced is not None:
                self.on_replaced()
        elif len(self._heap) > 2 * len(self.pending) + 64:
            self._heap = [(e[0].first_rv, k) for k, e in self.pending.items()]
            heapq.heapify(self._heap)

    def bookmark(self, rv: int) -> None:
        self.progress = max(self.progress, rv)
        self.bookmark_due = True

    # Consumer side -----------------------------------------------------------------------
    def ready(self) -> bool:
        return bool(
            self.pending
            or self.fast
            or self.needs_snapshot
            or self.snapshot is not None
            or self.send_replaced
            or (self.bookmark_due and self.progress > self.sent_rv)
        )

    def _min_first_rv(self) -> int | None:
        heap = self._heap
        while heap:
            first, key = heap[0]
            entry = self.pending.get(key)
            if entry is not None and entry[0].first_rv == first:
                return first
            heapq.heappop(heap)
        return None

    def _safe_rv(self, own: int) -> int:
        pending_first = self._min_first_rv()
        if pending_first is None:
            return max(own, self.progress)
        return min(own, pending_first - 1)

    def take(self, room: int, out: list[bytes]) -> int:
        """Move up to ``room`` events, in order, into ``out`` (framed wire form as chunks,
        wire.py); returns how many events it moved."""
        taken = self._take(room, out)
        self.sent += taken
        return taken

    def _take(self, room: int, out: list[bytes]) -> int:
        taken = 0
        wtype = self.wire_type
        if self.needs_snapshot:
            self.needs_snapshot = False
            selected = self.store.select(self.filter)
            selection = self.selection
            if selection is not None:
                selects = selection.selects
                selected = [o for o in selected if selects(o.namespace, o.labels)]
            self.snapshot = deque(selected)
            self.snapshot_rv = self.store.rv
            self.progress = max(self.progress, self.snapshot_rv)
        if self.send_replaced and taken < room:
            self.send_replaced = False
            out.append(wire.frame(wire.event_body(EventKind.REPLACED, wtype, None), ""))
            taken += 1
        snapshot = self.snapshot
        if snapshot is not None:
            projection = self.projection
            if projection is None:
                snapshot_parts = wire.snapshot_parts
                while snapshot and taken < room:
                    out.extend(snapshot_parts(snapshot.popleft(), wtype))
                    taken += 1
            else:
                projected_parts = projections.snapshot_parts
                while snapshot and taken < room:
                    out.extend(projected_parts(snapshot.popleft(), wtype, projection))
                    taken += 1
            if snapshot or taken >= room:
                return taken
            self.snapshot = None
            self.sent_rv = self.snapshot_rv
            end_rv = str(self.snapshot_rv)
            out.append(
                wire.frame(wire.event_body(EventKind.INITIAL_EVENTS_END, wtype, None), end_rv)
            )
            taken += 1
        fast = self.fast
        while fast and taken < room:
            chunk = fast[0]
            start = self.fast_pos
            end = min(len(chunk), start + room - taken)
            for event in chunk[start:end]:
                framed = event.framed
                if framed is None:
                    parts = event.wire
                    if parts is None:
                        parts = event.wire = encode_event(event, wtype)
                    # Framed once for every fast subscriber. The unframed form stays: a
                    # slow subscriber frames it with its own resource version, and other
                    # forms reuse its head (the framed one shares all its chunks but two).
                    framed = event.framed = wire.frame_parts(parts, str(event.rv))
                out.extend(framed)
            taken += end - start
            self.fast_len -= end - start
            self.sent_rv = chunk[end - 1].rv
            if end == len(chunk):
                fast.popleft()
                self.fast_pos = 0
            else:
                self.fast_pos = end
        pending = self.pending
        while pending and taken < room:
            key, entry = next(iter(pending.items()))
            item = entry.pop(0)
            if entry:
                heapq.heappush(self._heap, (entry[0].first_rv, key))
            else:
                del pending[key]
            rv = self._safe_rv(item.event.rv)
            self.sent_rv = rv
            out.extend(self._wire(item, rv))
            taken += 1
        if not pending and self.bookmark_due and self.progress > self.sent_rv and taken < room:
            self.bookmark_due = False
            self.sent_rv = self.progress
            body = wire.event_body(EventKind.BOOKMARK, wtype, None)
            out.append(wire.frame(body, str(self.progress)))
            taken += 1
        return taken

    def _wire(self, item: _Pending, rv: int) -> tuple[bytes, ...]:
        event = item.event
        if item.kind is EventKind.INITIAL_EVENTS_END:
            return (wire.frame(wire.event_body(item.kind, self.wire_type, None), str(rv)),)
        previous = item.previous if self.send_previous and item.kind is EventKind.MODIFIED else None
        if self.projection is not None:
            projected = projections.event_parts(
                item.kind, self.wire_type, event, self.projection, previous, item.view
            )
            return wire.frame_parts(projected, str(rv))
        if item.kind is event.kind and previous is None:
            parts = event.wire
            if parts is None:
                parts = encode_event(event, self.wire_type)
            return wire.frame_parts(parts, str(rv))
        # Another kind (coalesced, or the object entered or left the filter) or with the
        # previous object: the same object's head, taken from the event's encoding rather
        # than encoded again for every such subscriber.
        parts = wire.event_parts(
            item.kind,
            self.wire_type,
            event.obj,
            previous=previous,
            head=wire.event_head(event.wire or event.framed),
            traceparent=event.traceparent,
            tracestate=event.tracestate,
        )
        return wire.frame_parts(parts, str(rv))


def encode_event(event: StoreEvent, rtype_field: bytes) -> tuple[bytes, ...]:
    """The encoded Event of a store event (without its resource version, as chunks), as
    every subscriber that gets it unchanged receives it; reflectors call this once per
    event."""
    return wire.event_parts(
        event.kind,
        rtype_field,
        event.obj,
        traceparent=event.traceparent,
        tracestate=event.tracestate,
    )


class Subscription:
    """One Watch stream's queues, one :class:`TypeFeed` per requested type.

    The stream calls :meth:`next_batch` in a loop; it returns None once the subscription
    is closed (server shutdown), so the stream ends cleanly.
    """

    def __init__(
        self, name: str, feeds: list[TypeFeed], max_batch: int, linger: float = 0.0
    ) -> None:
        self.name = name
        self.feeds = feeds
        self.max_batch = max_batch
        self.linger = linger
        """Seconds the stream, woken from idle by new events, waits before it takes them
        (see :meth:`next_batch`)."""
        self.closed = False
        self._wakeup = asyncio.Event()
        self._next = 0

    def notify(self) -> None:
        self._wakeup.set()

    def close(self) -> None:
        self.closed = True
        self._wakeup.set()

    def take(self) -> tuple[list[bytes], int]:
        """Up to ``max_batch`` framed events, taking from the types in turn, as chunks
        (``b"".join`` of them is an encoded WatchResponse) and how many events they are;
        ([], 0) when none is ready."""
        out: list[bytes] = []
        taken = 0
        feeds = self.feeds
        count = len(feeds)
        for i in range(count):
            if taken >= self.max_batch:
                break
            feed = feeds[(self._next + i) % count]
            if feed.ready():
                taken += feed.take(self.max_batch - taken, out)
        self._next = (self._next + 1) % count
        return out, taken

    async def next_batch(self) -> tuple[bytes, int] | None:
        """Wait for the next non-empty batch: an encoded WatchResponse and how many events
        it holds; None when the subscription was closed.

        A stream that had nothing to send and is woken by new events first waits
        :attr:`linger` seconds, so that events close together (a Job's pod created, bound,
        running, done) go out in one response rather than one each: every response costs
        the subscriber and the informer a wake-up of gRPC's runtime, in Python about
        0.1 ms of CPU whatever its size. A stream with events already waiting (a backlog,
        a snapshot) sends at once."""
        while not self.closed:
            chunks, taken = self.take()
            if taken:
                return b"".join(chunks), taken
            self._wakeup.clear()
            if any(feed.ready() for feed in self.feeds):
                continue
            await self._wakeup.wait()
            if self.linger > 0 and not self.closed:
                await asyncio.sleep(self.linger)
        return None


class Fanout:
    """Routes each type's changes to the feeds of every subscription that asked for it."""

    def __init__(self) -> None:
        self._feeds: dict[ResourceTypeName, dict[TypeFeed, Subscription]] = {}
        self._rtype_fields: dict[ResourceTypeName, bytes] = {}
        self._dependents: dict[ResourceTypeName, dict[TypeFeed, Subscription]] = {}
        """Feeds whose objects the objects of a type select (selection.py), by that type."""
        """The projections subscribers of each type use, with how many feeds use each."""
        self.subscriptions: set[Subscription] = set()
        self.totals: dict[tuple[str, ResourceTypeName], list[int]] = {}
        """[sent, withheld] events of closed streams, by subscriber and type (the live
        feeds' counts add to them, see :meth:`counts`)."""

    def add(self, sub: Subscription) -> None:
        self.subscriptions.add(sub)
        for feed in sub.feeds:
            self._feeds.setdefault(feed.name, {})[feed] = sub
            if feed.selecting is not None:
                self._dependents.setdefault(feed.selecting, {})[feed] = sub
        sub.notify()

    def remove(self, sub: Subscription) -> None:
        if sub not in self.subscriptions:
            return
        self.subscriptions.discard(sub)
        for feed in sub.feeds:
            total = self.totals.setdefault((sub.name, feed.name), [0, 0])
            total[0] += feed.sent
            total[1] += feed.withheld
            feeds = self._feeds.get(feed.name)
            if feeds is not None:
                feeds.pop(feed, None)
                if not feeds:
                    del self._feeds[feed.name]
            dependents = self._dependents.get(feed.selecting) if feed.selecting else None
            if dependents is not None:
                dependents.pop(feed, None)
                if not dependents:
                    del self._dependents[feed.selecting]  # type: ignore[arg-type]

    def counts(self) -> dict[tuple[str, ResourceTypeName], tuple[int, int]]:
        """(sent, withheld) events by subscriber and type, closed streams included."""
        out = {key: (sent, withheld) for key, (sent, withheld) in self.totals.items()}
        for sub in list(self.subscriptions):
            for feed in sub.feeds:
                sent, withheld = out.get((sub.name, feed.name), (0, 0))
                out[(sub.name, feed.name)] = (sent + feed.sent, withheld + feed.withheld)
        return out

    def publish(self, name: ResourceTypeName, events: Iterable[StoreEvent]) -> None:
        """Queue ``events`` (already applied to the store) for every subscriber of ``name``,
        and the changes of selection they make for subscribers of the types they select."""
        dependents = self._dependents.get(name)
        if dependents:
            events = list(events)
            for feed, sub in list(dependents.items()):
                queued = False
                for event in events:
                    queued = feed.selector_changed(event) or queued
                if queued:
                    sub.notify()
        feeds = self._feeds.get(name)
        if not feeds:
            for event in events:
                event.decoded = None
            return
        events = list(events)
        rtype_field = self._rtype_fields.get(name)
        if rtype_field is None:
            rtype_field = self._rtype_fields[name] = wire.resource_type_field(
                wire.resource_type(name)
            )
        for event in events:
            # Encoded once here, whatever the number of subscribers (see wire.py).
            if event.wire is None:
                event.wire = encode_event(event, rtype_field)
        if not events:
            return
        for feed, sub in feeds.items():
            # Projected feeds project what passes their filters, from the dict decoded
            # at ingest, once per projection (projections.py).
            if feed.offer_batch(events) or feed.needs_snapshot:
                sub.notify()
        for event in events:
            # The history keeps the event: not its dict, nor its projections (the feeds
            # that queued it keep theirs).
            event.decoded = None
            event.views = None

    def bookmark(self, name: ResourceTypeName, rv: int) -> None:
        """Tell every subscriber of ``name`` that the type has progressed to ``rv``."""
        for feed, sub in self._feeds.get(name, {}).items():
            feed.bookmark(rv)
            sub.notify()

    def close_all(self) -> None:
        for sub in list(self.subscriptions):
            sub.close()

    def lags(self) -> Iterator[tuple[str, ResourceTypeName, int]]:
        """(subscriber, type, events waiting) for every live feed."""
        for sub in list(self.subscriptions):
            for feed in sub.feeds:
                yield sub.name, feed.name, feed.lag()
