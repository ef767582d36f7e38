"""Work queue rules, one by one: dedup, one worker per item, delays, rate limits, shutdown."""

from __future__ import annotations

import asyncio

import pytest

from steward.runtime import FakeClock, ItemExponentialBackoff, QueueItem, TraceContext, WorkQueue

pytestmark = pytest.mark.unit


def make_queue(clock: FakeClock | None = None, **kwargs: object) -> WorkQueue[str]:
    return WorkQueue[str](clock=clock or FakeClock(), **kwargs)  # type: ignore[arg-type]


def take(queue: WorkQueue[str]) -> str:
    got = queue.get_nowait()
    assert got is not None, "expected an item"
    return got.key


def ctx(n: int) -> TraceContext:
    return TraceContext(f"00-{n:032x}-{n:016x}-01")


# -- dedup and order --------------------------------------------------------------------


def test_items_come_out_in_order() -> None:
    queue = make_queue()
    for key in "abc":
        queue.add(key)
    assert [take(queue) for _ in range(3)] == ["a", "b", "c"]
    assert queue.get_nowait() is None


def test_an_item_already_queued_is_not_queued_twice() -> None:
    queue = make_queue()
    queue.add("a")
    queue.add("b")
    queue.add("a")
    assert len(queue) == 2
    assert [take(queue), take(queue)] == ["a", "b"]
    assert queue.get_nowait() is None


# -- one worker per item -----------------------------------------------------------------


def test_an_item_added_while_processing_waits_for_done() -> None:
    queue = make_queue()
    queue.add("a")
    assert take(queue) == "a"
    queue.add("a")
    queue.add("a")
    assert len(queue) == 0
    assert queue.get_nowait() is None  # never handed to a second worker
    assert queue.processing == 1
    queue.done("a")
    assert len(queue) == 1  # queued again, once
    assert take(queue) == "a"
    queue.done("a")
    assert queue.get_nowait() is None
    assert queue.processing == 0


def test_done_without_readd_does_not_requeue() -> None:
    queue = make_queue()
    queue.add("a")
    take(queue)
    queue.done("a")
    assert len(queue) == 0


def test_done_for_an_item_not_processing_is_harmless() -> None:
    queue = make_queue()
    queue.add("a")
    queue.done("a")  # queued, not processing
    queue.done("zzz")
    assert len(queue) == 1
    assert take(queue) == "a"
    assert queue.get_nowait() is None


# -- delays ------------------------------------------------------------------------------


def test_add_after_waits_for_its_ready_time() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add_after("a", 1.0)
    assert queue.waiting == 1
    assert queue.get_nowait() is None
    clock.advance(0.999)
    assert queue.get_nowait() is None
    clock.advance(0.001)
    assert take(queue) == "a"
    assert queue.waiting == 0


def test_add_after_with_no_delay_adds_at_once() -> None:
    queue = make_queue()
    queue.add_after("a", 0)
    queue.add_after("b", -1)
    assert [take(queue), take(queue)] == ["a", "b"]


def test_add_after_keeps_the_earliest_ready_time() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add_after("a", 10)
    queue.add_after("a", 5)  # earlier: wins
    queue.add_after("a", 20)  # later: ignored
    assert queue.waiting == 1
    clock.advance(5)
    assert take(queue) == "a"
    queue.done("a")
    clock.advance(100)
    assert queue.get_nowait() is None  # the item was waiting once, so it comes once


def test_delayed_items_come_out_by_ready_time() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add_after("late", 3)
    queue.add_after("early", 1)
    queue.add_after("middle", 2)
    clock.advance(5)
    assert [take(queue) for _ in range(3)] == ["early", "middle", "late"]


def test_a_delayed_item_that_is_also_queued_coalesces() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add("a")
    queue.add_after("a", 1)
    clock.advance(1)
    assert len(queue) == 1
    assert take(queue) == "a"


def test_a_delayed_item_that_comes_due_while_processing_waits_for_done() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add("a")
    take(queue)
    queue.add_after("a", 1)
    clock.advance(1)
    assert queue.get_nowait() is None
    queue.done("a")
    assert take(queue) == "a"


# -- rate limiting -----------------------------------------------------------------------


