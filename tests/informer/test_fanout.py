"""Per-subscriber queues: coalescing, the bound and REPLACED, safe resume points."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from steward.informer import wire
from steward.informer.fanout import TypeFeed
from steward.informer.selectors import parse_filter
from steward.informer.store import EventKind, ResourceTypeName, Store
from steward.v1 import informer_pb2 as pb
from tests.informer.mirror import (
    ADDED,
    DELETED,
    INITIAL_EVENTS_END,
    MODIFIED,
    REPLACED,
    Mirror,
)
from tests.informer.objects import obj

pytestmark = pytest.mark.unit

CM = ResourceTypeName("", "v1", "configmaps")


class World:
    """A store fed by a fake change source, and one feed of it."""

    def __init__(
        self,
        bound: int = 100,
        flt: str = "",
        history: int = 1000,
        send_previous: bool = True,
        fast_limit: int = 1024,
    ) -> None:
        self.store = Store(history)
        self.store.replace([], 1)
        self.rv = 1
        self.feed = TypeFeed(
            CM,
            self.store,
            parse_filter("", flt, ""),
            bound,
            send_previous,
            fast_limit=fast_limit,
        )
        self.feed.start_with_snapshot(replaced=False)
        self.uids: dict[str, int] = {}

    def change(self, kind: EventKind, name: str, labels: dict[str, str] | None = None) -> None:
        self.rv += 1
        if kind is EventKind.ADDED:
            self.uids[name] = self.uids.get(name, 0) + 1
        uid = f"{name}-{self.uids.get(name, 0)}"
        event = self.store.apply(kind, obj(name, self.rv, uid=uid, labels=labels), self.rv)
        self.feed.offer_batch([event])

    def take(self, room: int = 1000) -> list[pb.Event]:
        out: list[bytes] = []
        self.feed.take(room, out)
        return wire.decode_batch(out)


def kinds(events: list[pb.Event]) -> list[tuple[int, str]]:
    return [(e.type, e.metadata.name) for e in events]


def test_snapshot_then_changes() -> None:
    w = World()
    w.change(EventKind.ADDED, "a")
    first = w.take()
    # The snapshot was taken at the first take and already holds "a".
    assert kinds(first) == [(ADDED, "a"), (INITIAL_EVENTS_END, "")]
    assert first[0].resource_version == ""
    assert first[1].resource_version == "2"
    w.change(EventKind.MODIFIED, "a")
    w.change(EventKind.ADDED, "b")
    got = w.take()
    assert kinds(got) == [(MODIFIED, "a"), (ADDED, "b")]
    assert [e.resource_version for e in got] == ["3", "4"]
    assert got[0].previous_object  # send_previous_object
    assert w.take() == []


@pytest.mark.parametrize(
    ("changes", "expected"),
    [
        # ADDED then MODIFIED while pending: one ADDED with the latest state.
        ([(EventKind.ADDED, "x"), (EventKind.MODIFIED, "x")], [(ADDED, "x", "4")]),
        # ADDED then DELETED while pending: nothing at all.
        ([(EventKind.ADDED, "x"), (EventKind.DELETED, "x")], []),
        # MODIFIED then DELETED: the deletion is delivered.
        ([(EventKind.MODIFIED, "a"), (EventKind.DELETED, "a")], [(DELETED, "a", "4")]),
        # MODIFIED twice: one MODIFIED, latest state.
        ([(EventKind.MODIFIED, "a"), (EventKind.MODIFIED, "a")], [(MODIFIED, "a", "4")]),
        # DELETED then re-created: both, in order.
        (
            [(EventKind.DELETED, "a"), (EventKind.ADDED, "a"), (EventKind.MODIFIED, "a")],
            [(DELETED, "a", "3"), (ADDED, "a", "5")],
        ),
    ],
)
def test_coalescing(
    changes: list[tuple[EventKind, str]], expected: list[tuple[int, str, str]]
) -> None:
    w = World()
    w.change(EventKind.ADDED, "a")  # rv 2; the changes below start at 3
    w.take()
    for kind, name in changes:
        w.change(kind, name)
    got = w.take()
    assert [(e.type, e.metadata.name, e.metadata.resource_version) for e in got] == expected


def test_coalesced_events_keep_resource_version_order_and_safe_resume_points() -> None:
    w = World()
    w.take()
    w.change(EventKind.ADDED, "a")  # rv 2
    w.change(EventKind.ADDED, "b")  # rv 3
    w.change(EventKind.MODIFIED, "a")  # rv 4: "a" moves behind "b"
    got = w.take()
    assert kinds(got) == [(ADDED, "b"), (ADDED, "a")]
    # Object versions ascend; "b"'s resume point stays before "a"'s first change (2).
    assert [e.metadata.resource_version for e in got] == ["3", "4"]
    assert [e.resource_version for e in got] == ["1", "4"]


def test_previous_object_is_the_state_the_client_has() -> None:
    w = World()
    w.change(EventKind.ADDED, "a")  # rv 2
    w.take()
    w.change(EventKind.MODIFIED, "a")  # rv 3
    w.change(EventKind.MODIFIED, "a")  # rv 4
    (event,) = w.take()
    assert b'"resourceVersion":"2"' in event.previous_object
    assert event.metadata.resource_version == "4"


def test_label_transitions_become_adds_and_deletes() -> None:
    w = World(flt="app=web")
    w.change(EventKind.ADDED, "a", {"app": "db"})
    assert kinds(w.take()) == [(INITIAL_EVENTS_END, "")]
    w.change(EventKind.MODIFIED, "a", {"app": "web"})
    assert kinds(w.take()) == [(ADDED, "a")]
    w.change(EventKind.MODIFIED, "a", {"app": "web", "x": "y"})
    assert kinds(w.take()) == [(MODIFIED, "a")]
    w.change(EventKind.MODIFIED, "a", {"app": "db"})
    assert kinds(w.take()) == [(DELETED, "a")]
    w.change(EventKind.DELETED, "a", {"app": "db"})
    assert w.take() == []


def test_past_the_bound_the_queue_is_replaced_by_a_snapshot() -> None:
    w = World(bound=5)
    w.take()
    for i in range(6):
        w.change(EventKind.ADDED, f"o{i}")
    assert w.feed.replaced_count == 1
    assert len(w.feed.pending) == 0  # the queue was dropped: memory stays bounded
    for i in range(10):  # while a snapshot is due, nothing is queued
        w.change(EventKind.MODIFIED, f"o{i % 6}")
    assert len(w.feed.pending) == 0
    got = w.take(3)
    assert got[0].type == REPLACED and got[0].resource_version == ""
    got += w.take()
    assert got[-1].type == INITIAL_EVENTS_END
    assert got[-1].resource_version == str(w.rv)
    assert sorted(e.metadata.name for e in got if e.type == ADDED) == [f"o{i}" for i in range(6)]
    w.change(EventKind.DELETED, "o0")
    assert kinds(w.take()) == [(DELETED, "o0")]


def test_bookmarks_advance_the_resume_point_when_idle() -> None:
    w = World()
    w.take()
    w.feed.bookmark(50)
    (event,) = w.take()
    assert event.type == pb.EVENT_TYPE_BOOKMARK and event.resource_version == "50"
    w.feed.bookmark(50)
    assert w.take() == []


def test_resume_replays_history_then_marks_the_end() -> None:
    w = World()
    w.change(EventKind.ADDED, "a")  # 2
    w.change(EventKind.ADDED, "b")  # 3
    w.change(EventKind.MODIFIED, "a")  # 4
    feed = TypeFeed(CM, w.store, parse_filter("", "", ""), 100, False)
    feed.start_with_replay(w.store.history.since(2, w.store.rv) or [])
    raw: list[bytes] = []
    feed.take(100, raw)
    out = wire.decode_batch(raw)
    assert kinds(out) == [(ADDED, "b"), (MODIFIED, "a"), (INITIAL_EVENTS_END, "")]
    assert out[-1].resource_version == "4"


OPS = st.lists(
    st.one_of(
        st.tuples(st.sampled_from(["put", "delete"]), st.integers(0, 7)),
        st.tuples(st.just("take"), st.integers(1, 6)),
        st.tuples(st.just("reconnect"), st.just(0)),
    ),
    max_size=80,
)


@settings(max_examples=200, deadline=None)
@given(
    ops=OPS,
    bound=st.integers(2, 10),
    history=st.integers(1, 30),
    fast_limit=st.integers(0, 5),
)
def test_mirror_converges_and_resumes_without_gaps(
    ops: list[tuple[str, int]], bound: int, history: int, fast_limit: int
) -> None:
    """Whatever the interleaving of changes, partial reads and reconnects, a client that
    applies what it gets (resuming from its last resource version) ends equal to the store.
    Both lanes are exercised: the fast lane's small limit makes it spill into coalescing."""
    w = World(bound=bound, history=history, send_previous=False, fast_limit=fast_limit)
    mirror = Mirror()
    last_rv = 0
    for op, arg in ops:
        name = f"o{arg}"
        if op == "put":
            held = w.store.get(("default", name)) is not None
            w.change(EventKind.MODIFIED if held else EventKind.ADDED, name)
        elif op == "delete":
            if w.store.get(("default", name)) is not None:
                w.change(EventKind.DELETED, name)
        elif op == "take":
            for event in w.take(arg):
                mirror.apply(event)
                if event.resource_version:
                    assert int(event.resource_version) >= last_rv
                    last_rv = int(event.resource_version)
        else:  # the client disconnects and resumes from its last resource version
            mirror.start_stream()
            feed = TypeFeed(
                CM, w.store, parse_filter("", "", ""), bound, False, fast_limit=fast_limit
            )
            since = (
                w.store.history.since(int(mirror.resource_version), w.store.rv)
                if mirror.resource_version
                else None
            )
            if since is None:
                feed.start_with_snapshot(replaced=bool(mirror.resource_version))
            else:
                feed.start_with_replay(since)
            w.feed = feed
            last_rv = 0
    for _ in range(1000):
        batch = w.take(7)
        if not batch:
            break
        for event in batch:
            mirror.apply(event)
    expected = {o.key: o.resource_version for o in w.store}
    assert mirror.objects == expected


