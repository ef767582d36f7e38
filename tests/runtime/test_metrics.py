"""Work queue metrics under client-go's names, read from a private registry."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from steward.runtime import FakeClock, WorkQueue, metrics_for

pytestmark = pytest.mark.unit


def value(registry: CollectorRegistry, metric: str, queue: str = "q") -> float:
    found = registry.get_sample_value(metric, {"name": queue})
    assert found is not None, f"no sample {metric}{{name={queue!r}}}"
    return found


def test_queue_metrics_follow_the_item() -> None:
    registry = CollectorRegistry()
    clock = FakeClock()
    queue = WorkQueue[str]("q", clock=clock, registry=registry)
    queue.add("a")
    queue.add("a")  # coalesced: not an add
    queue.add("b")
    assert value(registry, "workqueue_adds_total") == 2
    assert value(registry, "workqueue_depth") == 2

    clock.advance(1.5)
    queue.get_nowait()
    assert value(registry, "workqueue_depth") == 1
    assert value(registry, "workqueue_queue_duration_seconds_count") == 1
    assert value(registry, "workqueue_queue_duration_seconds_sum") == 1.5

    clock.advance(2)
    assert value(registry, "workqueue_unfinished_work_seconds") == 2
    assert value(registry, "workqueue_longest_running_processor_seconds") == 2
    queue.get_nowait()
    clock.advance(1)
    assert value(registry, "workqueue_unfinished_work_seconds") == 4  # 3 + 1
    assert value(registry, "workqueue_longest_running_processor_seconds") == 3

    queue.done("a")
    queue.done("b")
    assert value(registry, "workqueue_work_duration_seconds_count") == 2
    assert value(registry, "workqueue_work_duration_seconds_sum") == 4
    assert value(registry, "workqueue_unfinished_work_seconds") == 0
    assert value(registry, "workqueue_longest_running_processor_seconds") == 0


def test_retries_count_delayed_and_rate_limited_adds() -> None:
    registry = CollectorRegistry()
    queue = WorkQueue[str]("q", clock=FakeClock(), registry=registry)
    queue.add_after("a", 1)
    queue.add_after("a", 0)
    queue.add_rate_limited("b")
    assert value(registry, "workqueue_retries_total") == 3


def test_unnamed_queues_record_nothing() -> None:
    registry = CollectorRegistry()
    metrics_for(registry)
    queue = WorkQueue[str](registry=registry)
    queue.add("a")
    assert registry.get_sample_value("workqueue_adds_total", {"name": ""}) is None


def test_one_set_of_families_per_registry() -> None:
    registry = CollectorRegistry()
    assert metrics_for(registry) is metrics_for(registry)
    WorkQueue[str]("one", registry=registry).add("x")
    WorkQueue[str]("two", registry=registry).add("x")
    text = generate_latest(registry).decode()
    assert 'workqueue_adds_total{name="one"} 1.0' in text
    assert 'workqueue_adds_total{name="two"} 1.0' in text
    assert "workqueue_unfinished_work_seconds" in text
