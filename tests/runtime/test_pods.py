"""The runtime's pod predicates (``steward.pods``) at their boundaries, as upstream's."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

import steward

pytestmark = pytest.mark.unit

READY_AT = datetime(2026, 12, 7, 12, 0, 0, tzinfo=UTC)


def ready_pod() -> dict[str, object]:
    return {
        "status": {
            "conditions": [
                {"type": "Ready", "status": "True", "lastTransitionTime": "2026-12-07T12:00:00Z"}
            ]
        }
    }


def test_a_pod_is_available_the_moment_min_ready_seconds_have_passed() -> None:
    """Upstream's ``IsPodAvailable`` counts the moment itself (``Compare(now) <= 0``): a
    requeue at exactly that time finds the pod available, not a zero wait again."""
    assert steward.pods.is_available(ready_pod(), 10, READY_AT + timedelta(seconds=10))
    assert not steward.pods.is_available(
        ready_pod(), 10, READY_AT + timedelta(seconds=10) - timedelta(microseconds=1)
    )


def test_without_min_ready_seconds_ready_is_available() -> None:
    assert steward.pods.is_available(ready_pod(), 0, READY_AT)
    assert not steward.pods.is_available({"status": {}}, 0, READY_AT)
