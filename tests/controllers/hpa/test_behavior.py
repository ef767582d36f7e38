"""The HPA controller's stabilization and rate limits, case by case as upstream's
``horizontal_test.go`` states them: the scale-up limit and bounds without behavior
(TestConvertDesiredReplicasWithRules), the downscale window (TestNormalizeDesiredReplicas),
the policies with and without past scale events (TestScalingWithRules,
TestCalculateScaleUpLimitWithScalingRules, TestCalculateScaleDownLimitWithBehaviors), the
windows of both directions (TestNormalizeDesiredReplicasWithBehavior) and the event store
(TestStoreScaleEvents); and the whole of :meth:`Normalizer.normalize` over HPA objects."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from steward.controllers.hpa.behavior import (
    AbleToScale,
    Limited,
    Normalizer,
    Recommendation,
    ScaleEvent,
    ScalingPolicy,
    ScalingRules,
    convert_with_rules,
    replicas_change_in_period,
    scale_down_limit_with_rules,
    scale_down_rules,
    scale_up_limit,
    scale_up_limit_with_rules,
    scale_up_rules,
)

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
KEY = "ns/hpa"


def ago(seconds: float) -> datetime:
    return NOW - timedelta(seconds=seconds)


def rules(
    pods: int, pods_period: int, percent: int, percent_period: int, window: int
) -> dict[str, Any]:
    """An ``HPAScalingRules`` as upstream's generateScalingRules builds it (selectPolicy Max)."""
    policies = []
    if pods:
        policies.append({"type": "Pods", "value": pods, "periodSeconds": pods_period})
    if percent:
        policies.append({"type": "Percent", "value": percent, "periodSeconds": percent_period})
    return {"stabilizationWindowSeconds": window, "selectPolicy": "Max", "policies": policies}


def uniform(changes: Sequence[int], period: int) -> list[ScaleEvent]:
    """Events spread evenly over the last ``period`` seconds, each in the middle of its
    segment (upstream's generateEventsUniformDistribution)."""
    segment = period / len(changes)
    return [
        ScaleEvent(change, ago(period - segment * (i + 1) + segment / 2))
        for i, change in enumerate(changes)
    ]


# --- without behavior -----------------------------------------------------------------------


def test_calculate_scale_up_limit() -> None:
    assert [scale_up_limit(n) for n in (0, 1, 2, 3, 10)] == [4, 4, 4, 6, 20]


@pytest.mark.parametrize(
    ("current", "desired", "low", "high", "want", "reason"),
    [
        (5, 7, 3, 8, 7, "DesiredWithinRange"),
        (3, 1, 2, 8, 2, "TooFewReplicas"),
        (1, 0, 0, 10, 0, "DesiredWithinRange"),
        (20, 1000, 1, 10, 10, "TooManyReplicas"),
        (3, 1000, 1, 2000, 6, "ScaleUpLimit"),
    ],
    ids=[
        "prenormalized desired replicas within range",
        "prenormalized desired replicas < minReplicas",
        "prenormalized desired zeroed replicas within range",
        "maxReplicas is the limit because maxReplicas < scaleUpLimit",
        "scaleUpLimit is the limit because scaleUpLimit < maxReplicas",
    ],
)
def test_convert_desired_replicas_with_rules(
    current: int, desired: int, low: int, high: int, want: int, reason: str
) -> None:
    got, got_reason, _ = convert_with_rules(current, desired, low, high)
    assert (got, got_reason) == (want, reason)


@pytest.mark.parametrize(
    ("recs", "prenormalized", "want", "log_length"),
    [
        ([], 5, 5, 1),
        ([(4, 120), (5, 60)], 3, 5, 3),
        ([(1, 120), (2, 60)], 3, 3, 3),
        ([(10, 600), (9, 540)], 3, 3, 2),
        ([(10, 600), (4, 60), (5, 120), (9, 540)], 3, 5, 4),
    ],
    ids=[
        "empty log",
        "stabilize",
        "no stabilize",
        "no stabilize - old recommendations",
        "stabilize - old recommendations",
    ],
)
def test_normalize_desired_replicas(
    recs: list[tuple[int, int]], prenormalized: int, want: int, log_length: int
) -> None:
    n = Normalizer(timedelta(minutes=5))
    log, _, _ = n.history(KEY)
    log.extend(Recommendation(r, ago(s)) for r, s in recs)
    assert n.stabilize(KEY, prenormalized, NOW) == want
    assert len(n.history(KEY)[0]) == log_length


