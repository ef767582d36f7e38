"""The worker pool: concurrency, outcomes of a reconcile, shutdown, status and metrics."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable

import pytest
from prometheus_client import CollectorRegistry

from steward.runtime import (
    ItemExponentialBackoff,
    Request,
    Result,
    RetryAfter,
    TerminalError,
    TraceContext,
    WorkerOptions,
    WorkerPool,
    WorkQueue,
)
from steward.runtime.tracing import coalesced_contexts

pytestmark = pytest.mark.unit

Behaviour = Callable[[Request, int], Awaitable[Result]]


class Recorder:
    """A reconciler that logs every call and does what ``behaviour`` says."""

    def __init__(self, behaviour: Behaviour | None = None) -> None:
        self.behaviour = behaviour
        self.calls: list[tuple[Request, tuple[TraceContext, ...], float]] = []
        self.finished: list[Request] = []
        self.running = 0
        self.max_running = 0
        self.changed = asyncio.Event()

    def count(self, request: Request) -> int:
        return sum(1 for r, _, _ in self.calls if r == request)

    async def reconcile(self, request: Request) -> Result:
        self.calls.append((request, coalesced_contexts(), asyncio.get_running_loop().time()))
        self.running += 1
        self.max_running = max(self.max_running, self.running)
        self.changed.set()
        try:
            if self.behaviour is None:
                return Result()
            return await self.behaviour(request, self.count(request))
        finally:
            self.running -= 1
            self.finished.append(request)
            self.changed.set()

    async def until(self, condition: Callable[[], bool], within: float = 5.0) -> None:
        async def wait() -> None:
            while not condition():
                self.changed.clear()
                await self.changed.wait()

        await asyncio.wait_for(wait(), within)


def fast_queue(registry: CollectorRegistry, name: str = "test") -> WorkQueue[Request]:
    """A queue whose retries come after a millisecond or two."""
    limiter = ItemExponentialBackoff[Request](base_delay=0.001, max_delay=0.01)
    return WorkQueue[Request](name, rate_limiter=limiter, registry=registry)


def make_pool(
    recorder: Recorder,
    registry: CollectorRegistry,
    *,
    workers: int = 1,
    grace: float = 5.0,
    name: str = "test",
) -> WorkerPool:
    options = WorkerOptions(
        max_concurrent_reconciles=workers, shutdown_grace_seconds=grace, registry=registry
    )
    return WorkerPool(name, recorder, fast_queue(registry, name), options)


async def stop(task: asyncio.Task[None]) -> None:
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await asyncio.wait_for(task, 10)


def sample(registry: CollectorRegistry, metric: str, **labels: str) -> float:
    return registry.get_sample_value(metric, {"controller": "test", **labels}) or 0.0


def req(name: str) -> Request:
    return Request("default", name)


@pytest.fixture
def registry() -> CollectorRegistry:
    return CollectorRegistry()


def test_options_defaults_and_validation() -> None:
    options = WorkerOptions()
    assert options.max_concurrent_reconciles == 1
    assert options.shutdown_grace_seconds == 30.0
    assert options.registry is None
    with pytest.raises(ValueError, match="at least 1"):
        WorkerOptions(max_concurrent_reconciles=0)
    with pytest.raises(ValueError, match="negative"):
        WorkerOptions(shutdown_grace_seconds=-1)


def test_request_and_result() -> None:
    assert str(Request("ns", "a")) == "ns/a"
    assert str(Request("", "node-1")) == "node-1"
    assert Request.from_key("ns/a") == Request("ns", "a")
    assert Request.from_key("node-1") == Request("", "node-1")
    with pytest.raises(ValueError, match="namespace/name"):
        Request.from_key("a/b/c")
    with pytest.raises(ValueError, match="requeue_after"):
        Result(requeue_after=-1)


@pytest.mark.asyncio
async def test_success_reconciles_each_key_once(registry: CollectorRegistry) -> None:
    recorder = Recorder()
    pool = make_pool(recorder, registry)
    task = asyncio.create_task(pool.run())
    for name in ["a", "b", "a"]:
        pool.queue.add(req(name))
    await recorder.until(lambda: len(recorder.finished) == 2)
    assert [r for r, _, _ in recorder.calls] == [req("a"), req("b")]
    assert sample(registry, "controller_runtime_reconcile_total", result="success") == 2
    assert sample(registry, "controller_runtime_reconcile_time_seconds_count") == 2
    assert sample(registry, "controller_runtime_max_concurrent_reconciles") == 1
    assert pool.status().reconciles["success"] == 2
    await stop(task)


@pytest.mark.asyncio
async def test_concurrency_limit_is_respected(registry: CollectorRegistry) -> None:
    release = asyncio.Event()

    async def hold(request: Request, attempt: int) -> Result:
        await release.wait()
        return Result()

    recorder = Recorder(hold)
    pool = make_pool(recorder, registry, workers=3)
    task = asyncio.create_task(pool.run())
    for i in range(10):
        pool.queue.add(req(f"k{i}"))
    await recorder.until(lambda: recorder.running == 3)
    await asyncio.sleep(0.01)  # give a fourth worker every chance to (wrongly) start
    assert recorder.running == 3
    status = pool.status()
    assert status.busy_workers == 3
    assert status.workers == 3
    assert status.queue_depth == 7
    assert sample(registry, "controller_runtime_active_workers") == 3
    release.set()
    await recorder.until(lambda: len(recorder.finished) == 10)
    assert recorder.max_running == 3
    assert sample(registry, "controller_runtime_reconcile_total", result="success") == 10
    await recorder.until(lambda: pool.status().busy_workers == 0)
    assert sample(registry, "controller_runtime_active_workers") == 0
    await stop(task)


@pytest.mark.asyncio
async def test_an_error_is_retried_and_does_not_kill_the_worker(
    registry: CollectorRegistry, caplog: pytest.LogCaptureFixture
) -> None:
    async def flaky(request: Request, attempt: int) -> Result:
        if request.name == "bad" and attempt <= 2:
            raise RuntimeError(f"boom {attempt}")
        return Result()

    recorder = Recorder(flaky)
    pool = make_pool(recorder, registry)  # one worker: it must survive both errors
    task = asyncio.create_task(pool.run())
    context = TraceContext("00-" + "1" * 32 + "-" + "2" * 16 + "-01")
    with caplog.at_level(logging.ERROR, logger="steward.runtime.workers"):
        pool.queue.add(req("bad"), context)
        await recorder.until(lambda: recorder.count(req("bad")) == 3)
        pool.queue.add(req("good"))
        await recorder.until(lambda: req("good") in recorder.finished)
    assert "boom 1" in caplog.text
    assert [c for r, c, _ in recorder.calls if r == req("bad")] == [(context,)] * 3
    assert sample(registry, "controller_runtime_reconcile_errors_total") == 2
    assert sample(registry, "controller_runtime_reconcile_total", result="error") == 2
    assert sample(registry, "controller_runtime_reconcile_total", result="success") == 2
    assert sample(registry, "controller_runtime_terminal_reconcile_errors_total") == 0
    status = pool.status()
    assert status.last_error is not None
    assert status.last_error.request == req("bad")
    assert status.last_error.message == "RuntimeError: boom 2"
    assert not status.last_error.terminal
    assert pool.queue.num_requeues(req("bad")) == 0  # forgotten after the success
    await stop(task)


@pytest.mark.asyncio
async def test_a_terminal_error_is_not_retried(registry: CollectorRegistry) -> None:
    async def give_up(request: Request, attempt: int) -> Result:
        if request.name == "doomed":
            raise TerminalError("cannot be fixed")
        return Result()

    recorder = Recorder(give_up)
    pool = make_pool(recorder, registry)
    task = asyncio.create_task(pool.run())
    pool.queue.add(req("doomed"))
    pool.queue.add(req("next"))
    await recorder.until(lambda: req("next") in recorder.finished)
    await asyncio.sleep(0.05)  # well past the 1 ms retry a non-terminal error would get
    assert recorder.count(req("doomed")) == 1
    assert pool.queue.waiting == 0
    assert pool.queue.num_requeues(req("doomed")) == 0
    assert sample(registry, "controller_runtime_reconcile_errors_total") == 1
    assert sample(registry, "controller_runtime_terminal_reconcile_errors_total") == 1
    assert sample(registry, "controller_runtime_reconcile_total", result="error") == 1
    last = pool.status().last_error
    assert last is not None
    assert last.terminal
    assert last.message == "TerminalError: cannot be fixed"
    await stop(task)


@pytest.mark.asyncio
async def test_retry_after_retries_at_its_delay_and_counts_an_error(
    registry: CollectorRegistry,
) -> None:
    async def fail_once(request: Request, attempt: int) -> Result:
        if attempt == 1:
            raise RetryAfter(0.2) from RuntimeError("metrics not there yet")
        return Result()

    recorder = Recorder(fail_once)
    pool = make_pool(recorder, registry)
    task = asyncio.create_task(pool.run())
    pool.queue.add(req("a"))
    await asyncio.sleep(0.1)  # well past the 1 ms backoff of an ordinary error
    assert recorder.count(req("a")) == 1
    await recorder.until(lambda: recorder.count(req("a")) == 2)
    assert sample(registry, "controller_runtime_reconcile_errors_total") == 1
    last = pool.status().last_error
    assert last is not None
    assert last.message == "RuntimeError: metrics not there yet"
    assert not last.terminal
    assert pool.queue.num_requeues(req("a")) == 0
    with pytest.raises(ValueError, match="seconds > 0"):
        RetryAfter(0)
    await stop(task)


@pytest.mark.asyncio
async def test_requeue_after_is_respected(registry: CollectorRegistry) -> None:
    async def later(request: Request, attempt: int) -> Result:
        return Result(requeue_after=0.05) if attempt == 1 else Result()

    recorder = Recorder(later)
    pool = make_pool(recorder, registry)
    task = asyncio.create_task(pool.run())
    pool.queue.add(req("a"))
    await recorder.until(lambda: len(recorder.finished) == 2)
    first, second = (at for _, _, at in recorder.calls)
    assert second - first >= 0.05
    assert sample(registry, "controller_runtime_reconcile_total", result="requeue_after") == 1
    assert pool.queue.num_requeues(req("a")) == 0
    await stop(task)


@pytest.mark.asyncio
async def test_requeue_is_rate_limited(registry: CollectorRegistry) -> None:
    async def again(request: Request, attempt: int) -> Result:
        return Result(requeue=attempt < 3)

    recorder = Recorder(again)
    pool = make_pool(recorder, registry)
    task = asyncio.create_task(pool.run())
    pool.queue.add(req("a"))
    await recorder.until(lambda: len(recorder.finished) == 3)
    assert sample(registry, "controller_runtime_reconcile_total", result="requeue") == 2
    assert registry.get_sample_value("workqueue_retries_total", {"name": "test"}) == 2
    await stop(task)


@pytest.mark.asyncio
async def test_a_wrong_return_value_counts_as_an_error(registry: CollectorRegistry) -> None:
    async def wrong(request: Request, attempt: int) -> Result:
        if attempt == 1:
            return None  # type: ignore[return-value]
        return Result()

    recorder = Recorder(wrong)
    pool = make_pool(recorder, registry)
    task = asyncio.create_task(pool.run())
    pool.queue.add(req("a"))
    await recorder.until(lambda: len(recorder.finished) == 2)
    last = pool.status().last_error
    assert last is not None
    assert "TypeError" in last.message
    await stop(task)


@pytest.mark.asyncio
async def test_shutdown_lets_in_flight_work_finish(registry: CollectorRegistry) -> None:
    async def slow(request: Request, attempt: int) -> Result:
        await asyncio.sleep(0.05)
        return Result()

    recorder = Recorder(slow)
    pool = make_pool(recorder, registry, workers=2, grace=10)
    task = asyncio.create_task(pool.run())
    for name in ["a", "b", "c"]:
        pool.queue.add(req(name))
    await recorder.until(lambda: recorder.running == 2)
    await stop(task)
    assert sorted(r.name for r in recorder.finished) == ["a", "b"]  # finished, not cancelled
    assert [r.name for r, _, _ in recorder.calls] == ["a", "b"]  # "c" was not taken
    assert sample(registry, "controller_runtime_reconcile_total", result="success") == 2
    assert pool.queue.shutting_down
    assert pool.queue.processing == 0


@pytest.mark.asyncio
async def test_shutdown_cancels_work_that_outlives_the_grace(registry: CollectorRegistry) -> None:
    cancelled: list[Request] = []

    async def stuck(request: Request, attempt: int) -> Result:
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            cancelled.append(request)
            raise
        return Result()

    recorder = Recorder(stuck)
    pool = make_pool(recorder, registry, grace=0.02)
    task = asyncio.create_task(pool.run())
    pool.queue.add(req("a"))
    await recorder.until(lambda: recorder.running == 1)
    await stop(task)
    assert cancelled == [req("a")]
    assert pool.queue.processing == 0
    assert sample(registry, "controller_runtime_active_workers") == 0


@pytest.mark.asyncio
async def test_a_second_cancel_skips_the_grace(registry: CollectorRegistry) -> None:
    async def stuck(request: Request, attempt: int) -> Result:
        await asyncio.Event().wait()
        return Result()

    recorder = Recorder(stuck)
    pool = make_pool(recorder, registry, grace=3600)
    task = asyncio.create_task(pool.run())
    pool.queue.add(req("a"))
    await recorder.until(lambda: recorder.running == 1)
    task.cancel()
    await asyncio.sleep(0.01)
    assert not task.done()  # waiting out the grace
    await stop(task)
    assert recorder.running == 0


@pytest.mark.asyncio
async def test_run_returns_when_the_queue_is_shut_down(registry: CollectorRegistry) -> None:
    recorder = Recorder()
    pool = make_pool(recorder, registry, workers=2)
    task = asyncio.create_task(pool.run())
    pool.queue.add(req("a"))
    await recorder.until(lambda: len(recorder.finished) == 1)
    pool.queue.shut_down()
    await asyncio.wait_for(task, 5)


@pytest.mark.asyncio
async def test_a_pool_runs_once_at_a_time(registry: CollectorRegistry) -> None:
    pool = make_pool(Recorder(), registry)
    task = asyncio.create_task(pool.run())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="already running"):
        await pool.run()
    await stop(task)


@pytest.mark.asyncio
async def test_default_queue_and_options(registry: CollectorRegistry) -> None:
    recorder = Recorder()
    pool = WorkerPool("defaults", recorder, options=WorkerOptions(registry=registry))
    assert pool.queue.name == "defaults"
    task = asyncio.create_task(pool.run())
    pool.queue.add(req("a"))
    await recorder.until(lambda: len(recorder.finished) == 1)
    assert registry.get_sample_value("workqueue_adds_total", {"name": "defaults"}) == 1
    await stop(task)


@pytest.mark.asyncio
async def test_the_queue_takes_kube_controller_managers_name(registry: CollectorRegistry) -> None:
    """``queue_name`` names the queue's metrics as KCM names its queue, while the pool's
    own metrics keep the controller's name."""
    recorder = Recorder()
    options = WorkerOptions(registry=registry, queue_name="root_ca_cert_publisher")
    pool = WorkerPool("root-ca-cert-publisher", recorder, options=options)
    assert pool.queue.name == "root_ca_cert_publisher"
    task = asyncio.create_task(pool.run())
    pool.queue.add(req("a"))
    await recorder.until(lambda: len(recorder.finished) == 1)
    labels = {"name": "root_ca_cert_publisher"}
    assert registry.get_sample_value("workqueue_adds_total", labels) == 1
    assert registry.get_sample_value("workqueue_adds_total", {"name": pool.name}) is None
    await stop(task)


