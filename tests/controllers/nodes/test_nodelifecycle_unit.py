"""The node lifecycle controller's decisions, without a cluster: zone keys and states,
the rate each state gets and the fully-disrupted-everywhere rule, the rate-limited taint
queue, the taint sets and swaps, and a node's health from its heartbeats (upstream's
node_lifecycle_controller_test.go and rate_limited_queue_test.go cases, in our words)."""

from __future__ import annotations

import asyncio
import math
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from steward.controllers.nodelifecycle import health as hl
from steward.controllers.nodelifecycle import taints as tt
from steward.controllers.nodelifecycle import zones as zn
from steward.controllers.nodelifecycle.tainter import TaintQueue

pytestmark = pytest.mark.unit

T0 = datetime(2026, 6, 1, 12, 0, 0, tzinfo=UTC)
GRACE = timedelta(seconds=40)
STARTUP = timedelta(seconds=60)
RATES = zn.Rates(healthy=0.1, secondary=0.01, large_cluster=50)
FULL, PARTIAL, NORMAL, INITIAL = (
    zn.ZoneState.FULL_DISRUPTION,
    zn.ZoneState.PARTIAL_DISRUPTION,
    zn.ZoneState.NORMAL,
    zn.ZoneState.INITIAL,
)


def stamp(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


# Zones ------------------------------------------------------------------------------------
def test_zone_key_prefers_the_beta_labels_and_joins_region_and_zone() -> None:
    assert zn.zone_key(None) == ""
    assert zn.zone_key({"other": "x"}) == ""
    assert zn.zone_key({zn.ZONE_LABEL: "a"}) == ":\x00:a"
    assert zn.zone_key({zn.REGION_LABEL: "r", zn.ZONE_LABEL: "a"}) == "r:\x00:a"
    assert zn.zone_key({zn.BETA_ZONE_LABEL: "b", zn.ZONE_LABEL: "a"}) == ":\x00:b"
    assert zn.excluded({zn.EXCLUDE_DISRUPTION_LABEL: ""})
    assert not zn.excluded({})


@pytest.mark.parametrize(
    ("ready", "expected"),
    [
        (["True", "True"], (0, NORMAL)),
        (["False"], (1, FULL)),
        ([None, "Unknown"], (2, FULL)),
        (["True", "False", "False"], (2, NORMAL)),  # two are never a disruption
        (["True", "False", "Unknown", None], (3, PARTIAL)),  # 3/4 >= 0.55
        (["True", "True", "False", "False", "False", "True", "True"], (3, NORMAL)),  # 3/7
        ([], (0, NORMAL)),
    ],
)
def test_zone_state(ready: list[str | None], expected: tuple[int, zn.ZoneState]) -> None:
    assert zn.zone_state(ready, 0.55) == expected


def test_rates_by_state_and_size() -> None:
    assert RATES.qps(NORMAL, 3) == 0.1
    assert RATES.qps(FULL, 3) == 0.1  # a zone down alone is treated as healthy
    assert RATES.qps(PARTIAL, 50) == 0.0  # not larger than the threshold
    assert RATES.qps(PARTIAL, 51) == 0.01
    assert RATES.qps(INITIAL, 10) is None


def test_every_zone_fully_disrupted_stops_all_tainting() -> None:
    plan = zn.handle_disruption(
        {"a": NORMAL, "b": NORMAL}, {"a": ["False"], "b": ["Unknown", None]}, RATES, 0.55
    )
    assert plan.entered_full_disruption and not plan.left_full_disruption
    assert plan.rates == {"a": 0.0, "b": 0.0}
    assert plan.states == {"a": FULL, "b": FULL}
    # Still all down: nothing more happens.
    again = zn.handle_disruption(plan.states, {"a": ["False"], "b": ["Unknown"]}, RATES, 0.55)
    assert not again.entered_full_disruption and again.rates == {} and again.states == plan.states


def test_first_pass_with_every_node_down_is_full_disruption() -> None:
    plan = zn.handle_disruption({}, {"": ["Unknown", "Unknown"]}, RATES, 0.55)
    assert plan.entered_full_disruption and plan.rates == {"": 0.0}


def test_one_zone_fully_disrupted_alone_keeps_the_healthy_rate() -> None:
    plan = zn.handle_disruption(
        {"a": NORMAL, "b": NORMAL}, {"a": ["False", "False"], "b": ["True"]}, RATES, 0.55
    )
    assert not plan.entered_full_disruption
    assert plan.states == {"a": FULL, "b": NORMAL}
    assert plan.rates == {"a": 0.1}


def test_leaving_full_disruption_restores_each_zones_rate() -> None:
    before = {"a": FULL, "b": FULL}
    plan = zn.handle_disruption(
        before, {"a": ["True"], "b": ["True", "False", "False", "Unknown"]}, RATES, 0.55
    )
    assert plan.left_full_disruption
    assert plan.states == {"a": NORMAL, "b": PARTIAL}
    assert plan.rates == {"a": 0.1, "b": 0.0}


def test_zones_gone_are_dropped() -> None:
    plan = zn.handle_disruption({"a": NORMAL, "gone": NORMAL}, {"a": ["True"]}, RATES, 0.55)
    assert plan.gone == ["gone"] and plan.states == {"a": NORMAL}


def test_health_gauges() -> None:
    assert zn.health_gauges(["True", "False", None, "True"]) == (4, 50.0, 2)


# The taint queue ----------------------------------------------------------------------------
class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def run(queue: TaintQueue, outcome: tuple[bool, float] = (True, 0.0)) -> list[str]:
    seen: list[str] = []

    async def action(name: str, uid: str) -> tuple[bool, float]:
        seen.append(name)
        return outcome

    asyncio.run(queue.attempt(action))
    return seen


def test_queue_takes_one_node_per_token() -> None:
    clock = Clock()
    queue = TaintQueue(0.1, clock)
    assert queue.add("n1", "u1") and queue.add("n2", "u2")
    assert not queue.add("n1", "u1")  # queued once
    assert run(queue) == ["n1"]  # burst 1
    assert run(queue) == []
    assert queue.next_due() == pytest.approx(10.0)
    clock.t += 10
    assert run(queue) == ["n2"]
    assert len(queue) == 0 and queue.next_due() == math.inf


def test_queue_remembers_a_node_done_until_removed() -> None:
    clock = Clock()
    queue = TaintQueue(1.0, clock)
    queue.add("n1", "u1")
    assert run(queue) == ["n1"]
    assert not queue.add("n1", "u1")  # tainted once: not again until forgotten
    assert queue.remove("n1")
    assert queue.add("n1", "u1")


def test_queue_retries_a_node_not_done_after_its_delay() -> None:
    clock = Clock()
    queue = TaintQueue(100.0, clock)
    queue.add("n1", "u1")
    assert run(queue, (False, 5.0)) == ["n1"]
    clock.t += 1
    assert run(queue) == []  # not due yet
    clock.t += 5
    assert run(queue) == ["n1"]


def test_a_zero_rate_never_taints_and_swapping_back_does_not_give_a_token() -> None:
    clock = Clock()
    queue = TaintQueue(0.1, clock)
    queue.add("n1", "u1")
    queue.add("n2", "u2")
    assert run(queue) == ["n1"]  # the one token spent
    queue.swap_limiter(0.0)
    clock.t += 100
    assert run(queue) == [] and queue.next_due() == math.inf
    queue.swap_limiter(0.1)  # the old limiter had no token: the new one starts empty
    assert run(queue) == []
    clock.t += 10
    assert run(queue) == ["n2"]


def test_a_node_removed_while_its_action_runs_is_not_queued_again() -> None:
    queue = TaintQueue(100.0, Clock())
    queue.add("n1", "u1")

    async def action(name: str, uid: str) -> tuple[bool, float]:
        queue.remove(name)
        return False, 0.0

    asyncio.run(queue.attempt(action))
    assert len(queue) == 0 and queue.add("n1", "u1")


# Taints ----------------------------------------------------------------------------------------
def node(
    conditions: dict[str, str] | None = None,
    taints: list[dict[str, Any]] | None = None,
    unschedulable: bool = False,
) -> dict[str, Any]:
    return {
        "metadata": {"name": "n", "creationTimestamp": stamp(T0), "resourceVersion": "1"},
        "spec": {"taints": taints or [], "unschedulable": unschedulable},
        "status": {"conditions": [{"type": t, "status": s} for t, s in (conditions or {}).items()]},
    }


def keys(taints: list[dict[str, Any]]) -> list[tuple[str, str]]:
    return [(t["key"], t["effect"]) for t in taints]


def test_no_schedule_taints_follow_conditions_and_unschedulable() -> None:
    mine = {"key": "example.com/own", "effect": "NoSchedule"}
    stale = {"key": tt.DISK_PRESSURE, "effect": "NoSchedule"}
    add, remove = tt.no_schedule_diff(
        node(
            {"Ready": "Unknown", "MemoryPressure": "True", "DiskPressure": "False"},
            [mine, stale, tt.UNREACHABLE_NO_EXECUTE],
            unschedulable=True,
        )
    )
    assert keys(add) == [
        (tt.UNREACHABLE, "NoSchedule"),
        (tt.MEMORY_PRESSURE, "NoSchedule"),
        (tt.UNSCHEDULABLE, "NoSchedule"),
    ]
    assert keys(remove) == [(tt.DISK_PRESSURE, "NoSchedule")]  # never another's, nor NoExecute
    ready = node({"Ready": "False", "PIDPressure": "True", "NetworkUnavailable": "True"})
    assert keys(tt.no_schedule_diff(ready)[0]) == [
        (tt.NOT_READY, "NoSchedule"),
        (tt.PID_PRESSURE, "NoSchedule"),
        (tt.NETWORK_UNAVAILABLE, "NoSchedule"),
    ]
    assert tt.no_schedule_diff(node({"Ready": "True"})) == ([], [])


def test_swap_adds_and_removes_in_one_list() -> None:
    other = {"key": "x", "effect": "NoSchedule"}
    before = [other, {**tt.NOT_READY_NO_EXECUTE, "timeAdded": "t0"}]
    after = tt.swapped(
        before, tt.stamped([tt.UNREACHABLE_NO_EXECUTE], "t1"), [tt.NOT_READY_NO_EXECUTE]
    )
    assert after == [other, {**tt.UNREACHABLE_NO_EXECUTE, "timeAdded": "t1"}]
    # Present alike and nothing to remove: no write.
    assert tt.swapped(after, [{**tt.UNREACHABLE_NO_EXECUTE, "timeAdded": "t1"}], []) is None
    # Present with another time: replaced in place.
    moved = tt.swapped(after, [{**tt.UNREACHABLE_NO_EXECUTE, "timeAdded": "t2"}], [])
    assert moved is not None and moved[1]["timeAdded"] == "t2" and len(moved) == 2
    assert tt.swapped([other], [], [tt.NOT_READY_NO_EXECUTE]) is None


# Health -------------------------------------------------------------------------------------------
def ready_node(heartbeat: datetime, transition: datetime = T0) -> dict[str, Any]:
    n = node()
    n["status"]["conditions"] = [
        {
            "type": "Ready",
            "status": "True",
            "lastHeartbeatTime": stamp(heartbeat),
            "lastTransitionTime": stamp(transition),
        }
    ]
    return n


def look(
    saved: hl.NodeHealth | None, n: dict[str, Any], lease: hl.Lease | None, now: datetime
) -> hl.Observation:
    return hl.observe(saved, n, lease, now, startup_grace=STARTUP, monitor_grace=GRACE)


def test_a_renewed_lease_is_a_heartbeat() -> None:
    n = ready_node(T0)
    first = look(None, n, hl.Lease(T0, "1"), T0)
    assert first.health.probe == T0 and not first.expired
    later = T0 + timedelta(seconds=30)
    renewed = look(first.health, n, hl.Lease(later, "2"), later)
    assert renewed.health.probe == later
    # The same lease 41 s after its renewal: expired, though the status never changed.
    stale = look(renewed.health, n, hl.Lease(later, "2"), later + timedelta(seconds=41))
    assert stale.expired and stale.health.probe == later


def test_a_new_heartbeat_in_status_is_a_heartbeat() -> None:
    first = look(None, ready_node(T0), None, T0)
    later = T0 + timedelta(seconds=39)
    again = look(first.health, ready_node(later), None, later + timedelta(seconds=30))
    assert again.health.probe == later + timedelta(seconds=30) and not again.expired
    assert again.health.ready_transition == T0  # the transition time did not change


def test_a_node_never_ready_gets_the_startup_grace_from_its_creation() -> None:
    young = look(None, node(), None, T0 + timedelta(seconds=59))
    assert young.grace == STARTUP and not young.expired
    assert young.observed_ready["status"] == "Unknown"
    assert young.observed_ready["lastHeartbeatTime"] == stamp(T0)
    old = look(young.health, node(), None, T0 + timedelta(seconds=61))
    assert old.expired


def test_unknown_conditions_keep_those_unknown_and_add_those_missing() -> None:
    n = ready_node(T0)
    n["status"]["conditions"].append({"type": "DiskPressure", "status": "Unknown", "reason": "x"})
    now = T0 + timedelta(minutes=1)
    conditions, changed = hl.unknown_conditions(n, now)
    by_type = {c["type"]: c for c in conditions}
    assert [c["type"] for c in changed] == ["Ready", "MemoryPressure", "PIDPressure"]
    assert by_type["Ready"]["reason"] == "NodeStatusUnknown"
    assert by_type["Ready"]["message"] == "Kubelet stopped posting node status."
    assert by_type["Ready"]["lastTransitionTime"] == stamp(now)
    assert by_type["Ready"]["lastHeartbeatTime"] == stamp(T0)  # kept
    assert by_type["MemoryPressure"]["reason"] == "NodeStatusNeverUpdated"
    assert by_type["MemoryPressure"]["message"] == "Kubelet never posted node status."
    assert by_type["MemoryPressure"]["lastHeartbeatTime"] == stamp(T0)  # the creation
    assert by_type["DiskPressure"] == {"type": "DiskPressure", "status": "Unknown", "reason": "x"}


def test_same_condition_compares_times_as_times() -> None:
    a = {"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-06-01T12:00:00Z"}
    b = {"type": "Ready", "status": "True", "lastHeartbeatTime": "2026-06-01T12:00:00+00:00"}
    assert hl.same_condition(a, b)
    assert not hl.same_condition(a, {**b, "status": "Unknown"})