# --- policies (TestScalingWithRules) --------------------------------------------------------


SCALING_CASES: list[tuple[str, dict[str, Any]]] = [
    (
        "prenormalized desired replicas within range",
        dict(current=5, desired=7, low=3, high=8, want=7, reason="DesiredWithinRange"),
    ),
    (
        "prenormalized desired replicas < minReplicas",
        dict(current=3, desired=1, low=2, high=8, want=2, reason="TooFewReplicas"),
    ),
    (
        "prenormalized desired replicas within range when minReplicas is 0",
        dict(current=1, desired=0, low=0, high=10, want=0, reason="DesiredWithinRange"),
    ),
    (
        "maxReplicas is the limit because maxReplicas < scaleUpLimit",
        dict(current=20, desired=1000, low=1, high=10, want=10, reason="TooManyReplicas"),
    ),
    (
        "desired replica count is more than the maximum replica count",
        dict(current=100, desired=1000, low=100, high=150, want=150, reason="TooManyReplicas"),
    ),
    (
        "scaleUpLimit is the limit because scaleUpLimit < maxReplicas with user policies",
        dict(
            current=3,
            desired=1000,
            low=1,
            high=2000,
            up=rules(0, 0, 1, 60, 0),
            want=4,
            reason="ScaleUpLimit",
        ),
    ),
    (
        "scaleDownLimit is the limit because scaleDownLimit > minReplicas with "
        "user defined policies",
        dict(
            current=1000,
            desired=3,
            low=3,
            high=2000,
            down=rules(20, 60, 0, 0, 0),
            want=980,
            reason="ScaleDownLimit",
        ),
    ),
    (
        "scaleUp with default behavior",
        dict(current=10, desired=50, low=1, high=1000, want=20, reason="ScaleUpLimit"),
    ),
    (
        "scaleUp with pods policy larger than percent policy",
        dict(
            current=10,
            desired=500,
            low=1,
            high=1000,
            up=rules(100, 60, 100, 60, 0),
            want=110,
            reason="ScaleUpLimit",
        ),
    ),
    (
        "scaleUp with percent policy larger than pods policy",
        dict(
            current=10,
            desired=500,
            low=1,
            high=1000,
            up=rules(2, 60, 100, 60, 0),
            want=20,
            reason="ScaleUpLimit",
        ),
    ),
    (
        "scaleUp with spec MaxReplicas limitation with large pod policy",
        dict(
            current=10,
            desired=50,
            low=1,
            high=1000,
            up=rules(100, 60, 0, 0, 0),
            want=50,
            reason="DesiredWithinRange",
        ),
    ),
    (
        "scaleUp with spec MaxReplicas limitation with large percent policy",
        dict(
            current=10,
            desired=50,
            low=1,
            high=1000,
            up=rules(10000, 60, 0, 0, 0),
            want=50,
            reason="DesiredWithinRange",
        ),
    ),
    (
        "scaleUp with pod policy limitation",
        dict(
            current=10,
            desired=50,
            low=1,
            high=1000,
            up=rules(30, 60, 0, 0, 0),
            want=40,
            reason="ScaleUpLimit",
        ),
    ),
    (
        "scaleUp with percent policy limitation",
        dict(
            current=10,
            desired=50,
            low=1,
            high=1000,
            up=rules(0, 0, 200, 60, 0),
            want=30,
            reason="ScaleUpLimit",
        ),
    ),
    (
        "scaleDown with percent policy larger than pod policy",
        dict(
            current=100,
            desired=2,
            low=1,
            high=1000,
            down=rules(20, 60, 1, 60, 300),
            want=80,
            reason="ScaleDownLimit",
        ),
    ),
    (
        "scaleDown with pod policy larger than percent policy",
        dict(
            current=100,
            desired=2,
            low=1,
            high=1000,
            down=rules(2, 60, 1, 60, 300),
            want=98,
            reason="ScaleDownLimit",
        ),
    ),
    (
        "scaleDown with spec MinReplicas limitation with large pod policy",
        dict(
            current=10,
            desired=0,
            low=1,
            high=1000,
            down=rules(100, 60, 0, 0, 300),
            want=1,
            reason="TooFewReplicas",
        ),
    ),
    (
        "scaleDown with spec MinReplicas limitation with large percent policy",
        dict(
            current=10,
            desired=2,
            low=5,
            high=1000,
            down=rules(0, 0, 100, 60, 300),
            want=5,
            reason="TooFewReplicas",
        ),
    ),
    (
        "scaleDown with pod policy limitation",
        dict(
            current=10,
            desired=2,
            low=1,
            high=1000,
            down=rules(5, 60, 0, 0, 300),
            want=5,
            reason="ScaleDownLimit",
        ),
    ),
    (
        "scaleDown with percent policy limitation",
        dict(
            current=10,
            desired=5,
            low=1,
            high=1000,
            down=rules(0, 0, 50, 60, 300),
            want=5,
            reason="DesiredWithinRange",
        ),
    ),
    (
        "scaleUp with spec MaxReplicas limitation with large pod policy and events",
        dict(
            current=100,
            desired=500,
            low=1,
            high=200,
            up=rules(300, 60, 0, 0, 0),
            up_events=([1, 5, 9], 120),
            want=200,
            reason="TooManyReplicas",
        ),
    ),
    (
        "scaleUp with spec MaxReplicas limitation with large percent policy and events",
        dict(
            current=100,
            desired=500,
            low=1,
            high=200,
            up=rules(0, 0, 10000, 60, 0),
            up_events=([1, 5, 9], 120),
            want=200,
            reason="TooManyReplicas",
        ),
    ),
    (
        "scaleUp with currentReplicas limitation with rate.PeriodSeconds with "
        "a lot of recent scale up events",
        dict(
            current=100,
            desired=500,
            low=1,
            high=1000,
            up=rules(5, 120, 0, 0, 0),
            up_events=([1, 5, 9], 120),
            want=100,
            reason="ScaleUpLimit",
        ),
    ),
    (
        "scaleUp with pod policy and previous scale up events",
        dict(
            current=100,
            desired=500,
            low=1,
            high=1000,
            up=rules(150, 120, 0, 0, 0),
            up_events=([1, 5, 9], 120),
            want=235,
            reason="ScaleUpLimit",
        ),
    ),
    (
        "scaleUp with percent policy and previous scale up events",
        dict(
            current=100,
            desired=500,
            low=1,
            high=1000,
            up=rules(0, 0, 200, 120, 0),
            up_events=([1, 5, 9], 120),
            want=255,
            reason="ScaleUpLimit",
        ),
    ),
    (
        "scaleUp with percent policy and previous scale up and down events",
        dict(
            current=6,
            desired=24,
            low=1,
            high=1000,
            up=rules(0, 0, 300, 300, 0),
            up_events=([4], 120),
            down_events=([2], 120),
            want=16,
            reason="ScaleUpLimit",
        ),
    ),
    (
        "scaleDown with default policy and previous events",
        dict(
            current=10,
            desired=5,
            low=1,
            high=1000,
            down_events=([1, 5, 9], 120),
            want=5,
            reason="DesiredWithinRange",
        ),
    ),
    (
        "scaleDown with spec MinReplicas=nil limitation with large pod policy and previous events",
        dict(
            current=100,
            desired=0,
            low=1,
            high=1000,
            down=rules(115, 120, 0, 0, 300),
            down_events=([1, 5, 9], 120),
            want=1,
            reason="TooFewReplicas",
        ),
    ),
    (
        "scaleDown with spec MinReplicas limitation with large pod policy and previous events",
        dict(
            current=100,
            desired=0,
            low=5,
            high=1000,
            down=rules(130, 120, 0, 0, 300),
            down_events=([1, 5, 9], 120),
            want=5,
            reason="TooFewReplicas",
        ),
    ),
    (
        "scaleDown with spec MinReplicas limitation with large percent policy and previous events",
        dict(
            current=100,
            desired=2,
            low=5,
            high=1000,
            down=rules(0, 0, 100, 120, 300),
            down_events=([1, 5, 9], 120),
            want=5,
            reason="TooFewReplicas",
        ),
    ),
    (
        "scaleDown with pod policy limitation and previous events",
        dict(
            current=100,
            desired=2,
            low=1,
            high=1000,
            down=rules(5, 120, 0, 0, 300),
            down_events=([1, 5, 9], 120),
            want=100,
            reason="ScaleDownLimit",
        ),
    ),
    (
        "scaleDown with percent policy limitation and previous events",
        dict(
            current=100,
            desired=0,
            low=1,
            high=1000,
            down=rules(0, 0, 50, 120, 300),
            down_events=([2, 4, 6], 120),
            want=56,
            reason="ScaleDownLimit",
        ),
    ),
    (
        "scaleDown with percent policy and previous scale up and down events",
        dict(
            current=10,
            desired=1,
            low=1,
            high=1000,
            down=rules(0, 0, 50, 180, 0),
            up_events=([2], 120),
            down_events=([4], 120),
            want=6,
            reason="ScaleDownLimit",
        ),
    ),
    (
        "scaleDown with previous events preventing further scale down",
        dict(
            current=100,
            desired=0,
            low=1,
            high=1000,
            down=rules(0, 0, 10, 120, 300),
            down_events=([10, 10, 10], 120),
            want=100,
            reason="ScaleDownLimit",
        ),
    ),
    (
        "scaleDown with with previous events still allowing more scale down",
        dict(
            current=10,
            desired=5,
            low=1,
            high=1000,
            down=rules(0, 0, 1000, 120, 300),
            down_events=([10, 10, 10], 120),
            want=5,
            reason="DesiredWithinRange",
        ),
    ),
    (
        "check 'outdated' flag for events for one behavior for up",
        dict(
            current=100,
            desired=200,
            low=1,
            high=1000,
            up=rules(1000, 60, 0, 0, 0),
            up_events=([8, 12, 9, 11], 120),
            want=200,
            reason="DesiredWithinRange",
        ),
    ),
    (
        "check that events were not marked 'outdated' for two different "
        "policies in the behavior for up",
        dict(
            current=100,
            desired=200,
            low=1,
            high=1000,
            up=rules(1000, 120, 100, 60, 0),
            up_events=([8, 12, 9, 11], 120),
            want=200,
            reason="DesiredWithinRange",
        ),
    ),
    (
        "check that events were marked 'outdated' for two different policies "
        "in the behavior for up",
        dict(
            current=100,
            desired=200,
            low=1,
            high=1000,
            up=rules(1000, 30, 100, 60, 0),
            up_events=([8, 12, 9, 11], 120),
            want=200,
            reason="DesiredWithinRange",
        ),
    ),
    (
        "check 'outdated' flag for events for one behavior for down",
        dict(
            current=100,
            desired=5,
            low=1,
            high=1000,
            down=rules(1000, 60, 0, 0, 300),
            down_events=([8, 12, 9, 11], 120),
            want=5,
            reason="DesiredWithinRange",
        ),
    ),
    (
        "check that events were not marked 'outdated' for two different "
        "policies in the behavior for down",
        dict(
            current=100,
            desired=5,
            low=1,
            high=1000,
            down=rules(1000, 120, 100, 60, 300),
            down_events=([8, 12, 9, 11], 120),
            want=5,
            reason="DesiredWithinRange",
        ),
    ),
    (
        "check that events were marked 'outdated' for two different policies "
        "in the behavior for down",
        dict(
            current=100,
            desired=5,
            low=1,
            high=1000,
            down=rules(1000, 30, 100, 60, 300),
            down_events=([8, 12, 9, 11], 120),
            want=5,
            reason="DesiredWithinRange",
        ),
    ),
]


