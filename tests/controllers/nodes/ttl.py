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
import time
import uuid
from collections import Counter
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
"""Nodes created, updated or deleted at once."""
BEAT = "steward.test/ttl-beat"
"""The annotation :func:`beat` changes."""


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


def values(kube: KubeClient) -> Counter[str | None]:
    """How many nodes of the cluster say each value (None: no annotation)."""
    return Counter(annotations_by_node(kube).values())


async def settled(kube: KubeClient, value: str, within: float = WITHIN) -> Counter[str | None]:
    """The cluster's :func:`values` once every node says ``value``, or as they are after
    ``within`` seconds (for the caller to compare, one side with the other)."""
    deadline = time.monotonic() + within
    while True:
        seen = await asyncio.to_thread(values, kube)
        if set(seen) == {value} or time.monotonic() >= deadline:
            return seen
        await asyncio.sleep(0.25)


async def held(kube: KubeClient, value: str, for_seconds: float) -> Counter[str | None]:
    """The cluster's :func:`values` the first time a node does not say ``value`` within
    ``for_seconds``, else as they are at the end."""
    deadline = time.monotonic() + for_seconds
    while True:
        seen = await asyncio.to_thread(values, kube)
        if set(seen) != {value} or time.monotonic() >= deadline:
            return seen
        await asyncio.sleep(0.25)


async def annotate(kube: KubeClient, name: str, value: str) -> None:
    """Set the node's annotation as someone else would."""
    await kube.arequest(
        "PATCH",
        f"/api/v1/nodes/{name}",
        {"metadata": {"annotations": {ANNOTATION: value}}},
        content_type="application/merge-patch+json",
    )


async def beat(kube: KubeClient, value: str | None, names: list[str] | None = None) -> None:
    """Update every node (or those named), as the kubelets' status reports would: a change
    of the test's own annotation (``None`` removes it). Upstream's controller syncs a node
    only when it is added or updated, and leaves the others to these reports when the
    cluster's size changes the TTL."""
    names = node_names(kube) if names is None else names
    patch = {"metadata": {"annotations": {BEAT: value}}}

    async def one(name: str) -> None:
        with contextlib.suppress(NotFoundError):
            await kube.arequest(
                "PATCH", f"/api/v1/nodes/{name}", patch, content_type="application/merge-patch+json"
            )

    for start in range(0, len(names), BATCH):
        await asyncio.gather(*(one(n) for n in names[start : start + BATCH]))


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
        """Delete the last ``count`` nodes made (forgotten only once all are gone, so that
        :meth:`cleanup` tries again those a failure left)."""
        keep = len(self.made) - count
        doomed = self.made[keep:]
        for start in range(0, len(doomed), BATCH):
            await asyncio.gather(*(self._delete(n) for n in doomed[start : start + BATCH]))
        del self.made[keep:]

    async def _delete(self, name: str) -> None:
        with contextlib.suppress(NotFoundError):
            await self.kube.arequest("DELETE", f"/api/v1/nodes/{name}")

    async def cleanup(self) -> None:
        await self.delete(len(self.made))


async def cleanup_all(*nodes: Nodes) -> None:
    """:meth:`Nodes.cleanup` of each, every one tried even when another fails; then the
    first failure raised."""
    results = await asyncio.gather(*(n.cleanup() for n in nodes), return_exceptions=True)
    for result in results:
        if isinstance(result, BaseException):
            raise result
