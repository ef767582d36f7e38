"""Steward's garbage collector against a real API server, upstream's own collector off.

Each scenario names the breakage it catches. Owners and dependents are ConfigMaps where
the kind does not matter (cheap, no pods), a Deployment where the cascade through
upstream's own ReplicaSets and kwok's pods does, and a custom resource whose type was
created after the collector started (discovery followed).
"""

from __future__ import annotations

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


def items(kube: KubeClient, path: str) -> list[dict[str, Any]]:
    return list(kube.request("GET", path).get("items") or ())


async def rolled_out(gc: Running, kube: KubeClient, ns: str, replicas: int) -> None:
    """The Deployment's ReplicaSet and pods made, and observed by the collector."""
    sets = f"/apis/apps/v1/namespaces/{ns}/replicasets"
    pods = f"/api/v1/namespaces/{ns}/pods"
    await eventually(
        lambda: len(items(kube, sets)) == 1 and len(items(kube, pods)) == replicas,
        "the Deployment's ReplicaSet and pods",
    )
    await observed(gc, kube, f"/apis/apps/v1/namespaces/{ns}/deployments", sets, pods)


async def test_background_deletion_cascades_to_replicasets_and_pods(
    gc: Running, gc_kube: KubeClient, gc_namespace: str
) -> None:
    """Breakage caught: dependents of a deleted owner left behind (no cascade at all, or
    one level only: the ReplicaSet goes and its pods stay)."""
    ns = gc_namespace
    deployment(gc_kube, ns, "web")
    await rolled_out(gc, gc_kube, ns, 2)
    delete(gc_kube, f"/apis/apps/v1/namespaces/{ns}/deployments/web", "Background")
    await eventually(
        lambda: (
            not items(gc_kube, f"/apis/apps/v1/namespaces/{ns}/replicasets")
            and not items(gc_kube, f"/api/v1/namespaces/{ns}/pods")
        ),
        "the ReplicaSet and its pods collected",
    )


async def test_foreground_deletion_waits_for_the_dependents(
    gc: Running, gc_kube: KubeClient, gc_namespace: str
) -> None:
    """Breakage caught: the owner's foregroundDeletion finalizer never removed (the owner
    stays Terminating), or removed before its blocking dependents are gone."""
    ns = gc_namespace
    deployment(gc_kube, ns, "web")
    await rolled_out(gc, gc_kube, ns, 2)
    path = f"/apis/apps/v1/namespaces/{ns}/deployments/web"
    delete(gc_kube, path, "Foreground")
    seen: list[tuple[bool, int]] = []

    def done() -> bool:
        owner = get(gc_kube, path)
        left = len(items(gc_kube, f"/apis/apps/v1/namespaces/{ns}/replicasets"))
        left += len(items(gc_kube, f"/api/v1/namespaces/{ns}/pods"))
        seen.append((owner is not None, left))
        return owner is None and left == 0

    await eventually(done, "the Deployment gone after its ReplicaSet and pods")
    # Never was the owner gone while a dependent remained.
    assert not [s for s in seen if not s[0] and s[1]], seen


async def test_orphan_deletion_keeps_the_dependents_without_the_reference(
    gc: Running, gc_kube: KubeClient, gc_namespace: str
) -> None:
    """Breakage caught: orphaned dependents deleted, or left naming the gone owner (the
    next collector pass would delete them), or the owner kept by its orphan finalizer."""
    ns = gc_namespace
    deployment(gc_kube, ns, "web")
    await rolled_out(gc, gc_kube, ns, 2)
    delete(gc_kube, f"/apis/apps/v1/namespaces/{ns}/deployments/web", "Orphan")
    await eventually(
        lambda: get(gc_kube, f"/apis/apps/v1/namespaces/{ns}/deployments/web") is None,
        "the Deployment gone",
    )
    sets = items(gc_kube, f"/apis/apps/v1/namespaces/{ns}/replicasets")
    assert len(sets) == 1
    assert not sets[0]["metadata"].get("ownerReferences"), sets[0]["metadata"]
    await stays(
        lambda: len(items(gc_kube, f"/api/v1/namespaces/{ns}/pods")) == 2,
        "the orphaned ReplicaSet's pods",
        3.0,
    )