@pytest.mark.parametrize("case", [c for _, c in SCALING_CASES], ids=[n for n, _ in SCALING_CASES])
def test_scaling_with_rules(case: dict[str, Any]) -> None:
    n = Normalizer()
    _, up_events, down_events = n.history(KEY)
    if "up_events" in case:
        up_events.extend(uniform(*case["up_events"]))
    if "down_events" in case:
        down_events.extend(uniform(*case["down_events"]))
    got, reason, _ = n.convert_with_behavior_rate(
        KEY,
        case["current"],
        case["desired"],
        case["low"],
        case["high"],
        scale_up_rules(case.get("up")),
        scale_down_rules(case.get("down"), 300),
        NOW,
    )
    assert (got, reason) == (case["want"], case["reason"])


def _min_rules() -> ScalingRules:
    return ScalingRules(
        300, "Min", (ScalingPolicy("Pods", 2, 60), ScalingPolicy("Percent", 50, 60))
    )


def test_calculate_scale_up_limit_with_scaling_rules() -> None:
    assert scale_up_limit_with_rules(1, [], [], _min_rules(), NOW) == 2


def test_calculate_scale_down_limit_with_behaviors() -> None:
    assert scale_down_limit_with_rules(5, [], [], _min_rules(), NOW) == 3


def test_select_policy_disabled_holds_the_count() -> None:
    disabled = ScalingRules(0, "Disabled", (ScalingPolicy("Pods", 10, 60),))
    assert scale_up_limit_with_rules(7, [], [], disabled, NOW) == 7
    assert scale_down_limit_with_rules(7, [], [], disabled, NOW) == 7
    n = Normalizer()
    hpa = {
        "spec": {
            "minReplicas": 1,
            "maxReplicas": 100,
            "behavior": {"scaleDown": {"selectPolicy": "Disabled"}},
        }
    }
    n.record_initial(KEY, 7, ago(3600))
    desired, limited, _ = n.normalize(KEY, hpa, 7, 2, NOW)
    assert desired == 7
    assert limited == Limited(
        True,
        "ScaleDownLimit",
        "the desired replica count is decreasing faster than the maximum scale rate",
    )


