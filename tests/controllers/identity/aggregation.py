"""Fixtures and scenarios of the clusterrole-aggregation controller's tests.

Steward's controller runs in this process against ``id_cluster`` (no upstream
clusterrole-aggregation there) as the identity ``steward:controller:clusterrole-aggregation``,
with only the RBAC of ``deploy/rbac/controller-clusterrole-aggregation.yaml``. The
session's ``cluster`` runs upstream's controller: the reference of the differential tests.

ClusterRoles are cluster-wide, so every role a test makes is named with a suffix of its
own (the same on both sides of a scenario) and carries a label of that suffix, which the
aggregated role selects; everything is deleted at the end.
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio

from steward.cluster import LocalCluster
from steward.controllers.clusterroleaggregation.controller import CONTROLLER
from steward.kube import ConflictError, KubeClient, NotFoundError
from tests.controllers.harness import Starter, controllers, eventually, in_loop_informer

IDENTITY = "controller-clusterrole-aggregation"
ROLES = "/apis/rbac.authorization.k8s.io/v1/clusterroles"
WITHIN = 60.0
"""Seconds a side may take to reach a scenario's point (a deadline, not a measurement)."""
BOOTSTRAP_AGGREGATES = ("admin", "edit", "view")
"""kube-apiserver's aggregated bootstrap roles (their rules come from the controller)."""

Rules = list[dict[str, list[str]]]


@pytest_asyncio.fixture
async def agg_controllers(id_cluster: LocalCluster) -> AsyncIterator[Starter]:
    """Starts Steward's controller against ``id_cluster``, as its own identity, 5 workers
    (upstream's); every instance is stopped at the end."""
    identity = id_cluster.component_kubeconfig(IDENTITY)
    async with (
        in_loop_informer(id_cluster) as informer,
        controllers(CONTROLLER, identity, informer, "", workers=5) as starter,
    ):
        yield starter


@pytest.fixture
def suffix() -> str:
    """A name part for the roles of one test, the same on both sides."""
    return uuid.uuid4().hex[:6]


# Reads and writes -----------------------------------------------------------------------
def role(
    name: str, labels: dict[str, str] | None = None, rules: Rules | None = None
) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRole",
        "metadata": {"name": name, "labels": labels or {}},
        "rules": rules or [],
    }


def aggregated(name: str, *selectors: dict[str, str]) -> dict[str, Any]:
    body = role(name)
    body["aggregationRule"] = {"clusterRoleSelectors": [{"matchLabels": s} for s in selectors]}
    del body["rules"]
    return body


def rules_of(kube: KubeClient, name: str) -> Rules | None:
    """The role's rules (None once it is gone)."""
    try:
        return list(kube.request("GET", f"{ROLES}/{name}").get("rules") or [])
    except NotFoundError:
        return None


def managers_of_rules(kube: KubeClient, name: str) -> list[tuple[str, str]]:
    """(manager, operation) of each managedFields entry that owns ``rules``."""
    obj = kube.request("GET", f"{ROLES}/{name}")
    return sorted(
        (m.get("manager", ""), m.get("operation", ""))
        for m in obj["metadata"].get("managedFields") or ()
        if "f:rules" in (m.get("fieldsV1") or {})
    )


def set_role(kube: KubeClient, name: str, change: Any) -> None:
    """Read the role, ``change`` it and PUT it back (again on a conflict)."""
    for _ in range(20):
        obj = kube.request("GET", f"{ROLES}/{name}")
        change(obj)
        try:
            kube.request("PUT", f"{ROLES}/{name}", obj)
            return
        except ConflictError:
            continue
    raise AssertionError(f"ClusterRole {name}: 20 conflicts in a row")


def delete_roles(kube: KubeClient, *names: str) -> None:
    for name in names:
        with contextlib.suppress(NotFoundError):
            kube.request("DELETE", f"{ROLES}/{name}")