def test_add_rate_limited_uses_the_rate_limiter() -> None:
    clock = FakeClock()
    queue = make_queue(clock)  # client-go's default limiter on the fake clock
    queue.add_rate_limited("a")
    assert queue.num_requeues("a") == 1
    clock.advance(0.0049)
    assert queue.get_nowait() is None
    clock.advance(0.0001)
    assert take(queue) == "a"
    queue.done("a")
    queue.add_rate_limited("a")  # second retry: 10 ms
    assert queue.num_requeues("a") == 2
    clock.advance(0.009)
    assert queue.get_nowait() is None
    clock.advance(0.001)
    assert take(queue) == "a"


def test_forget_resets_the_backoff_but_keeps_the_item() -> None:
    clock = FakeClock()
    queue = WorkQueue[str](clock=clock, rate_limiter=ItemExponentialBackoff[str](1.0, 60.0))
    queue.add_rate_limited("a")
    queue.add_rate_limited("b")
    queue.add_rate_limited("b")  # b: 2 s would be later than its 1 s, so 1 s stays
    queue.forget("b")
    assert queue.num_requeues("b") == 0
    clock.advance(1)
    assert sorted([take(queue), take(queue)]) == ["a", "b"]
    queue.done("a")
    queue.done("b")
    queue.add_rate_limited("b")
    clock.advance(0.5)
    assert queue.get_nowait() is None
    clock.advance(0.5)
    assert take(queue) == "b"  # backoff started over at 1 s


# -- shutdown ----------------------------------------------------------------------------


def test_shut_down_ignores_adds_and_drops_waiting_items() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add("a")
    queue.add_after("w", 1)
    queue.shut_down()
    assert queue.shutting_down
    queue.add("b")
    queue.add_after("c", 0)
    queue.add_rate_limited("d")
    clock.advance(10)
    assert take(queue) == "a"  # what was queued is still handed out
    assert queue.get_nowait() is None
    assert queue.waiting == 0


def test_done_after_shutdown_still_requeues_a_dirty_item() -> None:
    queue = make_queue()
    queue.add("a")
    take(queue)
    queue.add("a")
    queue.shut_down()
    queue.done("a")
    assert take(queue) == "a"


@pytest.mark.asyncio
async def test_get_returns_none_after_shutdown_when_empty() -> None:
    queue = make_queue()
    queue.add("a")
    queue.shut_down()
    first = await queue.get()
    assert first is not None
    assert first.key == "a"
    assert await queue.get() is None
    assert await queue.get() is None


@pytest.mark.asyncio
async def test_shut_down_wakes_waiting_getters() -> None:
    queue = make_queue()
    getters = [asyncio.create_task(queue.get()) for _ in range(3)]
    await asyncio.sleep(0)
    queue.shut_down()
    assert await asyncio.gather(*getters) == [None, None, None]


@pytest.mark.asyncio
async def test_shut_down_with_drain_waits_for_in_flight_items() -> None:
    queue = make_queue()
    queue.add("a")
    queue.add("b")
    take(queue)
    take(queue)
    drain = asyncio.create_task(queue.shut_down_with_drain())
    await asyncio.sleep(0)
    assert not drain.done()
    queue.add("c")  # ignored: shutting down
    queue.done("a")
    await asyncio.sleep(0)
    assert not drain.done()
    queue.done("b")
    await asyncio.wait_for(drain, timeout=5)
    assert len(queue) == 0


@pytest.mark.asyncio
async def test_shut_down_with_drain_returns_at_once_when_idle() -> None:
    queue = make_queue()
    await asyncio.wait_for(queue.shut_down_with_drain(), timeout=5)
    assert queue.shutting_down


@pytest.mark.asyncio
async def test_shut_down_ends_a_drain() -> None:
    queue = make_queue()
    queue.add("a")
    take(queue)
    drain = asyncio.create_task(queue.shut_down_with_drain())
    await asyncio.sleep(0)
    queue.shut_down()
    await asyncio.wait_for(drain, timeout=5)
    assert queue.processing == 1


# -- async get ---------------------------------------------------------------------------


@pytest.mark.asyncio
async def test_get_waits_for_an_add() -> None:
    queue = make_queue()
    getter = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    assert not getter.done()
    queue.add("a")
    got = await asyncio.wait_for(getter, timeout=5)
    assert got == QueueItem("a")