def test_replicas_change_in_period_excludes_the_period_start() -> None:
    events = [ScaleEvent(1, ago(61)), ScaleEvent(2, ago(60)), ScaleEvent(4, ago(59))]
    assert replicas_change_in_period(60, events, NOW) == 4


# --- windows (TestNormalizeDesiredReplicasWithBehavior) -------------------------------------


WINDOW_CASES: list[tuple[str, dict[str, Any]]] = [
    (
        "empty recommendations for scaling down",
        dict(recs=[], current=100, desired=5, want=5, log=[5]),
    ),
    (
        "simple scale down stabilization",
        dict(recs=[(4, 120), (5, 60)], current=100, desired=3, want=5, log=[4, 5, 3], down=180),
    ),
    (
        "simple scale up stabilization",
        dict(recs=[(4, 120), (5, 60)], current=1, desired=7, want=4, log=[4, 5, 7], up=300),
    ),
    (
        "no scale down stabilization",
        dict(recs=[(1, 120), (2, 60)], current=100, desired=3, want=3, log=[1, 2, 3], up=300),
    ),
    (
        "no scale up stabilization",
        dict(recs=[(4, 120), (5, 60)], current=1, desired=3, want=3, log=[4, 5, 3], down=300),
    ),
    (
        "no scale down stabilization, reuse recommendation element",
        dict(recs=[(10, 600), (9, 540)], current=100, desired=3, want=3, log=[10, 3]),
    ),
    (
        "no scale up stabilization, reuse recommendation element",
        dict(recs=[(10, 600), (9, 540)], current=1, desired=100, want=100, log=[10, 100]),
    ),
    (
        "scale down stabilization, reuse one of obsolete recommendation element",
        dict(
            recs=[(10, 600), (4, 60), (5, 120), (9, 540)],
            current=100,
            desired=3,
            want=5,
            log=[10, 4, 5, 3],
            down=180,
        ),
    ),
    (
        "scale up stabilization, reuse one of obsolete recommendation element",
        dict(
            recs=[(10, 6000), (6, 60), (5, 120), (9, 180)],
            current=1,
            desired=100,
            want=5,
            log=[100, 6, 5, 9],
            up=300,
        ),
    ),
    (
        "scale up and down stabilization, do not scale up when prenormalized rec goes down",
        dict(recs=[(2, 6000), (3, 180)], current=2, desired=1, want=2, up=300, down=300),
    ),
    (
        "scale up and down stabilization, do not scale down when prenormalized rec goes up",
        dict(recs=[(2, 6000), (1, 180)], current=2, desired=3, want=2, up=300, down=300),
    ),
]


