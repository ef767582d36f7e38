"""Steward's garbage collector beside upstream's, scenario by scenario.

Each scenario runs at once on two sides: the session ``cluster`` (every upstream
controller, its garbage collector too) and ``gc_cluster`` (upstream's collector off,
Steward's ``gc`` running). Each side is held to what the scenario asserts (the breakage
its docstring names), and the end states must be equal: which objects of the namespace
exist, with their finalizers and owner references (names; generated pod names masked).

Owners and dependents are ConfigMaps where the kind does not matter (cheap, no pods), a
Deployment where the cascade through upstream's ReplicaSets and kwok's pods does, and a
custom resource whose type is created after Steward's collector started (discovery
followed).
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import pytest

from steward.kube import KubeClient
from tests.controllers.garbagecollector.conftest import (
    configmap,
    custom_resource_definition,
    delete,
    fake_uid,
    get,
    observed,
    owner_ref,
)
from tests.controllers.harness import Running, drop_namespace, eventually, stays
from tests.services import new_namespace

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

Snapshot = list[tuple[str, str, tuple[str, ...], tuple[str, ...]]]
"""(kind, name, finalizers, owner names) of each object of a namespace, sorted."""


@dataclass
class Side:
    """One side of a scenario: its admin client and namespace, and how to wait until its
    collector has observed objects (Steward's graph; upstream's informers are long
    running, so nothing to wait for there)."""

    name: str
    kube: KubeClient
    ns: str
    request: pytest.FixtureRequest
    observed: Callable[..., Awaitable[None]]


@pytest.fixture
def sides(
    gc: Running,
    gc_kube: KubeClient,
    gc_namespace: str,
    upstream_kube: KubeClient,
    upstream_namespace: str,
    request: pytest.FixtureRequest,
) -> tuple[Side, Side]:
    async def steward_observed(*paths: str) -> None:
        await observed(gc, gc_kube, *paths)

    async def upstream_observed(*paths: str) -> None:
        return None

    return (
        Side("upstream", upstream_kube, upstream_namespace, request, upstream_observed),
        Side("steward", gc_kube, gc_namespace, request, steward_observed),
    )


def items(kube: KubeClient, path: str) -> list[dict[str, Any]]:
    return list(kube.request("GET", path).get("items") or ())


COLLECTIONS = (
    ("Deployment", "/apis/apps/v1/namespaces/{ns}/deployments"),
    ("ReplicaSet", "/apis/apps/v1/namespaces/{ns}/replicasets"),
    ("Pod", "/api/v1/namespaces/{ns}/pods"),
    ("ConfigMap", "/api/v1/namespaces/{ns}/configmaps"),
)


def snapshot(kube: KubeClient, ns: str) -> Snapshot:
    found: Snapshot = []
    for kind, path in COLLECTIONS:
        for obj in items(kube, path.format(ns=ns)):
            meta = obj["metadata"]
            name = meta["name"]
            if kind == "ConfigMap" and name == "kube-root-ca.crt":
                continue
            if kind == "Pod":
                name = re.sub(r"-[a-z0-9]{5}$", "-*", name)
            owners = tuple(r["name"] for r in meta.get("ownerReferences") or ())
            found.append((kind, name, tuple(meta.get("finalizers") or ()), owners))
    return sorted(found)


async def both(scenario: Callable[[Side], Awaitable[None]], sides: tuple[Side, Side]) -> None:
    """Run ``scenario`` on both sides at once; their end states must be equal."""
    await asyncio.gather(*(scenario(s) for s in sides))
    upstream, steward = (snapshot(s.kube, s.ns) for s in sides)
    assert steward == upstream


def deployment(kube: KubeClient, ns: str, name: str, replicas: int = 2) -> dict[str, Any]:
    labels = {"app": name}
    return kube.request(
        "POST",
        f"/apis/apps/v1/namespaces/{ns}/deployments",
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": name},
            "spec": {
                "replicas": replicas,
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {"containers": [{"name": "c", "image": "fake"}]},
                },
            },
        },
    )


async def rolled_out(side: Side, replicas: int) -> None:
    """The Deployment's ReplicaSet and pods made, and observed by the collector."""
    ns = side.ns
    sets = f"/apis/apps/v1/namespaces/{ns}/replicasets"
    pods = f"/api/v1/namespaces/{ns}/pods"
    await eventually(
        lambda: len(items(side.kube, sets)) == 1 and len(items(side.kube, pods)) == replicas,
        f"{side.name}: the Deployment's ReplicaSet and pods",
    )
    await side.observed(f"/apis/apps/v1/namespaces/{ns}/deployments", sets, pods)


