"""The TTL controller on a cluster: every node annotated from the cluster's size and
corrected when changed, a crossing of the first boundary and back with its hysteresis
(Steward's, on ``nodes_cluster``), and the annotation of a new node and its correction
compared with upstream's in the session's cluster (:mod:`tests.controllers.nodes.ttl`)."""

from __future__ import annotations

import asyncio

import pytest

from steward.kube import KubeClient
from tests.controllers.harness import Starter, eventually, stays, upstream_kube
from tests.controllers.nodes.ttl import (
    WITHIN,
    Nodes,
    all_annotated,
    annotate,
    expected_ttl,
    node_names,
    ttl,
    ttl_of,
)

__all__ = ["ttl", "upstream_kube"]

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]


async def test_every_node_annotated_and_corrected(nodes_kube: KubeClient, ttl: Starter) -> None:
    """Every node gets the TTL of the cluster's size; a node whose annotation someone
    changes (to another number, to something that is not one) gets it back."""
    names = node_names(nodes_kube)
    want = str(expected_ttl(len(names)))
    ttl.start()
    await all_annotated(nodes_kube, want, f"every node annotated {want}")
    node = names[0]
    for wrong in ("42", "soon"):
        await annotate(nodes_kube, node, wrong)
        await eventually(lambda: ttl_of(nodes_kube, node) == want, f"{node} back to {want}")


async def test_crossing_the_first_boundary_and_back(nodes_kube: KubeClient, ttl: Starter) -> None:
    """Bare nodes up to 101: every node says 15. Down to 95: still 15 (the step goes
    down only under 90). Back to where it was: 0 again."""
    ttl.start()
    before = len(node_names(nodes_kube))
    assert before < 90, "the boundary test needs a cluster of fewer than 90 nodes"
    await all_annotated(nodes_kube, "0", "every node annotated 0")
    nodes = Nodes(nodes_kube)
    try:
        await nodes.make(101 - before)
        await all_annotated(nodes_kube, "15", "every node annotated 15 at 101 nodes")
        await nodes.delete(6)
        assert len(node_names(nodes_kube)) == 95

        def still_15() -> bool:
            return set(ttl_of(nodes_kube, n) for n in node_names(nodes_kube)[:5]) == {"15"}

        await stays(still_15, "15 at 95 nodes", 2.0)
        await nodes.cleanup()
        await all_annotated(nodes_kube, "0", "every node annotated 0 again")
    finally:
        await nodes.cleanup()


async def test_annotation_as_upstream(
    upstream_kube: KubeClient, nodes_kube: KubeClient, ttl: Starter
) -> None:
    """A new node, then its annotation changed by someone else: on each side the TTL its
    cluster's size asks for, at once under upstream's controller and Steward's."""
    ttl.start()

    async def scenario(kube: KubeClient) -> list[str | None]:
        nodes = Nodes(kube)
        try:
            (name,) = await nodes.make(1)
            want = str(expected_ttl(len(node_names(kube))))
            seen = [await eventually(lambda: ttl_of(kube, name), f"{name} annotated", WITHIN)]
            await annotate(kube, name, "42")
            await eventually(lambda: ttl_of(kube, name) != "42", f"{name} corrected", WITHIN)
            seen.append(ttl_of(kube, name))
            return [want, *seen]
        finally:
            await nodes.cleanup()

    theirs, ours = await asyncio.gather(scenario(upstream_kube), scenario(nodes_kube))
    assert ours == theirs == ["0", "0", "0"]