@pytest.mark.parametrize("case", [c for _, c in WINDOW_CASES], ids=[n for n, _ in WINDOW_CASES])
def test_normalize_desired_replicas_with_behavior(case: dict[str, Any]) -> None:
    n = Normalizer()
    log, _, _ = n.history(KEY)
    log.extend(Recommendation(r, ago(s)) for r, s in case["recs"])
    up = ScalingRules(case.get("up", 0), "Max", ())
    down = ScalingRules(case.get("down", 0), "Max", ())
    got, _ = n.stabilize_with_behaviors(KEY, case["current"], case["desired"], up, down, NOW)
    assert got == case["want"]
    if "log" in case:
        assert [r.replicas for r in n.history(KEY)[0]] == case["log"]


# --- the event store (TestStoreScaleEvents) -------------------------------------------------


STORE_CASES: list[tuple[str, dict[str, Any]]] = [
    ("empty entries with default behavior", dict(prev=[], new=[], change_in_60=0)),
    (
        "empty entries with two-policy-behavior",
        dict(prev=[], new=[(5, False)], rules=rules(10, 60, 100, 60, 0), change_in_60=0),
    ),
    (
        "one outdated entry to be kept untouched without behavior",
        dict(prev=[(7, 61)], new=[(7, False)], change_in_60=0),
    ),
    (
        "one outdated entry to be replaced with behavior",
        dict(prev=[(7, 61)], new=[(5, False)], rules=rules(10, 60, 100, 60, 0), change_in_60=0),
    ),
    (
        "one actual entry to be not touched with behavior",
        dict(
            prev=[(7, 58)],
            new=[(7, False), (5, False)],
            rules=rules(10, 60, 100, 60, 0),
            change_in_60=7,
        ),
    ),
    (
        "two entries, one of them to be replaced",
        dict(
            prev=[(7, 61), (6, 59)],
            new=[(5, False), (6, False)],
            rules=rules(10, 60, 0, 0, 0),
            change_in_60=6,
        ),
    ),
    (
        "replace one entry, use policies with different periods",
        dict(
            prev=[(8, 29), (6, 59), (7, 61), (9, 61)],
            new=[(8, False), (6, False), (7, True), (5, False)],
            rules=rules(10, 60, 100, 30, 0),
            change_in_60=14,
        ),
    ),
    (
        "two entries, both actual",
        dict(
            prev=[(7, 58), (6, 59)],
            new=[(7, False), (6, False), (5, False)],
            rules=rules(10, 120, 100, 30, 0),
            change_in_60=13,
        ),
    ),
]


