"""Steward's clusterrole-aggregation controller against ``id_cluster`` (no upstream
aggregation there), and side by side with upstream's (the session ``cluster``)."""

from __future__ import annotations

import asyncio

import pytest

from steward.kube import KubeClient
from tests.controllers.harness import Starter, stays, upstream_kube
from tests.controllers.identity.aggregation import (
    BOOTSTRAP_AGGREGATES,
    ROLES,
    agg_controllers,
    rules_become,
    rules_of,
    selected_roles,
    set_role,
    suffix,
)

__all__ = ["agg_controllers", "suffix", "upstream_kube"]

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]


async def test_same_rules_as_upstream(
    upstream_kube: KubeClient, id_kube: KubeClient, agg_controllers: Starter, suffix: str
) -> None:
    """Two selectors over three roles, then a rule change, a label removed, roles
    deleted: at each step the aggregate's rules are upstream's, in upstream's order, and
    owned by upstream's field manager through an apply."""
    agg_controllers.start()
    upstream, steward = await asyncio.gather(
        selected_roles(upstream_kube, suffix), selected_roles(id_kube, suffix)
    )
    assert upstream[1] == [("clusterrole-aggregation-controller", "Apply")]
    assert steward == upstream


async def test_bootstrap_aggregates_as_upstream(
    upstream_kube: KubeClient, id_kube: KubeClient, agg_controllers: Starter
) -> None:
    """kube-apiserver's admin, edit and view hold upstream's rules, in upstream's order;
    emptied, view is filled again (and edit and admin, which aggregate it, stay whole)."""
    agg_controllers.start()
    for name in BOOTSTRAP_AGGREGATES:
        expected = rules_of(upstream_kube, name)
        assert expected, f"upstream's {name} is empty"
        await rules_become(id_kube, name, expected, f"{name} filled as upstream's")

    def empty(obj: dict) -> None:  # type: ignore[type-arg]
        obj["rules"] = []

    set_role(id_kube, "view", empty)
    for name in BOOTSTRAP_AGGREGATES:
        await rules_become(id_kube, name, rules_of(upstream_kube, name) or [], f"{name} refilled")


async def test_a_role_without_aggregation_rule_is_left_alone(
    id_kube: KubeClient, agg_controllers: Starter, suffix: str
) -> None:
    """The control of the tests above: rules of a plain role, even one labelled like the
    roles an aggregate selects, are never rewritten; and without the controller an
    aggregate stays empty in id_cluster."""
    name, agg = f"plain-{suffix}", f"agg-{suffix}"
    rules = [{"verbs": ["get"], "apiGroups": [""], "resources": ["pods"]}]
    id_kube.request(
        "POST",
        ROLES,
        {"metadata": {"name": name, "labels": {f"agg-{suffix}": "a"}}, "rules": rules},
    )
    id_kube.request(
        "POST",
        ROLES,
        {
            "metadata": {"name": agg},
            "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {f"agg-{suffix}": "a"}}]},
        },
    )
    try:
        await stays(
            lambda: rules_of(id_kube, agg) == [], "the aggregate empty without Steward", 3.0
        )
        agg_controllers.start()
        await rules_become(id_kube, agg, rules, "the aggregate filled")
        assert rules_of(id_kube, name) == rules
    finally:
        for role in (name, agg):
            id_kube.request("DELETE", f"{ROLES}/{role}")
