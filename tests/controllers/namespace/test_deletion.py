"""The namespace controller's pure decisions (:mod:`steward.controllers.namespace.deletion`),
with upstream's cases (pkg/controller/namespace/deletion/*_test.go) where they exist."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from steward import Resource
from steward.controllers.namespace import deletion
from steward.controllers.namespace.deletion import (
    CONDITION_TYPES,
    ConditionUpdater,
    Remaining,
    Totals,
    UnexpectedContent,
)

pytestmark = pytest.mark.unit

DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
WIDGETS = Resource("example.com", "v1", "widgets", "Widget")
T0 = "2026-01-01T00:00:00Z"
T1 = "2026-01-01T00:01:00Z"


def item(name: str, *finalizers: str) -> dict[str, Any]:
    return {"metadata": {"name": name, "finalizers": list(finalizers)}}


def by_type(status: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["type"]: c for c in status["conditions"]}


# Messages -------------------------------------------------------------------------------
def test_gvr_text_is_gos_rendering() -> None:
    """The resource of "unexpected items" messages reads as Go prints a
    GroupVersionResource; a wrong rendering breaks the differential comparison."""
    assert deletion.gvr_text(DEPLOYMENTS) == "apps/v1, Resource=deployments"
    assert deletion.gvr_text(deletion.PODS) == "/v1, Resource=pods"


def test_discovery_failure_message_is_client_gos_sorted_error() -> None:
    """ErrGroupDiscoveryFailed lists each stale group version as "gv: stale GroupVersion
    discovery: gv", sorted, under upstream's prefix and count."""
    failed = {"z.example.com/v1": "x", "a.example.com/v1beta1": "y"}
    assert deletion.discovery_failure_message(failed) == (
        "Discovery failed for some groups, 2 failing: unable to retrieve the complete list "
        "of server APIs: a.example.com/v1beta1: stale GroupVersion discovery: "
        "a.example.com/v1beta1, z.example.com/v1: stale GroupVersion discovery: z.example.com/v1"
    )


@pytest.mark.parametrize(
    ("text", "parsed"),
    [("", ("", "")), ("/", ("", "")), ("v1", ("", "v1")), ("apps/v1", ("apps", "v1"))],
)
def test_parse_group_version_as_apimachinery(text: str, parsed: tuple[str, str]) -> None:
    assert deletion.parse_group_version(text) == parsed


def test_parse_group_version_refuses_two_slashes() -> None:
    with pytest.raises(ValueError, match="unexpected GroupVersion string: a/b/c"):
        deletion.parse_group_version("a/b/c")


# What remains ---------------------------------------------------------------------------
def test_nothing_listed_is_nothing_remaining() -> None:
    assert deletion.remaining_of(WIDGETS, "ns", [], 30) == Remaining()


def test_remaining_with_an_estimate_keeps_it_and_counts_finalizers() -> None:
    remaining = deletion.remaining_of(
        deletion.PODS, "ns", [item("a", "f1"), item("b", "f1", "f2"), item("c")], 30
    )
    assert remaining == Remaining(30, 3, {"f1": 2, "f2": 1})


def test_remaining_with_finalizers_waits_fifteen_seconds() -> None:
    """No estimate of the type's own, but finalizers: upstream's 15 s."""
    remaining = deletion.remaining_of(WIDGETS, "ns", [item("a", "example.com/hold")], 0)
    assert remaining == Remaining(15, 1, {"example.com/hold": 1})


def test_remaining_with_nothing_to_wait_for_is_an_error() -> None:
    with pytest.raises(UnexpectedContent) as caught:
        deletion.remaining_of(DEPLOYMENTS, "ns", [item("a")], 0)
    assert caught.value.args[0] == (
        "unexpected items still remain in namespace: ns for gvr: apps/v1, Resource=deployments"
    )
    assert caught.value.args[1] == Remaining(0, 1)


def test_pods_estimate_is_the_longest_grace_of_pods_not_terminal() -> None:
    """estimateGracefulTerminationForPods: terminal pods are left out; pods without a
    grace period count nothing."""
    pods: list[dict[str, Any]] = [
        {"spec": {"terminationGracePeriodSeconds": 30}, "status": {"phase": "Running"}},
        {"spec": {"terminationGracePeriodSeconds": 120}, "status": {"phase": "Succeeded"}},
        {"spec": {"terminationGracePeriodSeconds": 90}, "status": {"phase": "Failed"}},
        {"spec": {"terminationGracePeriodSeconds": 45}, "status": {"phase": "Pending"}},
        {"spec": {}, "status": {}},
    ]
    assert deletion.pods_estimate(pods) == 45
    assert deletion.pods_estimate([]) == 0


def test_the_estimate_lapses_once_it_has_passed_since_the_deletion() -> None:
    deleted = datetime(2026, 1, 1, tzinfo=UTC)
    assert deletion.allowed_estimate(30, deleted, deleted + timedelta(seconds=29)) == 30
    assert deletion.allowed_estimate(30, deleted, deleted + timedelta(seconds=30)) == 0
    assert deletion.allowed_estimate(0, deleted, deleted) == 0


@pytest.mark.parametrize(("estimate", "seconds"), [(1, 1.0), (15, 8.0), (30, 16.0), (31, 16.0)])
def test_requeue_is_half_the_estimate_plus_one_in_whole_seconds(
    estimate: int, seconds: float
) -> None:
    assert deletion.requeue_seconds(estimate) == seconds