@pytest.mark.parametrize("direction", ["up", "down"])
@pytest.mark.parametrize("case", [c for _, c in STORE_CASES], ids=[n for n, _ in STORE_CASES])
def test_store_scale_events(case: dict[str, Any], direction: str) -> None:
    n = Normalizer()
    _, up_events, down_events = n.history(KEY)
    events = up_events if direction == "up" else down_events
    events.extend(ScaleEvent(change, ago(s)) for change, s in case["prev"])
    assert replicas_change_in_period(60, events, NOW) == case["change_in_60"]
    spec: dict[str, Any] = {"maxReplicas": 100}
    if "rules" in case:
        spec["behavior"] = {"scaleUp" if direction == "up" else "scaleDown": case["rules"]}
    new = 15 if direction == "up" else 5
    n.record_scale(KEY, {"spec": spec}, 10, new, NOW)
    assert [(e.change, e.outdated) for e in events] == case["new"]


# --- normalize over HPA objects -------------------------------------------------------------


def hpa(
    min_replicas: int | None = 1, max_replicas: int = 100, behavior: dict[str, Any] | None = None
) -> dict[str, Any]:
    spec: dict[str, Any] = {"maxReplicas": max_replicas}
    if min_replicas is not None:
        spec["minReplicas"] = min_replicas
    if behavior is not None:
        spec["behavior"] = behavior
    return {"spec": spec}


def test_normalize_without_behavior_scale_up_limit() -> None:
    n = Normalizer()
    desired, limited, able = n.normalize(KEY, hpa(1, 100), 3, 50, NOW)
    assert desired == 6
    assert limited == Limited(
        True,
        "ScaleUpLimit",
        "the desired replica count is increasing faster than the maximum scale rate",
    )
    assert able == AbleToScale("ReadyForNewScale", "recommended size matches current size")


