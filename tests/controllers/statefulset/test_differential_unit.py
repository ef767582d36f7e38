"""Steward's StatefulSet decisions against kube-controller-manager's, scenario by
scenario: testdata/scenarios.json holds 200 random syncs (scenarios.py) and what the
pinned upstream's statefulset control did with each (tools/statefulsetdiff runs its
``UpdateStatefulSet`` with recording fakes): the pod writes (in order under
OrderedReady; as a multiset under Parallel, where upstream writes a batch
concurrently), the revisions created, renumbered and deleted, the status and whether it
is written."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.controllers.statefulset.scenarios import PATH, normalized, steward

pytestmark = pytest.mark.unit

CASES = json.loads(PATH.read_text())
STATUS = (
    "replicas",
    "readyReplicas",
    "availableReplicas",
    "currentReplicas",
    "updatedReplicas",
    "currentRevision",
    "updateRevision",
    "observedGeneration",
    "collisionCount",
)


def _key(item: dict[str, Any]) -> str:
    return json.dumps(item, sort_keys=True)


def _status(status: dict[str, Any] | None) -> dict[str, Any] | None:
    return None if status is None else {k: status.get(k) or 0 for k in STATUS}


@pytest.mark.parametrize("case", CASES, ids=[c["id"] for c in CASES])
def test_same_decisions_as_upstream(case: dict[str, Any]) -> None:
    upstream, ours = case["upstream"], steward(case["scenario"])
    theirs_actions = normalized(upstream["actions"] or [])
    our_actions = normalized(ours["actions"])
    if case["scenario"]["set"]["spec"]["podManagementPolicy"] == "Parallel":
        theirs_actions.sort()
        our_actions.sort()
    assert our_actions == theirs_actions
    assert [_key(c) for c in ours["revisionChanges"]] == [
        _key(c) for c in upstream["revisionChanges"] or []
    ]
    assert _status(ours["status"]) == _status(upstream["status"])
    assert (ours["written"] is None) == (upstream["written"] is None)
    assert bool(ours["error"]) == bool(upstream.get("error"))


def test_scenarios_cover_the_paths() -> None:
    # A regenerated file must still exercise each kind of write.
    verbs = {a["verb"] for c in CASES for a in c["upstream"]["actions"] or []}
    changes = {r["verb"] for c in CASES for r in c["upstream"]["revisionChanges"] or []}
    assert verbs == {"create", "delete", "update", "create-claim", "update-claim"}
    assert changes == {"create", "renumber", "delete"}
    policies = {c["scenario"]["set"]["spec"]["podManagementPolicy"] for c in CASES}
    assert policies == {"OrderedReady", "Parallel"}
    assert any(c["upstream"].get("error") for c in CASES)  # Recreate, gate off
    assert any("deletionTimestamp" in c["scenario"]["set"]["metadata"] for c in CASES)