async def test_background_deletion_cascades_to_replicasets_and_pods(
    sides: tuple[Side, Side],
) -> None:
    """Breakage caught: dependents of a deleted owner left behind (no cascade at all, or
    one level only: the ReplicaSet goes and its pods stay)."""

    async def scenario(side: Side) -> None:
        kube, ns = side.kube, side.ns
        deployment(kube, ns, "web")
        await rolled_out(side, 2)
        delete(kube, f"/apis/apps/v1/namespaces/{ns}/deployments/web", "Background")
        await eventually(
            lambda: (
                not items(kube, f"/apis/apps/v1/namespaces/{ns}/replicasets")
                and not items(kube, f"/api/v1/namespaces/{ns}/pods")
            ),
            f"{side.name}: the ReplicaSet and its pods collected",
        )

    await both(scenario, sides)


async def test_foreground_deletion_waits_for_the_dependents(sides: tuple[Side, Side]) -> None:
    """Breakage caught: the owner's foregroundDeletion finalizer never removed (the owner
    stays Terminating), or removed before its blocking dependents are gone."""

    async def scenario(side: Side) -> None:
        kube, ns = side.kube, side.ns
        deployment(kube, ns, "web")
        await rolled_out(side, 2)
        path = f"/apis/apps/v1/namespaces/{ns}/deployments/web"
        delete(kube, path, "Foreground")
        seen: list[tuple[bool, int]] = []

        def done() -> bool:
            owner = get(kube, path)
            left = len(items(kube, f"/apis/apps/v1/namespaces/{ns}/replicasets"))
            left += len(items(kube, f"/api/v1/namespaces/{ns}/pods"))
            seen.append((owner is not None, left))
            return owner is None and left == 0

        await eventually(done, f"{side.name}: the Deployment gone after its dependents")
        # Never was the owner gone while a dependent remained.
        assert not [s for s in seen if not s[0] and s[1]], (side.name, seen)

    await both(scenario, sides)


async def test_orphan_deletion_keeps_the_dependents_without_the_reference(
    sides: tuple[Side, Side],
) -> None:
    """Breakage caught: orphaned dependents deleted, or left naming the gone owner (the
    next collector pass would delete them), or the owner kept by its orphan finalizer."""

    async def scenario(side: Side) -> None:
        kube, ns = side.kube, side.ns
        deployment(kube, ns, "web")
        await rolled_out(side, 2)
        delete(kube, f"/apis/apps/v1/namespaces/{ns}/deployments/web", "Orphan")
        await eventually(
            lambda: get(kube, f"/apis/apps/v1/namespaces/{ns}/deployments/web") is None,
            f"{side.name}: the Deployment gone",
        )
        sets = items(kube, f"/apis/apps/v1/namespaces/{ns}/replicasets")
        assert len(sets) == 1, side.name
        assert not sets[0]["metadata"].get("ownerReferences"), (side.name, sets[0]["metadata"])
        await stays(
            lambda: len(items(kube, f"/api/v1/namespaces/{ns}/pods")) == 2,
            f"{side.name}: the orphaned ReplicaSet's pods",
            3.0,
        )

    await both(scenario, sides)


