"""Property tests: random interleavings of queue operations across several workers.

A state machine drives one queue (on a fake clock) and a plain reference model of
client-go's rules side by side, checking at every step that they agree and that the
invariants hold: no item is held by two workers, the queue holds no duplicates, the
earliest ready time wins, and nothing added is lost.
"""

from __future__ import annotations

import asyncio
import itertools
import math
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule

from steward.runtime import FakeClock, ItemExponentialBackoff, WorkQueue

pytestmark = pytest.mark.unit

ITEMS = st.sampled_from(["a", "b", "c", "d"])
WORKERS = st.integers(min_value=0, max_value=2)
DELAYS = st.sampled_from([-1.0, 0.0, 0.5, 1.0, 2.0, 3.5])
STEPS = st.sampled_from([0.25, 0.5, 1.0, 4.0])


class Model:
    """client-go's queue rules, written as plainly as possible."""

    def __init__(self) -> None:
        self.now = 0.0
        self.queue: list[str] = []
        self.dirty: set[str] = set()
        self.processing: set[str] = set()
        self.waiting: dict[str, tuple[float, int]] = {}
        self.failures: dict[str, int] = {}
        self.seq = itertools.count()

    def add(self, item: str) -> None:
        if item in self.dirty:
            return
        self.dirty.add(item)
        if item not in self.processing:
            self.queue.append(item)

    def add_after(self, item: str, delay: float) -> None:
        if delay <= 0:
            self.add(item)
            return
        ready = self.now + delay
        current = self.waiting.get(item)
        if current is None or ready < current[0]:
            self.waiting[item] = (ready, next(self.seq))

    def delay_for(self, item: str) -> float:
        n = self.failures.get(item, 0)
        self.failures[item] = n + 1
        return min(math.ldexp(0.5, n), 4.0)

    def promote(self) -> None:
        due = sorted((r, s, i) for i, (r, s) in self.waiting.items() if r <= self.now)
        for _, _, item in due:
            del self.waiting[item]
            self.add(item)

    def get(self) -> str | None:
        self.promote()
        if not self.queue:
            return None
        item = self.queue.pop(0)
        self.processing.add(item)
        self.dirty.discard(item)
        return item

    def done(self, item: str) -> None:
        self.processing.discard(item)
        if item in self.dirty:
            self.queue.append(item)


class QueueMachine(RuleBasedStateMachine):
    def __init__(self) -> None:
        super().__init__()
        self.clock = FakeClock()
        limiter = ItemExponentialBackoff[str](base_delay=0.5, max_delay=4.0)
        self.queue = WorkQueue[str](clock=self.clock, rate_limiter=limiter)
        self.model = Model()
        self.held: dict[int, str] = {}  # worker -> item it is processing
        self.owed: set[str] = set()  # added since last handed out: must come out again

    @rule(item=ITEMS)
    def add(self, item: str) -> None:
        self.queue.add(item)
        self.model.add(item)
        self.owed.add(item)

    @rule(item=ITEMS, delay=DELAYS)
    def add_after(self, item: str, delay: float) -> None:
        self.queue.add_after(item, delay)
        self.model.add_after(item, delay)
        self.owed.add(item)

    @rule(item=ITEMS)
    def add_rate_limited(self, item: str) -> None:
        self.queue.add_rate_limited(item)
        self.model.add_after(item, self.model.delay_for(item))
        self.owed.add(item)

    @rule(item=ITEMS)
    def forget(self, item: str) -> None:
        self.queue.forget(item)
        self.model.failures.pop(item, None)
        assert self.queue.num_requeues(item) == 0

    @rule(step=STEPS)
    def advance(self, step: float) -> None:
        self.clock.advance(step)
        self.model.now += step

    @rule(worker=WORKERS)
    def get(self, worker: int) -> None:
        if worker in self.held:
            return
        got = self.queue.get_nowait()
        expected = self.model.get()
        assert (got.key if got else None) == expected
        if got is None:
            return
        assert got.key not in self.held.values(), "two workers on one item"
        self.held[worker] = got.key
        self.owed.discard(got.key)

    @precondition(lambda self: bool(self.held))
    @rule(data=st.data())
    def done(self, data: st.DataObject) -> None:
        worker = data.draw(st.sampled_from(sorted(self.held)))
        item = self.held.pop(worker)
        self.queue.done(item)
        self.model.done(item)

    @invariant()
    def agrees_with_the_model(self) -> None:
        self.model.promote()  # reading the queue's length moves due items in, too
        assert len(self.queue) == len(self.model.queue) == len(set(self.model.queue))
        assert self.queue.processing == len(self.held) == len(self.model.processing)
        assert self.queue.waiting == len(self.model.waiting)
        assert set(self.model.processing) == set(self.held.values())

    def teardown(self) -> None:
        # Finish all work, let every delay pass, and drain: each owed item comes out once.
        for item in self.held.values():
            self.queue.done(item)
        self.clock.advance(1000)
        drained: list[str] = []
        while (got := self.queue.get_nowait()) is not None:
            drained.append(got.key)
            self.queue.done(got.key)
        assert len(drained) == len(set(drained)), f"duplicates: {drained}"
        assert self.owed <= set(drained), f"lost: {self.owed - set(drained)}"


TestQueueMachine = QueueMachine.TestCase
TestQueueMachine.settings = settings(
    max_examples=150,
    stateful_step_count=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow],
)


@settings(max_examples=60, deadline=None)
@given(
    seed=st.integers(min_value=0, max_value=2**32 - 1),
    workers=st.integers(min_value=1, max_value=4),
    adds=st.lists(st.tuples(ITEMS, st.integers(min_value=0, max_value=3)), max_size=40),
)
def test_async_workers_never_share_an_item_and_lose_nothing(
    seed: int, workers: int, adds: list[tuple[str, int]]
) -> None:
    """Real asyncio workers and a producer, interleaved at random yield points."""
    rng = random.Random(seed)

    async def scenario() -> None:
        queue = WorkQueue[str]()
        in_progress: set[str] = set()
        last_add: dict[str, int] = {}
        last_start: dict[str, int] = {}
        tick = itertools.count()

        async def worker() -> None:
            while (got := await queue.get()) is not None:
                assert got.key not in in_progress, "two workers on one item"
                in_progress.add(got.key)
                last_start[got.key] = next(tick)
                for _ in range(rng.randint(0, 3)):
                    await asyncio.sleep(0)
                in_progress.discard(got.key)
                queue.done(got.key)

        async def producer() -> None:
            for item, pause in adds:
                for _ in range(pause):
                    await asyncio.sleep(0)
                last_add[item] = next(tick)
                queue.add(item)

        tasks = [asyncio.create_task(worker()) for _ in range(workers)]
        await producer()
        for _ in range(10_000):  # bounded, so a broken queue fails instead of hanging
            if not (len(queue) or queue.processing):
                break
            await asyncio.sleep(0)
        await queue.shut_down_with_drain()
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=5)
        for item, added in last_add.items():
            assert last_start.get(item, -1) > added, f"{item} added at {added} never handled"

    asyncio.run(asyncio.wait_for(scenario(), timeout=30))
