"""Expectations of the ReplicaSet controller: counts of creations, keys of deletions, TTL."""

from __future__ import annotations

import pytest

from steward.controllers.replicaset.expectations import TTL, Expectations

pytestmark = pytest.mark.unit

KEY = ("ns", "rs")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_creations_are_counted_down() -> None:
    exp = Expectations()
    assert exp.satisfied(KEY)
    exp.expect_creations(KEY, 2)
    exp.creation_observed(KEY)
    assert not exp.satisfied(KEY)
    exp.creation_observed(KEY)
    assert exp.satisfied(KEY)
    exp.creation_observed(KEY)  # an extra observation does not go negative
    exp.expect_creations(KEY, 1)
    assert not exp.satisfied(KEY)


def test_a_deletion_counts_once_per_pod() -> None:
    exp = Expectations()
    exp.expect_deletions(KEY, ["ns/a", "ns/b"])
    exp.deletion_observed(KEY, "ns/a")
    exp.deletion_observed(KEY, "ns/a")  # seen deleting, then gone
    assert exp.pending(KEY) == (0, 1)
    exp.deletion_observed(KEY, "ns/other")
    assert not exp.satisfied(KEY)
    exp.deletion_observed(KEY, "ns/b")
    assert exp.satisfied(KEY)


def test_unmet_expectations_expire() -> None:
    clock = Clock()
    exp = Expectations(clock)
    exp.expect_creations(KEY, 3)
    clock.now = TTL - 1
    assert not exp.satisfied(KEY)
    clock.now = TTL + 1
    assert exp.satisfied(KEY)


def test_forget() -> None:
    exp = Expectations()
    exp.expect_creations(KEY, 1)
    exp.forget(KEY)
    assert exp.satisfied(KEY)
    exp.creation_observed(KEY)  # observations for unknown keys are ignored
    assert exp.pending(KEY) == (0, 0)
