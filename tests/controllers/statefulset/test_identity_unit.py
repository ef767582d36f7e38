"""A StatefulSet pod's identity (upstream's stateful_set_utils.go): ordinals from names,
the ordinal range, identity and storage checks, claims, the revision a missing pod gets,
and maxUnavailable."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest

from steward.controllers.statefulset import identity
from tests.controllers.statefulset.builders import NOW, pod, statefulset

pytestmark = pytest.mark.unit


def named(name: str) -> dict[str, Any]:
    return {"metadata": {"name": name}}


@pytest.mark.parametrize(
    ("name", "parent", "ordinal"),
    [
        ("web-0", "web", 0),
        ("web-12", "web", 12),
        ("my-web-3", "my-web", 3),
        ("web-0-1", "web-0", 1),  # the last dash
        ("web", "", -1),
        ("web-", "", -1),
        ("web-x", "", -1),
        ("web-2147483647", "web", 2147483647),
        ("web-2147483648", "web", -1),  # beyond int32
    ],
)
def test_parent_and_ordinal(name: str, parent: str, ordinal: int) -> None:
    assert identity.parent_and_ordinal(named(name)) == (parent, ordinal)


def test_ordinal_range_with_start() -> None:
    sts = statefulset(3, start=5)
    assert (identity.start_ordinal(sts), identity.end_ordinal(sts)) == (5, 7)
    assert [identity.in_range(named(f"web-{n}"), sts) for n in (4, 5, 7, 8)] == [
        False,
        True,
        True,
        False,
    ]
    assert identity.end_ordinal(statefulset(0)) == -1


def test_identity_matches_needs_name_namespace_and_label() -> None:
    sts = statefulset(3)
    good = pod(1)
    assert identity.identity_matches(sts, good)
    wrong_ns = {**good, "metadata": {**good["metadata"], "namespace": "other"}}
    assert not identity.identity_matches(sts, wrong_ns)
    no_label = {**good, "metadata": {**good["metadata"], "labels": {}}}
    assert not identity.identity_matches(sts, no_label)
    assert identity.identity_matches(sts, identity.with_identity(sts, no_label))
    other_set = {**good, "metadata": {**good["metadata"], "name": "db-1"}}
    assert not identity.identity_matches(sts, other_set)


def test_storage_matches_each_claim_template() -> None:
    sts = statefulset(3, claims=("data", "logs"))
    assert identity.storage_matches(sts, pod(2, claims=("data", "logs")))
    assert not identity.storage_matches(sts, pod(2, claims=("data",)))
    wrong = pod(2, claims=("data", "logs"))
    wrong["spec"]["volumes"][1]["persistentVolumeClaim"]["claimName"] = "logs-web-1"
    assert not identity.storage_matches(sts, wrong)
    fixed = identity.with_storage(sts, wrong)
    assert identity.storage_matches(sts, fixed)


def test_with_storage_replaces_same_named_volumes_and_keeps_others() -> None:
    sts = statefulset(1, claims=("data",))
    p = pod(0)
    p["spec"]["volumes"] = [{"name": "data", "emptyDir": {}}, {"name": "tmp", "emptyDir": {}}]
    assert identity.with_storage(sts, p)["spec"]["volumes"] == [
        {"name": "data", "persistentVolumeClaim": {"claimName": "data-web-0"}},
        {"name": "tmp", "emptyDir": {}},
    ]


def test_claims_take_the_selector_labels() -> None:
    sts = statefulset(1, claims=("data",))
    sts["spec"]["volumeClaimTemplates"][0]["metadata"]["labels"] = {"app": "x", "k": "v"}
    claim = identity.claims(sts, 4)["data"]
    assert claim["metadata"]["name"] == "data-web-4"
    assert claim["metadata"]["namespace"] == "ns"
    assert claim["metadata"]["labels"] == {"app": "web", "k": "v"}


@pytest.mark.parametrize(
    ("rolling", "strategy", "current", "ordinal", "expected"),
    [
        ({"partition": 2}, "RollingUpdate", 0, 1, True),
        ({"partition": 2}, "RollingUpdate", 0, 2, False),
        (None, "RollingUpdate", 2, 1, True),  # no rollingUpdate: status.currentReplicas
        (None, "RollingUpdate", 2, 2, False),
        (None, "OnDelete", 5, 0, False),
    ],
)
def test_builds_current(
    rolling: dict[str, Any] | None, strategy: str, current: int, ordinal: int, expected: bool
) -> None:
    sts = statefulset(3, strategy=strategy, partition=None, start=0)
    if rolling is not None:
        sts["spec"]["updateStrategy"]["rollingUpdate"] = rolling
    assert identity.builds_current(sts, current, ordinal) is expected


def test_availability_and_unavailability() -> None:
    ready = pod(0, ready_for=10)
    assert identity.is_available(ready, 10, NOW)
    assert not identity.is_available(ready, 10, NOW - timedelta(seconds=1))
    assert identity.is_available(ready, 0, NOW)
    assert identity.is_unavailable(pod(0, deleting=True), 0, NOW)
    pending_ready = pod(0, phase="Pending")
    assert identity.is_available(pending_ready, 0, NOW)  # availability ignores the phase
    assert not identity.is_running_and_ready(pending_ready)


@pytest.mark.parametrize(
    ("value", "replicas", "expected"),
    [(None, 5, 1), (3, 5, 3), ("40%", 5, 2), ("1%", 5, 1), ("100%", 7, 7), (0, 5, 1)],
)
def test_max_unavailable(value: int | str | None, replicas: int, expected: int) -> None:
    assert identity.max_unavailable(value, replicas) == expected


def test_max_unavailable_rejects_a_plain_string() -> None:
    with pytest.raises(ValueError, match="IntOrString"):
        identity.max_unavailable("3", 5)
