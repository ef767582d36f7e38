"""The aggregation's decisions (no cluster): upstream's unit cases of
``TestSyncClusterRole`` as a table of our own, and the edges of the selectors, the
semantic equality and the apply request."""

from __future__ import annotations

from typing import Any

import pytest

from steward.controllers.clusterroleaggregation.rules import (
    FIELD_MANAGER,
    InvalidSelector,
    aggregate,
    apply_body,
    normalized_rule,
    same_rules,
    selects,
)

pytestmark = pytest.mark.unit

HAMMER = [
    {"verbs": ["hammer"], "resources": ["nails"]},
    {"verbs": ["hammer"], "resources": ["wedges"]},
]
CHISEL = [{"verbs": ["chisel"], "resources": ["mortises"]}]
SAW = [{"verbs": ["saw"], "resources": ["boards"]}]
BAR = {"foo": "bar"}
NOT_BAR = {"foo": "not-bar"}

Role = tuple[str, dict[str, str], list[dict[str, Any]]]


def sel(*labels: dict[str, str]) -> list[dict[str, Any]]:
    return [{"matchLabels": m} for m in labels]


# name: (roles besides the aggregate, the aggregate's selectors, its rules now,
#        the rules it must get, whether a write is due)
CASES: dict[str, tuple[list[Role], list[dict[str, Any]], list[Any], list[Any], bool]] = {
    "dead rules removed": ([("hammer", BAR, HAMMER)], sel(BAR), SAW, HAMMER, True),
    "unselected rules stripped": ([("hammer", NOT_BAR, HAMMER)], sel(BAR), HAMMER, [], True),
    "selected by name, in order": (
        [("hammer", BAR, HAMMER), ("chisel", BAR, CHISEL), ("saw", NOT_BAR, SAW)],
        sel(BAR),
        [],
        [*CHISEL, *HAMMER],
        True,
    ),
    "selectors in their order": (
        [("hammer", BAR, HAMMER), ("chisel", BAR, CHISEL), ("saw", NOT_BAR, SAW)],
        sel(BAR, NOT_BAR),
        [],
        [*CHISEL, *HAMMER, *SAW],
        True,
    ),
    "duplicates dropped": (
        [
            ("hammer", BAR, HAMMER),
            ("chisel", BAR, CHISEL),
            ("saw", BAR, SAW),
            ("other-saw", NOT_BAR, SAW),
        ],
        sel(BAR, NOT_BAR),
        [],
        [*CHISEL, *HAMMER, *SAW],
        True,
    ),
    "nothing to write": ([("hammer", BAR, HAMMER)], sel(BAR), HAMMER, HAMMER, False),
    "a role's own duplicate rules": (
        [("hammer", BAR, [*HAMMER, HAMMER[0]])],
        sel(BAR),
        [],
        HAMMER,
        True,
    ),
    "a role in two selectors counts once": (
        [("hammer", {"foo": "bar", "x": "y"}, HAMMER), ("saw", {"x": "y"}, SAW)],
        sel(BAR, {"x": "y"}),
        [],
        [*HAMMER, *SAW],
        True,
    ),
    # Go compares names byte by byte: upper case sorts before lower case.
    "names in byte order": (
        [("b", BAR, SAW), ("B", BAR, CHISEL), ("a", BAR, HAMMER)],
        sel(BAR),
        [],
        [*CHISEL, *HAMMER, *SAW],
        True,
    ),
    "no selectors": ([("hammer", BAR, HAMMER)], [], HAMMER, [], True),
    "the empty selector selects every other role": (
        [("hammer", BAR, HAMMER), ("saw", {}, SAW)],
        [{}],
        [],
        [*HAMMER, *SAW],
        True,
    ),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_aggregate(case: str) -> None:
    roles, selectors, current, expected, write = CASES[case]
    combined: Role = ("combined", BAR, current)  # selected by its own selector: skipped
    rules = aggregate("combined", selectors, [*roles, combined])
    assert rules == [normalized_rule(r) for r in expected]
    assert (not same_rules(rules, current)) is write


def test_semantic_equality_ignores_empty_lists_not_order() -> None:
    assert same_rules([{"verbs": ["get"], "resourceNames": []}], [{"verbs": ["get"]}])
    assert same_rules(None, [])
    assert not same_rules([{"verbs": ["get", "list"]}], [{"verbs": ["list", "get"]}])
    assert not same_rules(HAMMER, list(reversed(HAMMER)))


def test_a_rule_equal_but_for_empty_lists_is_a_duplicate() -> None:
    roles: list[Role] = [
        ("a", BAR, [{"verbs": ["get"], "resources": ["pods"], "apiGroups": [""]}]),
        (
            "b",
            BAR,
            [{"verbs": ["get"], "resources": ["pods"], "apiGroups": [""], "resourceNames": []}],
        ),
    ]
    assert aggregate("x", sel(BAR), roles) == [
        {"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}
    ]


def test_match_expressions() -> None:
    labels = {"tier": "web", "env": "prod"}
    assert selects(
        {"matchExpressions": [{"key": "tier", "operator": "In", "values": ["web"]}]}, labels
    )
    assert not selects(
        {"matchExpressions": [{"key": "env", "operator": "NotIn", "values": ["prod"]}]}, labels
    )
    assert selects({"matchExpressions": [{"key": "env", "operator": "Exists"}]}, labels)
    assert not selects({"matchExpressions": [{"key": "env", "operator": "DoesNotExist"}]}, labels)
    assert not selects(
        {"matchLabels": {"tier": "web"}, "matchExpressions": [{"key": "x", "operator": "Exists"}]},
        labels,
    )
    assert selects(None, labels) and selects({}, {})


@pytest.mark.parametrize(
    "expr",
    [
        {"key": "a", "operator": "Equals", "values": ["b"]},
        {"key": "a", "operator": "In", "values": []},
        {"key": "a", "operator": "Exists", "values": ["b"]},
    ],
)
def test_selectors_upstream_refuses_raise(expr: dict[str, Any]) -> None:
    with pytest.raises(InvalidSelector):
        aggregate("x", [{"matchExpressions": [expr]}], [("a", {"a": "b"}, HAMMER)])


def test_apply_body_as_upstream_sends_it() -> None:
    """The apply configuration upstream serializes: name and rules only, empty fields
    left out, no rules at all when none are selected (so the manager's rules go)."""
    rules = [
        normalized_rule(
            {"verbs": ["get"], "apiGroups": [""], "resources": ["pods"], "resourceNames": []}
        )
    ]
    assert apply_body("combined", rules) == {
        "kind": "ClusterRole",
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "metadata": {"name": "combined"},
        "rules": [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}],
    }
    assert "rules" not in apply_body("combined", [])
    assert FIELD_MANAGER == "clusterrole-aggregation-controller"


def test_declared_as_upstream_runs_it() -> None:
    """KCM's alias, its 5 workers, the shared informer's 12 h resync, its queue's name,
    never beside upstream's; ClusterRoles read as the three paths the sync needs."""
    from steward.controllers.clusterroleaggregation.controller import CLUSTERROLES, CONTROLLER

    assert CONTROLLER.name == "clusterrole-aggregation"
    assert CONTROLLER.options.max_concurrent_reconciles == 5
    assert CONTROLLER.options.resync_period == 12 * 3600
    assert CONTROLLER.options.queue_name == "ClusterRoleAggregator"
    assert CONTROLLER.beside_upstream is None
    assert CONTROLLER.enabled_by_default
    sub = CONTROLLER.subscriptions()[CLUSTERROLES]
    assert sub.fields == ("aggregationRule", "metadata.labels", "rules")
