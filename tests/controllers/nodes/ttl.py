"""Fixtures and helpers of the TTL controller's tests.

Steward's TTL controller runs in this process against ``nodes_cluster`` (where
kube-controller-manager runs no ttl-controller) as its own identity, with only its RBAC
of ``deploy/rbac/``; the session's ``cluster`` runs upstream's. Nodes the tests make are
bare (no kwok annotation), carry the test's own NoSchedule taint so that nothing is
scheduled there, and are deleted at the end (:class:`Nodes`).
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import pytest_asyncio

from steward.cluster import LocalCluster
from steward.controllers.ttl.controller import CONTROLLER as TTL
from steward.controllers.ttl.sizing import ANNOTATION, Sizing
from steward.kube import KubeClient, NotFoundError
from tests.controllers.harness import Starter, controllers, eventually, in_loop_informer

TEST_TAINT = {"key": "steward.test/ttl", "effect": "NoSchedule"}
"""The taint of every node the tests make."""
WITHIN = 60.0
"""Seconds a side may take to annotate (a deadline, not a measurement)."""
BATCH = 20
"""Nodes created or deleted at once."""


@pytest_asyncio.fixture
async def ttl(nodes_cluster: LocalCluster) -> AsyncIterator[Starter]:
    """An informer of ``nodes_cluster`` and a starter of Steward's TTL controller as its
    own identity (five workers, as upstream), stopped at the end."""
    async with (
        in_loop_informer(nodes_cluster) as informer,
        controllers(
            TTL, nodes_cluster.component_kubeconfig("controller-ttl"), informer, workers=5
        ) as starter,
    ):
        yield starter


def expected_ttl(count: int) -> int:
    """The TTL of a cluster that grew to ``count`` nodes (upstream's table, climbed)."""
    sizing = Sizing()
    for _ in range(count):
        sizing.added()
    return sizing.ttl_seconds


def node_names(kube: KubeClient) -> list[str]:
    return [n["metadata"]["name"] for n in kube.request("GET", "/api/v1/nodes")["items"]]


def ttl_of(kube: KubeClient, name: str) -> str | None:
    """The node's annotation (None when absent or the node is gone)."""
    try:
        node = kube.request("GET", f"/api/v1/nodes/{name}")
    except NotFoundError:
        return None
    value: str | None = (node["metadata"].get("annotations") or {}).get(ANNOTATION)
    return value


def annotations_by_node(kube: KubeClient) -> dict[str, str | None]:
    return {
        n["metadata"]["name"]: (n["metadata"].get("annotations") or {}).get(ANNOTATION)
        for n in kube.request("GET", "/api/v1/nodes")["items"]
    }


async def all_annotated(kube: KubeClient, value: str, what: str, within: float = WITHIN) -> None:
    """Wait until every node of the cluster says ``value``."""

    def check() -> bool:
        return set(annotations_by_node(kube).values()) == {value}

    await eventually(
        check,
        what,
        within=within,
        failure=lambda _: f"{what}: {sorted(annotations_by_node(kube).items())[:10]}",
    )


async def annotate(kube: KubeClient, name: str, value: str) -> None:
    """Set the node's annotation as someone else would."""
    await kube.arequest(
        "PATCH",
        f"/api/v1/nodes/{name}",
        {"metadata": {"annotations": {ANNOTATION: value}}},
        content_type="application/merge-patch+json",
    )


@dataclass
class Nodes:
    """Bare nodes a test makes on one cluster; :meth:`cleanup` deletes those left."""

    kube: KubeClient
    stem: str = field(default_factory=lambda: f"ttl-{uuid.uuid4().hex[:6]}")
    made: list[str] = field(default_factory=list)

    async def make(self, count: int) -> list[str]:
        names = [f"{self.stem}-{len(self.made) + i}" for i in range(count)]
        self.made += names
        for start in range(0, count, BATCH):
            await asyncio.gather(*(self._create(n) for n in names[start : start + BATCH]))
        return names

    async def _create(self, name: str) -> None:
        body = {
            "apiVersion": "v1",
            "kind": "Node",
            "metadata": {"name": name, "labels": {"steward.test/ttl": "true"}},
            "spec": {"taints": [TEST_TAINT]},
        }
        await self.kube.arequest("POST", "/api/v1/nodes", body)

    async def delete(self, count: int) -> None:
        """Delete the last ``count`` nodes made."""
        doomed, self.made = self.made[len(self.made) - count :], self.made[: len(self.made) - count]
        for start in range(0, len(doomed), BATCH):
            await asyncio.gather(*(self._delete(n) for n in doomed[start : start + BATCH]))

    async def _delete(self, name: str) -> None:
        with contextlib.suppress(NotFoundError):
            await self.kube.arequest("DELETE", f"/api/v1/nodes/{name}")

    async def cleanup(self) -> None:
        await self.delete(len(self.made))