@pytest.mark.asyncio
@pytest.mark.parametrize("linger", [0.0, 0.05])
async def test_an_idle_stream_lingers_so_that_close_events_share_a_response(
    linger: float,
) -> None:
    """Woken from idle by an event, a stream with a linger waits before it takes, so the
    events published meanwhile go out in the same response; without one it sends the first
    alone. A backlog (here: the snapshot) is sent at once either way."""
    import asyncio

    from steward.informer.fanout import Fanout, Subscription

    world = World()
    sub = Subscription("s", [world.feed], 100, linger=linger)
    fanout = Fanout()
    fanout.add(sub)
    loop = asyncio.get_running_loop()
    # The backlog goes out at once: the first step of next_batch returns it, without
    # suspending (a linger, or any other wait, would suspend it).
    step = sub.next_batch().__await__()
    with pytest.raises(StopIteration) as returned:
        step.send(None)
    snapshot = returned.value.value
    assert snapshot is not None and snapshot[1] == 1  # INITIAL_EVENTS_END

    def publish(name: str) -> None:
        world.change(EventKind.ADDED, name)
        sub.notify()

    waiting = asyncio.ensure_future(sub.next_batch())
    await asyncio.sleep(0.01)  # the stream is idle now
    publish("a")
    loop.call_later(0.02, publish, "b")  # within the linger
    batch = await asyncio.wait_for(waiting, 5)
    assert batch is not None
    names = [e.metadata.name for e in wire.decode_batch([batch[0]])]
    assert names == (["a"] if linger == 0 else ["a", "b"])
    if linger == 0:
        rest = await asyncio.wait_for(sub.next_batch(), 5)
        assert rest is not None
        assert [e.metadata.name for e in wire.decode_batch([rest[0]])] == ["b"]
    sub.close()
    assert await asyncio.wait_for(sub.next_batch(), 5) is None