@pytest.mark.asyncio
async def test_a_key_failing_past_max_retries_is_dropped_until_queued_again(
    registry: CollectorRegistry,
) -> None:
    async def always_fails(request: Request, attempt: int) -> Result:
        raise RuntimeError(f"boom {attempt}")

    recorder = Recorder(always_fails)
    options = WorkerOptions(registry=registry, max_retries=3)
    pool = WorkerPool("test", recorder, fast_queue(registry), options)
    task = asyncio.create_task(pool.run())
    pool.queue.add(req("bad"))
    await recorder.until(lambda: recorder.count(req("bad")) == 4)  # the first try, 3 retries
    await asyncio.sleep(0.05)  # well past the next retry's 1 to 10 ms
    assert recorder.count(req("bad")) == 4
    assert pool.queue.num_requeues(req("bad")) == 0
    assert sample(registry, "controller_runtime_terminal_reconcile_errors_total") == 1
    last = pool.status().last_error
    assert last is not None and last.terminal and last.message == "RuntimeError: boom 4"
    pool.queue.add(req("bad"))  # its next event: tried again, with a fresh budget
    await recorder.until(lambda: recorder.count(req("bad")) == 8)
    await stop(task)


def test_the_pool_makes_its_queue_with_the_backoff_asked_for() -> None:
    options = WorkerOptions(
        registry=CollectorRegistry(), backoff_base_seconds=1.0, backoff_max_seconds=8.0
    )
    pool = WorkerPool("test", Recorder(), options=options)
    delays = [pool.queue._rate_limiter.when(req("x")) for _ in range(5)]
    assert delays == [1.0, 2.0, 4.0, 8.0, 8.0]