async def test_a_custom_resource_owner_defined_after_start(
    gc: Running, gc_kube: KubeClient, gc_namespace: str
) -> None:
    """Breakage caught: types created after the collector started never watched (the
    custom resource's deletion is not seen, its foreground finalizer stays forever)."""
    ns = gc_namespace
    with custom_resource_definition(gc_kube) as (group, plural):
        path = f"/apis/{group}/v1/namespaces/{ns}/{plural}"

        def create_widget() -> dict[str, Any] | None:
            try:
                return gc_kube.request(
                    "POST",
                    path,
                    {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": "w"}},
                )
            except Exception:  # the type is being established
                return None

        widget = await eventually(create_widget, "the Widget created")
        for i in range(3):
            configmap(gc_kube, ns, f"part-{i}", owner_ref(widget, block=True))
        delete(gc_kube, f"{path}/w", "Foreground")
        await eventually(
            lambda: (
                get(gc_kube, f"{path}/w") is None
                and not [
                    c
                    for c in items(gc_kube, f"/api/v1/namespaces/{ns}/configmaps")
                    if c["metadata"]["name"].startswith("part-")
                ]
            ),
            "the Widget and its ConfigMaps gone",
        )


async def test_an_owner_of_another_namespace_is_dangling(
    gc: Running, gc_kube: KubeClient, gc_namespace: str, request: pytest.FixtureRequest
) -> None:
    """Breakage caught: a reference to a namespaced owner of another namespace treated as
    solid (the dependent lives forever), or no OwnerRefInvalidNamespace Event."""
    other = new_namespace(gc_kube, request)
    try:
        owner = configmap(gc_kube, other, "owner")
        configmap(gc_kube, gc_namespace, "dependent", owner_ref(owner))
        await eventually(
            lambda: get(gc_kube, f"/api/v1/namespaces/{gc_namespace}/configmaps/dependent") is None,
            "the dependent collected",
        )
        events = await eventually(
            lambda: [
                e
                for e in items(gc_kube, f"/api/v1/namespaces/{gc_namespace}/events")
                if e.get("reason") == "OwnerRefInvalidNamespace"
            ],
            "an OwnerRefInvalidNamespace Event",
        )
        assert events[0]["involvedObject"]["name"] == "dependent"
        assert events[0]["message"] == (
            f"ownerRef [v1/ConfigMap, namespace: {gc_namespace}, name: owner, uid: "
            f'{owner["metadata"]["uid"]}] does not exist in namespace "{gc_namespace}"'
        )
        assert get(gc_kube, f"/api/v1/namespaces/{other}/configmaps/owner") is not None
    finally:
        drop_namespace(gc_kube, other)


async def test_an_owner_reference_whose_uid_does_not_match(
    gc: Running, gc_kube: KubeClient, gc_namespace: str
) -> None:
    """Breakage caught: owners matched by name instead of UID (the dependent of a
    recreated owner lives on), or the owner itself deleted."""
    ns = gc_namespace
    owner = configmap(gc_kube, ns, "owner")
    ref = {**owner_ref(owner), "uid": fake_uid()}
    configmap(gc_kube, ns, "dependent", ref)
    await eventually(
        lambda: get(gc_kube, f"/api/v1/namespaces/{ns}/configmaps/dependent") is None,
        "the dependent collected",
    )
    assert get(gc_kube, f"/api/v1/namespaces/{ns}/configmaps/owner") is not None


async def test_a_solid_owner_keeps_the_dependent_and_loses_the_dangling_reference(
    gc: Running, gc_kube: KubeClient, gc_namespace: str
) -> None:
    """Breakage caught: a dependent with one live owner deleted because another owner is
    gone, or the dangling reference left in place."""
    ns = gc_namespace
    alive = configmap(gc_kube, ns, "alive")
    ghost = {**owner_ref(alive), "name": "ghost", "uid": fake_uid()}
    configmap(gc_kube, ns, "dependent", owner_ref(alive), ghost)

    def cleaned() -> bool:
        dep = get(gc_kube, f"/api/v1/namespaces/{ns}/configmaps/dependent")
        assert dep is not None, "the dependent of a live owner was deleted"
        refs = dep["metadata"].get("ownerReferences") or []
        return [r["name"] for r in refs] == ["alive"]

    await eventually(cleaned, "the dangling reference removed")
    await stays(
        lambda: get(gc_kube, f"/api/v1/namespaces/{ns}/configmaps/dependent") is not None,
        "the dependent of a live owner",
        2.0,
    )