@contextlib.contextmanager
def cleanup(kube: KubeClient, *names: str) -> Iterator[None]:
    try:
        yield
    finally:
        delete_roles(kube, *names)


async def rules_become(kube: KubeClient, name: str, expected: Rules, what: str) -> None:
    await eventually(
        lambda: rules_of(kube, name) == expected,
        what,
        WITHIN,
        failure=lambda last: f"{what}: rules of {name} are {rules_of(kube, name)}",
    )


# The rules the scenarios use ------------------------------------------------------------
HAMMER: Rules = [
    {"verbs": ["get"], "apiGroups": [""], "resources": ["configmaps"]},
    {"verbs": ["list"], "apiGroups": [""], "resources": ["configmaps"]},
]
CHISEL: Rules = [{"verbs": ["watch"], "apiGroups": ["apps"], "resources": ["deployments"]}]
SAW: Rules = [
    {"verbs": ["get"], "apiGroups": [""], "resources": ["secrets"], "resourceNames": ["a"]},
    {"verbs": ["get"], "nonResourceURLs": ["/steward-test"]},
]


# Scenarios ------------------------------------------------------------------------------
async def selected_roles(
    kube: KubeClient, suffix: str
) -> tuple[list[tuple[str, Rules | None]], list[tuple[str, str]]]:
    """An aggregated role with two selectors over three roles (one matched by both, one
    repeating another's rule, names out of creation order): the rules in upstream's
    order; then a selected role's rules change, a role loses its label, a role is
    deleted, and the aggregate follows each time. The snapshot is the aggregate's rules
    at each step, and the field managers of the rules (before the last step, which
    leaves no rules to own)."""
    a, b = {f"agg-{suffix}": "a"}, {f"agg-{suffix}-b": "yes"}
    names = [f"agg-{suffix}", f"zz-hammer-{suffix}", f"aa-chisel-{suffix}", f"mm-saw-{suffix}"]
    agg, hammer, chisel, saw = names
    steps: list[tuple[str, Rules | None]] = []
    with cleanup(kube, *names):
        kube.request("POST", ROLES, role(hammer, {**a}, HAMMER))
        kube.request("POST", ROLES, role(chisel, {**a, **b}, [*CHISEL, HAMMER[0]]))
        kube.request("POST", ROLES, role(saw, {**b}, SAW))
        kube.request("POST", ROLES, aggregated(agg, a, b))
        first = [*CHISEL, HAMMER[0], HAMMER[1], *SAW]
        await rules_become(kube, agg, first, "the first aggregation")
        steps.append(("created", rules_of(kube, agg)))

        def new_rules(obj: dict[str, Any]) -> None:
            obj["rules"] = [{"verbs": ["delete"], "apiGroups": [""], "resources": ["pods"]}]

        set_role(kube, hammer, new_rules)
        changed = [
            *CHISEL,
            HAMMER[0],
            {"verbs": ["delete"], "apiGroups": [""], "resources": ["pods"]},
            *SAW,
        ]
        await rules_become(kube, agg, changed, "a selected role's new rules")
        steps.append(("rules changed", rules_of(kube, agg)))

        def unlabel(obj: dict[str, Any]) -> None:
            obj["metadata"]["labels"] = {}

        set_role(kube, chisel, unlabel)
        unlabelled = [{"verbs": ["delete"], "apiGroups": [""], "resources": ["pods"]}, *SAW]
        await rules_become(kube, agg, unlabelled, "a role's label removed")
        steps.append(("label removed", rules_of(kube, agg)))

        delete_roles(kube, saw)
        await rules_become(kube, agg, unlabelled[:1], "a selected role deleted")
        steps.append(("role deleted", rules_of(kube, agg)))
        managers = managers_of_rules(kube, agg)

        delete_roles(kube, hammer)
        await rules_become(kube, agg, [], "the last selected role deleted")
        steps.append(("none selected", rules_of(kube, agg)))
    return steps, managers
