"""Expectations and label selectors of the Job controller (no I/O)."""

from __future__ import annotations

from typing import Any

import pytest

from steward.controllers.job.controller import selector_matches
from steward.controllers.job.expectations import TTL, Expectations

pytestmark = pytest.mark.unit

KEY = ("ns", "job")


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_an_outcome_observed_twice_does_not_eat_into_the_next_expectation() -> None:
    """A creation lowered when its sync was cancelled, then seen after all, leaves the
    count below zero; the next expectation of creations is still counted in full, also
    while deletions are pending."""
    exp = Expectations(Clock())
    exp.expect(KEY, adds=1, dels=1)
    exp.creation_observed(KEY)  # the cancelled sync's accounting
    exp.creation_observed(KEY)  # the pod's event: creations now at -1, a deletion pending
    exp.expect(KEY, adds=2)
    exp.deletion_observed(KEY)
    exp.creation_observed(KEY)
    assert not exp.satisfied(KEY), "one creation is still pending"
    exp.creation_observed(KEY)
    assert exp.satisfied(KEY)


def test_creations_and_deletions_must_be_observed() -> None:
    exp = Expectations(Clock())
    assert exp.satisfied(KEY)
    exp.expect(KEY, adds=2, dels=1)
    assert not exp.satisfied(KEY)
    exp.creation_observed(KEY)
    exp.creation_observed(KEY)
    assert not exp.satisfied(KEY)
    exp.deletion_observed(KEY)
    assert exp.satisfied(KEY)


def test_unmet_expectations_expire() -> None:
    clock = Clock()
    exp = Expectations(clock)
    exp.expect(KEY, adds=1)
    clock.now = TTL + 1
    assert exp.satisfied(KEY)


def test_extra_observations_do_not_carry_over() -> None:
    exp = Expectations(Clock())
    exp.expect(KEY, adds=1)
    exp.creation_observed(KEY)
    exp.creation_observed(KEY)  # an adoption, say: count goes below zero
    exp.expect(KEY, adds=1)
    assert not exp.satisfied(KEY)


def test_finalizer_removals() -> None:
    exp = Expectations(Clock())
    exp.expect_removals(KEY, {"a", "b"})
    assert exp.removals(KEY) == {"a", "b"}
    exp.removal_observed(KEY, "a")
    assert exp.removals(KEY) == {"b"}
    exp.forget(KEY)
    assert exp.removals(KEY) == frozenset()


@pytest.mark.parametrize(
    ("selector", "labels", "match"),
    [
        (None, {"a": "1"}, False),
        ({}, {"a": "1"}, False),
        ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
        (
            {"matchExpressions": [{"key": "a", "operator": "In", "values": ["1", "2"]}]},
            {"a": "2"},
            True,
        ),
        ({"matchExpressions": [{"key": "a", "operator": "NotIn", "values": ["1"]}]}, {}, True),
        ({"matchExpressions": [{"key": "a", "operator": "Exists"}]}, {"a": ""}, True),
        ({"matchExpressions": [{"key": "a", "operator": "DoesNotExist"}]}, {"a": ""}, False),
        ({"matchExpressions": [{"key": "a", "operator": "Bogus"}]}, {"a": ""}, False),
    ],
)
def test_selector(selector: dict[str, Any] | None, labels: dict[str, str], match: bool) -> None:
    assert selector_matches(selector, labels) is match
