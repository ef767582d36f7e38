"""Upstream's deletion order of a ReplicaSet's pods, criterion by criterion."""

from __future__ import annotations

import random
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from steward.controllers.replicaset.ranking import (
    DELETION_COST,
    compare,
    deletion_cost,
    pods_to_delete,
    ranked,
)

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def stamp(ago: float) -> str:
    return (NOW - timedelta(seconds=ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def pod(
    name: str,
    *,
    node: str = "node-1",
    phase: str = "Running",
    ready: bool = True,
    ready_ago: float = 3600,
    created_ago: float = 7200,
    restarts: int = 0,
    cost: str | None = None,
    uid: str | None = None,
) -> dict[str, Any]:
    conditions = [{"type": "Ready", "status": "True" if ready else "False"}]
    if ready:
        conditions[0]["lastTransitionTime"] = stamp(ready_ago)
    return {
        "metadata": {
            "name": name,
            "uid": uid or f"uid-{name}",
            "creationTimestamp": stamp(created_ago),
            "annotations": {DELETION_COST: cost} if cost is not None else {},
        },
        "spec": {"nodeName": node},
        "status": {
            "phase": phase,
            "conditions": conditions,
            "containerStatuses": [{"name": "c", "restartCount": restarts}],
        },
    }


def order(pods: list[dict[str, Any]], related: list[dict[str, Any]] | None = None) -> list[str]:
    shuffled = list(pods)
    random.Random(7).shuffle(shuffled)
    return [p["metadata"]["name"] for p in ranked(shuffled, related or pods, NOW)]


def test_unassigned_before_assigned() -> None:
    assert order([pod("assigned"), pod("unassigned", node="")]) == ["unassigned", "assigned"]


def test_pending_unknown_running() -> None:
    pods = [pod("r"), pod("p", phase="Pending"), pod("u", phase="Unknown")]
    assert order(pods) == ["p", "u", "r"]


def test_not_ready_before_ready() -> None:
    assert order([pod("ready"), pod("not-ready", ready=False)]) == ["not-ready", "ready"]


def test_lower_deletion_cost_first_and_before_restarts() -> None:
    pods = [pod("costly", cost="1000", restarts=5), pod("cheap", cost="100")]
    assert order(pods) == ["cheap", "costly"]
    # Same cost: more restarts go first.
    assert order([pod("a", cost="100", restarts=5), pod("b", cost="100")]) == ["a", "b"]


@pytest.mark.parametrize(
    ("value", "cost"),
    [("12", 12), ("-3", -3), ("0", 0), ("+1", 0), ("007", 0), ("x", 0), ("", 0), ("1_0", 0)],
)
def test_deletion_cost_parsing(value: str, cost: int) -> None:
    assert deletion_cost(pod("p", cost=value)) == cost
    assert deletion_cost(pod("p", cost=str(2**31))) == 0


def test_more_colocated_related_pods_first() -> None:
    crowded = pod("crowded", node="n1")
    alone = pod("alone", node="n2")
    related = [crowded, alone, pod("other-rs-1", node="n1"), pod("other-rs-2", node="n1")]
    assert order([alone, crowded], related) == ["crowded", "alone"]
    # Pods being deleted do not count towards a node's rank.
    gone = [dict(p, metadata={**p["metadata"], "deletionTimestamp": stamp(1)}) for p in related]
    assert order([alone, crowded], [crowded, alone, *gone[2:]]) == ["alone", "crowded"]


def test_ready_for_less_time_first_on_a_log_scale() -> None:
    pods = [pod("long", ready_ago=3600), pod("short", ready_ago=10)]
    assert order(pods) == ["short", "long"]
    # Within one power of two of each other the UID decides, not the exact time.
    same_bucket = [
        pod("b", ready_ago=2000, uid="2", restarts=9),
        pod("a", ready_ago=2100, uid="1"),
    ]
    assert order(same_bucket) == ["a", "b"]


def test_more_restarts_first() -> None:
    assert order([pod("calm"), pod("crashy", restarts=3)]) == ["crashy", "calm"]


def test_newer_first() -> None:
    assert order([pod("old", created_ago=86400), pod("new", created_ago=60)]) == ["new", "old"]


def test_criteria_are_applied_in_order() -> None:
    pods = [
        pod("running-ready-old", created_ago=90000),
        pod("running-ready-new", created_ago=60),
        pod("running-not-ready", ready=False),
        pod("pending", phase="Pending", ready=False),
        pod("unassigned", node="", phase="Pending", ready=False),
    ]
    assert order(pods) == [
        "unassigned",
        "pending",
        "running-not-ready",
        "running-ready-new",
        "running-ready-old",
    ]


def test_compare_is_antisymmetric() -> None:
    a, b = pod("a", restarts=1), pod("b")
    assert compare(a, b, 0, 0, NOW) == -compare(b, a, 0, 0, NOW) == -1
    assert compare(a, a, 0, 0, NOW) == 0


def test_pods_to_delete_takes_the_first_ranked() -> None:
    pods = [pod("keep-1"), pod("go", ready=False), pod("keep-2")]
    assert [p["metadata"]["name"] for p in pods_to_delete(pods, pods, 1, NOW)] == ["go"]
    assert len(pods_to_delete(pods, pods, 5, NOW)) == 3