async def test_a_custom_resource_owning_configmaps(sides: tuple[Side, Side]) -> None:
    """Breakage caught: types created after the collector started never watched (the
    custom resource's foreground deletion is not seen, its finalizer stays forever), or
    its ConfigMaps left behind."""

    async def scenario(side: Side) -> None:
        kube, ns = side.kube, side.ns
        with custom_resource_definition(kube) as (group, plural):
            path = f"/apis/{group}/v1/namespaces/{ns}/{plural}"

            def create_widget() -> dict[str, Any] | None:
                try:
                    return kube.request(
                        "POST",
                        path,
                        {
                            "apiVersion": f"{group}/v1",
                            "kind": "Widget",
                            "metadata": {"name": "w"},
                        },
                    )
                except Exception:  # the type is being established
                    return None

            widget = await eventually(create_widget, f"{side.name}: the Widget created")
            for i in range(3):
                configmap(kube, ns, f"part-{i}", owner_ref(widget, block=True))
            await side.observed(path, f"/api/v1/namespaces/{ns}/configmaps")
            delete(kube, f"{path}/w", "Foreground")
            await eventually(
                lambda: (
                    get(kube, f"{path}/w") is None
                    and not [
                        c
                        for c in items(kube, f"/api/v1/namespaces/{ns}/configmaps")
                        if c["metadata"]["name"].startswith("part-")
                    ]
                ),
                f"{side.name}: the Widget and its ConfigMaps gone",
            )

    await both(scenario, sides)


async def test_an_owner_of_another_namespace_is_dangling(sides: tuple[Side, Side]) -> None:
    """Breakage caught: a reference to a namespaced owner of another namespace treated as
    solid (the dependent lives forever), or no OwnerRefInvalidNamespace Event."""

    async def scenario(side: Side) -> None:
        kube, ns = side.kube, side.ns
        other = new_namespace(kube, side.request)
        try:
            owner = configmap(kube, other, "owner")
            configmap(kube, ns, "dependent", owner_ref(owner))
            await eventually(
                lambda: get(kube, f"/api/v1/namespaces/{ns}/configmaps/dependent") is None,
                f"{side.name}: the dependent collected",
            )
            events = await eventually(
                lambda: [
                    e
                    for e in items(kube, f"/api/v1/namespaces/{ns}/events")
                    if e.get("reason") == "OwnerRefInvalidNamespace"
                ],
                f"{side.name}: an OwnerRefInvalidNamespace Event",
            )
            assert events[0]["involvedObject"]["name"] == "dependent"
            assert events[0]["message"] == (
                f"ownerRef [v1/ConfigMap, namespace: {ns}, name: owner, uid: "
                f'{owner["metadata"]["uid"]}] does not exist in namespace "{ns}"'
            ), side.name
            assert get(kube, f"/api/v1/namespaces/{other}/configmaps/owner") is not None
        finally:
            drop_namespace(kube, other)

    await both(scenario, sides)


async def test_an_owner_reference_whose_uid_does_not_match(sides: tuple[Side, Side]) -> None:
    """Breakage caught: owners matched by name instead of UID (the dependent of a
    recreated owner lives on), or the owner itself deleted."""

    async def scenario(side: Side) -> None:
        kube, ns = side.kube, side.ns
        owner = configmap(kube, ns, "owner")
        configmap(kube, ns, "dependent", {**owner_ref(owner), "uid": fake_uid()})
        await eventually(
            lambda: get(kube, f"/api/v1/namespaces/{ns}/configmaps/dependent") is None,
            f"{side.name}: the dependent collected",
        )
        assert get(kube, f"/api/v1/namespaces/{ns}/configmaps/owner") is not None

    await both(scenario, sides)


async def test_a_solid_owner_keeps_the_dependent_and_loses_the_dangling_reference(
    sides: tuple[Side, Side],
) -> None:
    """Breakage caught: a dependent with one live owner deleted because another owner is
    gone, or the dangling reference left in place."""

    async def scenario(side: Side) -> None:
        kube, ns = side.kube, side.ns
        alive = configmap(kube, ns, "alive")
        ghost = {**owner_ref(alive), "name": "ghost", "uid": fake_uid()}
        configmap(kube, ns, "dependent", owner_ref(alive), ghost)

        def cleaned() -> bool:
            dep = get(kube, f"/api/v1/namespaces/{ns}/configmaps/dependent")
            assert dep is not None, f"{side.name}: the dependent of a live owner was deleted"
            refs = dep["metadata"].get("ownerReferences") or []
            return [r["name"] for r in refs] == ["alive"]

        await eventually(cleaned, f"{side.name}: the dangling reference removed")
        await stays(
            lambda: get(kube, f"/api/v1/namespaces/{ns}/configmaps/dependent") is not None,
            f"{side.name}: the dependent of a live owner",
            2.0,
        )

    await both(scenario, sides)
