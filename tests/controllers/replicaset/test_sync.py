"""The ReplicaSet controller's pure decisions: selectors and slow start (the runtime's, as
the ReplicaSet controller relies on them), pods from the template, status (counts,
ReplicaFailure) and when to look again for availability; and where a
ReplicationController differs (its owner references, its label-map selector, its status
without terminatingReplicas)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from steward import selector_matches, slow_start_batches
from steward.controllers.replicaset.kinds import REPLICA_SET, REPLICATION_CONTROLLER
from steward.controllers.replicaset.sync import (
    BURST_REPLICAS,
    REPLICA_FAILURE,
    Failure,
    calculate_status,
    next_check,
    pod_from_template,
    scale_diff,
    status_current,
)

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)


def stamp(ago: float) -> str:
    return (NOW - timedelta(seconds=ago)).strftime("%Y-%m-%dT%H:%M:%SZ")


def rs(
    replicas: int = 3, min_ready: int = 0, status: dict[str, Any] | None = None
) -> dict[str, Any]:
    return {
        "metadata": {"name": "web", "namespace": "ns", "uid": "rs-uid", "generation": 2},
        "spec": {
            "replicas": replicas,
            "minReadySeconds": min_ready,
            "selector": {"matchLabels": {"app": "web"}},
            "template": {
                "metadata": {
                    "labels": {"app": "web", "tier": "front"},
                    "annotations": {"note": "x"},
                },
                "spec": {"containers": [{"name": "c", "image": "img"}]},
            },
        },
        "status": status or {},
    }


def pod(labels: dict[str, str] | None = None, ready_ago: float | None = None) -> dict[str, Any]:
    conditions = []
    if ready_ago is not None:
        conditions.append(
            {"type": "Ready", "status": "True", "lastTransitionTime": stamp(ready_ago)}
        )
    return {
        "metadata": {"labels": labels or {"app": "web", "tier": "front"}},
        "status": {"phase": "Running", "conditions": conditions},
    }


def test_selector_matching() -> None:
    sel = {
        "matchLabels": {"app": "web"},
        "matchExpressions": [
            {"key": "tier", "operator": "In", "values": ["front", "back"]},
            {"key": "canary", "operator": "DoesNotExist"},
        ],
    }
    assert selector_matches(sel, {"app": "web", "tier": "front"})
    assert not selector_matches(sel, {"app": "web", "tier": "db"})
    assert not selector_matches(sel, {"app": "web", "tier": "front", "canary": "1"})
    assert not selector_matches({}, {"app": "web"})
    assert not selector_matches(None, {"app": "web"})
    assert not selector_matches({"matchExpressions": [{"key": "a", "operator": "Odd"}]}, {"a": "1"})


def test_slow_start_batches() -> None:
    assert slow_start_batches(0) == []
    assert slow_start_batches(1) == [1]
    assert slow_start_batches(10) == [1, 2, 4, 3]
    assert sum(slow_start_batches(500)) == 500


def test_scale_diff_is_capped_at_the_burst() -> None:
    assert scale_diff(rs(replicas=3), 1) == 2
    assert scale_diff(rs(replicas=1), 3) == -2
    assert scale_diff(rs(replicas=2000), 0) == BURST_REPLICAS
    assert scale_diff(rs(replicas=0), 2000) == -BURST_REPLICAS
    unset = rs()
    del unset["spec"]["replicas"]
    assert scale_diff(unset, 0) == 1


def test_pod_from_template() -> None:
    body = pod_from_template(rs())
    meta = body["metadata"]
    assert meta["generateName"] == "web-"
    assert meta["labels"] == {"app": "web", "tier": "front"}
    assert meta["annotations"] == {"note": "x"}
    assert meta["ownerReferences"] == [
        {
            "apiVersion": "apps/v1",
            "kind": "ReplicaSet",
            "name": "web",
            "uid": "rs-uid",
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert body["spec"] == {"containers": [{"name": "c", "image": "img"}]}
    body["spec"]["containers"].append({})  # a copy, not the template itself
    assert len(rs()["spec"]["template"]["spec"]["containers"]) == 1


def test_status_counts() -> None:
    active = [
        pod(ready_ago=100),
        pod(ready_ago=5),
        pod(),
        pod(labels={"app": "web"}, ready_ago=100),
    ]
    status = calculate_status(rs(min_ready=30), active, [pod()], None, NOW)
    assert status == {
        "replicas": 4,
        "fullyLabeledReplicas": 3,
        "readyReplicas": 3,
        "availableReplicas": 2,
        "terminatingReplicas": 1,
    }


def test_replica_failure_is_set_once_and_removed_when_fixed() -> None:
    failing = calculate_status(rs(), [pod()], [], Failure(True, "quota exceeded"), NOW)
    (cond,) = failing["conditions"]
    assert (cond["type"], cond["status"], cond["reason"], cond["message"]) == (
        REPLICA_FAILURE,
        "True",
        "FailedCreate",
        "quota exceeded",
    )
    # Already set: kept as it was (not rewritten with a new message or time).
    later = NOW + timedelta(minutes=5)
    again = calculate_status(rs(status=failing), [pod()], [], Failure(True, "other"), later)
    assert again["conditions"] == [cond]
    deleting = calculate_status(rs(replicas=0), [pod()], [], Failure(False, "denied"), NOW)
    assert deleting["conditions"][0]["reason"] == "FailedDelete"
    fixed = calculate_status(rs(status=failing), [pod()] * 3, [], None, NOW)
    assert "conditions" not in fixed


def test_status_current() -> None:
    status = calculate_status(rs(), [pod(ready_ago=1)], [], None, NOW)
    assert not status_current(rs(), status)
    written = rs(status={**status, "observedGeneration": 2})
    assert status_current(written, calculate_status(written, [pod(ready_ago=1)], [], None, NOW))
    stale_generation = rs(status={**status, "observedGeneration": 1})
    assert not status_current(stale_generation, status)


def test_next_check_waits_for_the_first_pod_to_become_available() -> None:
    active = [pod(ready_ago=10), pod(ready_ago=25), pod(), pod(ready_ago=100)]
    assert next_check(rs(min_ready=30), active, NOW) == pytest.approx(5.0)
    assert next_check(rs(min_ready=0), active, NOW) is None
    assert next_check(rs(min_ready=30), [pod(ready_ago=100)], NOW) is None


def rc(replicas: int = 3) -> dict[str, Any]:
    """A ReplicationController: :func:`rs` with a label-map selector."""
    obj = rs(replicas)
    obj["spec"]["selector"] = {"app": "web"}
    return obj


def test_a_replication_controller_is_the_pods_v1_owner() -> None:
    (ref,) = pod_from_template(rc(), REPLICATION_CONTROLLER)["metadata"]["ownerReferences"]
    assert (ref["apiVersion"], ref["kind"], ref["name"], ref["uid"]) == (
        "v1",
        "ReplicationController",
        "web",
        "rs-uid",
    )
    assert ref["controller"] is True and ref["blockOwnerDeletion"] is True


def test_a_replication_controllers_selector_is_a_label_map() -> None:
    selector = REPLICATION_CONTROLLER.selector(rc())
    assert selector == {"matchLabels": {"app": "web"}}
    assert selector_matches(selector, {"app": "web", "tier": "front"})
    assert not selector_matches(selector, {"app": "db"})
    # Read as a ReplicaSet's, the same map would select nothing (no matchLabels).
    assert not selector_matches(REPLICA_SET.selector(rc()), {"app": "web"})
    # An empty map (refused by the API server) selects nothing rather than everything.
    empty = rc()
    empty["spec"]["selector"] = {}
    assert not selector_matches(REPLICATION_CONTROLLER.selector(empty), {"app": "web"})


def test_a_replication_controllers_status_has_no_terminating_replicas() -> None:
    status = calculate_status(rc(), [pod(ready_ago=1)], [pod()], None, NOW, REPLICATION_CONTROLLER)
    assert status == {
        "replicas": 1,
        "fullyLabeledReplicas": 1,
        "readyReplicas": 1,
        "availableReplicas": 1,
    }
    written = rc()
    written["status"] = {**status, "observedGeneration": 2}
    again = calculate_status(
        written, [pod(ready_ago=1)], [pod()], None, NOW, REPLICATION_CONTROLLER
    )
    assert status_current(written, again)
