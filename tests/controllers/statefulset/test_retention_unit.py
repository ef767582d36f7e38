"""PVC owner references under the retention policy (upstream's isClaimOwnerUpToDate,
updateClaimOwnerRefForSetAndPod, PodClaimIsStale)."""

from __future__ import annotations

from typing import Any

import pytest

from steward.controllers.statefulset import retention
from tests.controllers.statefulset.builders import pod, statefulset

pytestmark = pytest.mark.unit

SET_REF = {"apiVersion": "apps/v1", "kind": "StatefulSet", "name": "web", "uid": "set-uid"}


def with_policy(scaled: str, deleted: str, replicas: int = 2) -> dict[str, Any]:
    sts = statefulset(replicas, claims=("data",))
    sts["spec"]["persistentVolumeClaimRetentionPolicy"] = {
        "whenScaled": scaled,
        "whenDeleted": deleted,
    }
    return sts


def pod_ref(n: int, uid: str | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "name": f"web-{n}",
        "uid": uid or f"pod-uid-{n}",
        "controller": True,
    }


def set_ref(uid: str = "set-uid") -> dict[str, Any]:
    return {**SET_REF, "uid": uid, "controller": True}


def claim(*refs: dict[str, Any]) -> dict[str, Any]:
    return {"metadata": {"name": "data-web-0", "ownerReferences": list(refs)}}


def names(refs: list[dict[str, Any]]) -> set[str]:
    return {f"{r['kind']}/{r['name']}" for r in refs}


# (whenScaled, whenDeleted, ordinal) -> the owners the claim should have. Replicas: 2.
CASES = [
    ("Retain", "Retain", 0, set()),
    ("Retain", "Retain", 5, set()),
    ("Retain", "Delete", 0, {"StatefulSet/web"}),
    ("Retain", "Delete", 5, {"StatefulSet/web"}),
    ("Delete", "Retain", 0, set()),
    ("Delete", "Retain", 5, {"Pod/web-5"}),
    ("Delete", "Delete", 0, {"StatefulSet/web"}),
    ("Delete", "Delete", 5, {"Pod/web-5"}),
]


@pytest.mark.parametrize(("scaled", "deleted", "ordinal", "owners"), CASES)
def test_policy_table(scaled: str, deleted: str, ordinal: int, owners: set[str]) -> None:
    sts, p = with_policy(scaled, deleted), pod(ordinal)
    bare = claim()
    wanted = retention.updated_owner_refs(bare, sts, p)
    assert names(wanted) == owners
    assert all(r["controller"] for r in wanted)
    assert retention.owner_up_to_date({"metadata": {"ownerReferences": wanted}}, sts, p)
    assert retention.owner_up_to_date(bare, sts, p) is (owners == set())
    both = claim(set_ref(), pod_ref(ordinal))
    assert retention.owner_up_to_date(both, sts, p) is False
    assert names(retention.updated_owner_refs(both, sts, p)) == owners


def test_stale_reference_is_left_alone() -> None:
    sts, p = with_policy("Delete", "Delete"), pod(0)
    stale = claim(pod_ref(0, uid="older"))
    assert retention.owner_up_to_date(stale, sts, p)
    assert retention.claim_is_stale(sts, p, {"data-web-0": stale})
    assert not retention.claim_is_stale(with_policy("Retain", "Delete"), p, {"data-web-0": stale})
    assert not retention.claim_is_stale(sts, p, {})


def test_another_controller_wins() -> None:
    sts, p = with_policy("Retain", "Delete"), pod(0)
    other = {"apiVersion": "x/v1", "kind": "Thing", "name": "t", "uid": "t", "controller": True}
    assert retention.owner_up_to_date(claim(other), sts, p)
    mixed = claim(other, set_ref())
    assert not retention.owner_up_to_date(mixed, sts, p)
    assert retention.updated_owner_refs(mixed, sts, p) == [other]


def test_non_controller_reference_is_fixed() -> None:
    sts, p = with_policy("Retain", "Delete"), pod(0)
    plain = claim({**SET_REF})
    assert not retention.owner_up_to_date(plain, sts, p)
    assert retention.updated_owner_refs(plain, sts, p) == [
        {**SET_REF, "controller": True, "blockOwnerDeletion": True}
    ]


def test_unset_policy_is_retain() -> None:
    assert retention.policy(statefulset(1)) == ("Retain", "Retain")


def test_claims_off_policy_lists_fixes_for_existing_claims_only() -> None:
    sts, p = with_policy("Retain", "Delete"), pod(0)
    sts["spec"]["volumeClaimTemplates"].append({"metadata": {"name": "logs"}})
    existing = {"data-web-0": claim(), "logs-web-0": {"metadata": {"name": "logs-web-0"}}}
    existing["logs-web-0"]["metadata"]["ownerReferences"] = [set_ref()]
    fixes = retention.claims_off_policy(sts, p, existing)
    assert [f["metadata"]["name"] for f in fixes] == ["data-web-0"]
    assert names(fixes[0]["metadata"]["ownerReferences"]) == {"StatefulSet/web"}
    assert retention.claims_off_policy(sts, p, {}) == []