@pytest.mark.asyncio
async def test_get_wakes_when_a_delay_passes() -> None:
    queue = WorkQueue[str]()  # real clock: the event loop's timer moves the item
    queue.add_after("a", 0.02)
    queue.add_after("b", 0.01)
    first = await asyncio.wait_for(queue.get(), timeout=5)
    second = await asyncio.wait_for(queue.get(), timeout=5)
    assert first is not None
    assert second is not None
    assert [first.key, second.key] == ["b", "a"]


@pytest.mark.asyncio
async def test_an_earlier_add_after_reschedules_the_timer() -> None:
    queue = WorkQueue[str]()
    queue.add_after("a", 3600)
    queue.add_after("a", 0.01)
    got = await asyncio.wait_for(queue.get(), timeout=5)
    assert got is not None
    assert got.key == "a"


@pytest.mark.asyncio
async def test_a_cancelled_getter_loses_nothing() -> None:
    queue = make_queue()
    first = asyncio.create_task(queue.get())
    second = asyncio.create_task(queue.get())
    await asyncio.sleep(0)
    queue.add("a")  # wakes the first getter ...
    first.cancel()  # ... which is cancelled before it runs
    got = await asyncio.wait_for(second, timeout=5)
    assert got is not None
    assert got.key == "a"
    with pytest.raises(asyncio.CancelledError):
        await first


@pytest.mark.asyncio
async def test_get_hands_each_item_to_one_getter() -> None:
    queue = make_queue()
    getters = [asyncio.create_task(queue.get()) for _ in range(4)]
    await asyncio.sleep(0)
    queue.add("a")
    queue.add("b")
    queue.add("a")
    done, pending = await asyncio.wait(getters, timeout=0.05)
    keys = sorted(item.key for task in done if (item := task.result()) is not None)
    assert keys == ["a", "b"]
    assert len(pending) == 2
    queue.shut_down()
    await asyncio.gather(*pending)


# -- trace contexts ----------------------------------------------------------------------


def test_contexts_of_coalesced_adds_come_with_the_item() -> None:
    queue = make_queue()
    queue.add("a", ctx(1))
    queue.add("a")
    queue.add("a", ctx(2))
    got = queue.get_nowait()
    assert got == QueueItem("a", (ctx(1), ctx(2)), 0)


def test_contexts_are_cleared_when_handed_out() -> None:
    queue = make_queue()
    queue.add("a", ctx(1))
    take(queue)
    queue.done("a")
    queue.add("a", ctx(2))
    assert queue.get_nowait() == QueueItem("a", (ctx(2),))


def test_contexts_added_while_processing_go_to_the_next_get() -> None:
    queue = make_queue()
    queue.add("a", ctx(1))
    take(queue)
    queue.add("a", ctx(2))
    queue.add("a", [ctx(3), ctx(4)])
    queue.done("a")
    assert queue.get_nowait() == QueueItem("a", (ctx(2), ctx(3), ctx(4)))


def test_contexts_are_bounded_and_the_rest_counted() -> None:
    queue = make_queue()
    for n in range(40):
        queue.add("a", ctx(n))
    got = queue.get_nowait()
    assert got is not None
    assert got.contexts == tuple(ctx(n) for n in range(32))
    assert got.dropped_contexts == 8


def test_bound_is_configurable() -> None:
    queue = make_queue(max_contexts=2)
    queue.add("a", [ctx(1), ctx(2), ctx(3)])
    assert queue.get_nowait() == QueueItem("a", (ctx(1), ctx(2)), 1)


def test_delayed_adds_keep_their_contexts() -> None:
    clock = FakeClock()
    queue = make_queue(clock)
    queue.add_after("a", 2, ctx(1))
    queue.add_after("a", 1, ctx(2))
    queue.add_rate_limited("b", ctx(3))
    clock.advance(2)
    items = {item.key: item for item in (queue.get_nowait(), queue.get_nowait()) if item}
    assert items["a"].contexts == (ctx(1), ctx(2))
    assert items["b"].contexts == (ctx(3),)


def test_trace_context_carrier_round_trip() -> None:
    carrier = {"traceparent": ctx(7).traceparent, "tracestate": "k=v"}
    context = TraceContext.from_carrier(carrier)
    assert context == TraceContext(ctx(7).traceparent, "k=v")
    assert context.to_carrier() == carrier
    assert TraceContext.from_carrier({}) is None
    assert ctx(1).to_carrier() == {"traceparent": ctx(1).traceparent}
