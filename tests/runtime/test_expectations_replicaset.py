"""Expectations as the ReplicaSet controller uses them, beyond what test_framework covers
(counting creations down, expiry, more observed than expected): deletions tracked by pod
``namespace/name``, each counted once and only for the pods expected, and a deleted
ReplicaSet's expectations forgotten, later observations of it ignored."""

from __future__ import annotations

import pytest

from steward.runtime.expectations import Expectations

pytestmark = pytest.mark.unit

KEY = ("ns", "rs")


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


def test_forget() -> None:
    exp = Expectations()
    exp.expect_creations(KEY, 1)
    exp.forget(KEY)
    assert exp.satisfied(KEY)
    exp.creation_observed(KEY)  # observations for unknown keys are ignored
    assert exp.pending(KEY) == (0, 0)
