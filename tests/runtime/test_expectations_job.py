"""The runtime's Expectations and slow-start batches, as the Job controller uses them:
creations counted, deletions by pod name, finalizer removals by UID (no I/O)."""

from __future__ import annotations

import pytest

from steward import Expectations, slow_start_batches
from steward.runtime.clock import FakeClock
from steward.runtime.expectations import TTL

pytestmark = pytest.mark.unit

KEY = ("ns", "job")


def test_an_outcome_observed_twice_does_not_eat_into_the_next_expectation() -> None:
    """A creation lowered when its sync was cancelled, then seen after all, leaves the
    count below zero; the next expectation of creations is still counted in full, also
    while deletions are pending."""
    exp = Expectations(clock=FakeClock())
    exp.expect_creations(KEY, 1)
    exp.expect_deletions(KEY, ["ns/a"])
    exp.creation_observed(KEY)  # the cancelled sync's accounting
    exp.creation_observed(KEY)  # the pod's event: creations now at -1, a deletion pending
    exp.expect_creations(KEY, 2)
    exp.deletion_observed(KEY, "ns/a")
    exp.creation_observed(KEY)
    assert not exp.satisfied(KEY), "one creation is still pending"
    exp.creation_observed(KEY)
    assert exp.satisfied(KEY)


def test_creations_and_deletions_must_be_observed() -> None:
    exp = Expectations(clock=FakeClock())
    assert exp.satisfied(KEY)
    exp.expect_creations(KEY, 2)
    exp.expect_deletions(KEY, ["ns/a"])
    assert not exp.satisfied(KEY)
    exp.creation_observed(KEY)
    exp.creation_observed(KEY)
    assert not exp.satisfied(KEY)
    exp.deletion_observed(KEY, "ns/a")
    assert exp.satisfied(KEY)


def test_a_deletion_seen_twice_counts_once() -> None:
    """A pod shows first with a deletion timestamp, then gone: one deletion, not two."""
    exp = Expectations(clock=FakeClock())
    exp.expect_deletions(KEY, ["ns/a", "ns/b"])
    exp.deletion_observed(KEY, "ns/a")
    exp.deletion_observed(KEY, "ns/a")
    assert not exp.satisfied(KEY)
    assert exp.pending(KEY) == (0, 1)
    exp.deletion_observed(KEY, "ns/b")
    assert exp.satisfied(KEY)


def test_unmet_expectations_expire() -> None:
    clock = FakeClock()
    exp = Expectations(clock=clock)
    exp.expect_creations(KEY, 1)
    clock.advance(TTL + 1)
    assert exp.satisfied(KEY)


def test_extra_observations_do_not_carry_over() -> None:
    exp = Expectations(clock=FakeClock())
    exp.expect_creations(KEY, 1)
    exp.creation_observed(KEY)
    exp.creation_observed(KEY)  # an adoption, say: count goes below zero
    exp.expect_creations(KEY, 1)
    assert not exp.satisfied(KEY)


def test_finalizer_removals() -> None:
    exp = Expectations(clock=FakeClock())
    exp.expect_removals(KEY, {"a", "b"})
    assert exp.removals(KEY) == {"a", "b"}
    exp.removal_observed(KEY, "a")
    assert exp.removals(KEY) == {"b"}
    exp.forget(KEY)
    assert exp.removals(KEY) == frozenset()


@pytest.mark.parametrize(
    ("count", "batches"),
    [
        (0, []),
        (1, [1]),
        (2, [1, 1]),
        (7, [1, 2, 4]),
        (10, [1, 2, 4, 3]),
        (500, [1, 2, 4, 8, 16, 32, 64, 128, 245]),
    ],
)
def test_slow_start_batches(count: int, batches: list[int]) -> None:
    assert slow_start_batches(count) == batches