def test_finalizing_removes_only_the_token_and_sorts_the_rest() -> None:
    ns = {"spec": {"finalizers": ["z-other", "kubernetes", "a-other", "z-other"]}}
    assert deletion.finalized_spec(ns) == ["a-other", "z-other"]
    assert deletion.finalized_spec({"spec": {}}) == []


def test_totals_skip_types_with_nothing_remaining() -> None:
    totals = Totals()
    totals.add(WIDGETS, Remaining(15, 2, {"f": 2}))
    totals.add(DEPLOYMENTS, Remaining(0, 0))
    totals.add(deletion.PODS, Remaining(30, 1, {"f": 1, "g": 0}))
    assert totals.by_resource == {WIDGETS: 2, deletion.PODS: 1}
    assert totals.by_finalizer == {"f": 3}


# Conditions -----------------------------------------------------------------------------
def test_a_clean_sync_writes_every_ok_condition() -> None:
    """TestUpdateConditions "no errors": the five types, False, upstream's ok words, in
    upstream's order."""
    status: dict[str, Any] = {"phase": "Terminating"}
    assert ConditionUpdater(T0).update(status)
    assert [c["type"] for c in status["conditions"]] == list(CONDITION_TYPES)
    for c in status["conditions"]:
        assert c["status"] == "False"
        assert c["reason"] == deletion.OK_REASONS[c["type"]]
        assert c["message"] == deletion.OK_MESSAGES[c["type"]]
        assert c["lastTransitionTime"] == T0


def test_failures_become_true_conditions_with_upstreams_words() -> None:
    updater = ConditionUpdater(T0)
    updater.discovery_failed("discovery broke")
    updater.delete_content_failed("b failed")
    updater.delete_content_failed("a failed")
    totals = Totals()
    totals.add(WIDGETS, Remaining(15, 2, {"example.com/hold": 2}))
    totals.add(deletion.PODS, Remaining(30, 1))
    updater.content_totals(totals)
    status: dict[str, Any] = {}
    updater.update(status)
    got = by_type(status)
    assert got["NamespaceDeletionDiscoveryFailure"] == {
        "type": "NamespaceDeletionDiscoveryFailure",
        "status": "True",
        "lastTransitionTime": T0,
        "reason": "DiscoveryFailed",
        "message": "discovery broke",
    }
    assert got["NamespaceDeletionContentFailure"]["reason"] == "ContentDeletionFailed"
    assert got["NamespaceDeletionContentFailure"]["message"] == (
        "Failed to delete all resource types, 2 remaining: a failed, b failed"
    )
    assert got["NamespaceContentRemaining"]["reason"] == "SomeResourcesRemain"
    assert got["NamespaceContentRemaining"]["message"] == (
        "Some resources are remaining: pods. has 1 resource instances, "
        "widgets.example.com has 2 resource instances"
    )
    assert got["NamespaceFinalizersRemaining"]["reason"] == "SomeFinalizersRemain"
    assert got["NamespaceFinalizersRemaining"]["message"] == (
        "Some content in the namespace has finalizers remaining: "
        "example.com/hold in 2 resource instances"
    )
    assert got["NamespaceDeletionGroupVersionParsingFailure"]["status"] == "False"


def test_group_version_failure_condition() -> None:
    updater = ConditionUpdater(T0)
    updater.group_version_failed("unexpected GroupVersion string: a/b/c")
    status: dict[str, Any] = {}
    updater.update(status)
    got = by_type(status)["NamespaceDeletionGroupVersionParsingFailure"]
    assert (got["status"], got["reason"], got["message"]) == (
        "True",
        "GroupVersionParsingFailed",
        "unexpected GroupVersion string: a/b/c",
    )


def test_unchanged_conditions_write_nothing() -> None:
    """A second sync that finds the same is no status write (upstream's hasChanged)."""
    status: dict[str, Any] = {}
    ConditionUpdater(T0).update(status)
    assert not ConditionUpdater(T1).update(status)
    assert {c["lastTransitionTime"] for c in status["conditions"]} == {T0}


def test_transition_time_moves_only_when_the_status_does() -> None:
    status: dict[str, Any] = {}
    first = ConditionUpdater(T0)
    totals = Totals()
    totals.add(WIDGETS, Remaining(15, 2, {"f": 2}))
    first.content_totals(totals)
    first.update(status)
    # Same status (True), another message: the transition time stays.
    second = ConditionUpdater(T1)
    totals = Totals()
    totals.add(WIDGETS, Remaining(15, 1, {"f": 1}))
    second.content_totals(totals)
    assert second.update(status)
    remaining = by_type(status)["NamespaceContentRemaining"]
    assert remaining["message"].endswith("widgets.example.com has 1 resource instances")
    assert remaining["lastTransitionTime"] == T0
    # Cleared: False, and the transition time moves.
    third = ConditionUpdater(T1)
    assert third.update(status)
    remaining = by_type(status)["NamespaceContentRemaining"]
    assert (remaining["status"], remaining["lastTransitionTime"]) == ("False", T1)


def test_conditions_of_others_are_kept() -> None:
    status: dict[str, Any] = {"conditions": [{"type": "SomeoneElses", "status": "True"}]}
    ConditionUpdater(T0).update(status)
    assert status["conditions"][0] == {"type": "SomeoneElses", "status": "True"}
    assert len(status["conditions"]) == 6