def test_normalize_without_behavior_too_few_and_too_many() -> None:
    n = Normalizer()
    for key, current in (("a", 3), ("c", 3), ("d", 1)):
        n.record_initial(key, current, ago(3600))
    assert n.normalize("a", hpa(2, 10), 3, 1, NOW)[:2] == (
        2,
        Limited(
            True,
            "TooFewReplicas",
            "the desired replica count is less than the minimum replica count",
        ),
    )
    assert n.normalize("b", hpa(1, 10), 20, 1000, NOW)[:2] == (
        10,
        Limited(
            True,
            "TooManyReplicas",
            "the desired replica count is more than the maximum replica count",
        ),
    )
    assert n.normalize("c", hpa(None, 10), 3, 0, NOW)[0] == 1
    assert n.normalize("d", hpa(0, 10), 1, 0, NOW)[:2] == (
        0,
        Limited(False, "DesiredWithinRange", "the desired count is within the acceptable range"),
    )


def test_normalize_without_behavior_downscale_stabilization() -> None:
    n = Normalizer(timedelta(minutes=5))
    n.record_initial(KEY, 8, ago(240))
    desired, limited, able = n.normalize(KEY, hpa(1, 100), 8, 3, NOW)
    assert desired == 8
    assert not limited.status
    assert able == AbleToScale(
        "ScaleDownStabilized",
        "recent recommendations were higher than current one, applying the highest recent "
        "recommendation",
    )
    later = NOW + timedelta(minutes=5, seconds=1)
    assert n.normalize(KEY, hpa(1, 100), 8, 3, later)[0] == 3


def test_normalize_with_behavior_defaults_and_history() -> None:
    n = Normalizer(timedelta(minutes=5))
    spec = hpa(1, 1000, behavior={})
    n.record_initial(KEY, 10, ago(3600))
    desired, limited, _ = n.normalize(KEY, spec, 10, 50, NOW)
    assert desired == 20
    assert limited.reason == "ScaleUpLimit"
    n.record_scale(KEY, spec, 10, 20, NOW)
    soon = NOW + timedelta(seconds=5)
    assert n.normalize(KEY, spec, 20, 50, soon)[0] == 20
    later = NOW + timedelta(seconds=16)
    assert n.normalize(KEY, spec, 20, 50, later)[0] == 40
    down, limited, able = n.normalize(KEY, spec, 40, 5, later + timedelta(seconds=1))
    assert down == 40
    assert (limited.status, able.reason) == (False, "ScaleDownStabilized")


def test_normalize_with_behavior_scale_up_window() -> None:
    n = Normalizer()
    spec = hpa(1, 100, behavior={"scaleUp": {"stabilizationWindowSeconds": 60}})
    n.record_initial(KEY, 2, ago(30))
    desired, _, able = n.normalize(KEY, spec, 2, 6, NOW)
    assert desired == 2
    assert able == AbleToScale(
        "ScaleUpStabilized",
        "recent recommendations were lower than current one, applying the lowest recent "
        "recommendation",
    )


def test_record_scale_without_behavior_stores_nothing() -> None:
    n = Normalizer()
    n.record_scale(KEY, hpa(), 1, 5, NOW)
    assert n.history(KEY)[1:] == ([], [])


def test_forget_drops_history() -> None:
    n = Normalizer()
    n.record_initial(KEY, 4, NOW)
    n.record_scale(KEY, hpa(behavior={}), 4, 8, NOW)
    n.forget(KEY)
    assert n.history(KEY) == ([], [], [])


def test_default_rules() -> None:
    assert scale_up_rules(None) == ScalingRules(
        0, "Max", (ScalingPolicy("Pods", 4, 15), ScalingPolicy("Percent", 100, 15))
    )
    assert scale_down_rules({"selectPolicy": "Min"}, 120) == ScalingRules(
        120, "Min", (ScalingPolicy("Percent", 100, 15),)
    )
    assert scale_down_rules({"stabilizationWindowSeconds": 0, "policies": []}, 300) == (
        ScalingRules(0, "Max", ())
    )


def test_percent_policies_round_up_when_scaling_up_and_truncate_when_scaling_down() -> None:
    up = scale_up_rules(rules(0, 0, 15, 60, 0))
    down = scale_down_rules(rules(0, 0, 15, 60, 0), 300)
    assert scale_up_limit_with_rules(10, [], [], up, NOW) == 12
    assert scale_down_limit_with_rules(10, [], [], down, NOW) == 8
    n = Normalizer()
    assert n.convert_with_behavior_rate(KEY, 10, 1, 1, 100, up, down, NOW)[:2] == (
        8,
        "ScaleDownLimit",
    )
