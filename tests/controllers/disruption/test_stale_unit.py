"""Stale ``DisruptionTarget`` conditions, as upstream's
``nonTerminatingPodHasStaleDisruptionCondition`` and ``syncStalePodDisruption`` decide
(disruption.go; the cases of disruption_test.go's TestStalePodDisruption)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from steward import format_time
from steward.controllers.disruption.stale import (
    STALE_POD_DISRUPTION_TIMEOUT,
    cleared_conditions,
    stale_disruption,
)
from tests.controllers.disruption.builders import NOW, pod

pytestmark = pytest.mark.unit


def target(
    status: str = "True", reason: str = "EvictionByEvictionAPI", since: timedelta = timedelta(0)
) -> dict[str, Any]:
    return {
        "type": "DisruptionTarget",
        "status": status,
        "reason": reason,
        "message": "Eviction API: evicting",
        "lastTransitionTime": format_time(NOW - since),
    }


def test_timeout_is_two_minutes() -> None:
    assert timedelta(minutes=2) == STALE_POD_DISRUPTION_TIMEOUT


@pytest.mark.parametrize(
    ("since", "wait"),
    [
        (timedelta(0), timedelta(minutes=2)),  # just set: wait the whole timeout
        (timedelta(seconds=90), timedelta(seconds=30)),
        (timedelta(minutes=2), timedelta(0)),  # exactly stale
        (timedelta(minutes=5), timedelta(0)),  # long stale: clear now, not a negative wait
    ],
)
def test_true_condition_on_a_live_pod_is_stale_after_the_timeout(
    since: timedelta, wait: timedelta
) -> None:
    assert stale_disruption(pod("p", conditions=[target(since=since)]), NOW) == wait


def test_timeout_is_a_parameter() -> None:
    got = stale_disruption(
        pod("p", conditions=[target(since=timedelta(seconds=1))]), NOW, timeout=timedelta(seconds=3)
    )
    assert got == timedelta(seconds=2)


def test_missing_transition_time_is_stale_now() -> None:
    cond = target()
    del cond["lastTransitionTime"]
    assert stale_disruption(pod("p", conditions=[cond]), NOW) == timedelta(0)


@pytest.mark.parametrize(
    "subject",
    [
        pod("no-condition"),
        pod("false", conditions=[target(status="False", since=timedelta(minutes=5))]),
        pod("unknown", conditions=[target(status="Unknown", since=timedelta(minutes=5))]),
        pod(
            "kubelet",
            conditions=[target(reason="TerminationByKubelet", since=timedelta(minutes=5))],
        ),
        pod("deleting", deleting=True, conditions=[target(since=timedelta(minutes=5))]),
        pod("succeeded", phase="Succeeded", conditions=[target(since=timedelta(minutes=5))]),
        pod("failed", phase="Failed", conditions=[target(since=timedelta(minutes=5))]),
    ],
)
def test_never_stale(subject: dict[str, Any]) -> None:
    assert stale_disruption(subject, NOW) is None


def test_cleared_conditions_set_false_and_keep_the_others() -> None:
    subject = pod("p", generation=3, conditions=[target(since=timedelta(minutes=5))])
    got = cleared_conditions(subject, NOW)
    assert got[0] == {"type": "Ready", "status": "True"}
    assert got[1] == {
        "type": "DisruptionTarget",
        "status": "False",
        "lastTransitionTime": format_time(NOW),
        "observedGeneration": 3,
    }
    assert len(got) == 2
    assert subject["status"]["conditions"][1]["status"] == "True"  # the pod is not touched
    # The cleared pod is no longer stale.
    assert stale_disruption({**subject, "status": {"conditions": got}}, NOW) is None


def test_cleared_conditions_without_generation_leave_it_out() -> None:
    subject = pod("p", conditions=[target(since=timedelta(minutes=5))])
    del subject["metadata"]["generation"]
    assert "observedGeneration" not in cleared_conditions(subject, NOW)[1]
