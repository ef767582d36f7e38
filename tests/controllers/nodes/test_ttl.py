"""The TTL controller on a cluster: every node annotated from the cluster's size and
corrected when changed; compared with upstream's in the session's cluster, a crossing of
the first boundary and back with its hysteresis (simulated nodes), and the annotation of
a new node and its correction (:mod:`tests.controllers.nodes.ttl`)."""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from steward.kube import KubeClient
from tests.controllers.harness import Starter, eventually, upstream_kube
from tests.controllers.nodes.ttl import (
    WITHIN,
    Nodes,
    all_annotated,
    annotate,
    beat,
    cleanup_all,
    expected_ttl,
    held,
    node_names,
    settled,
    ttl,
    ttl_of,
)

__all__ = ["ttl", "upstream_kube"]

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

_T = TypeVar("_T")


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


async def test_crossing_the_first_boundary_and_back_as_upstream(
    upstream_kube: KubeClient, nodes_kube: KubeClient, ttl: Starter
) -> None:
    """The same crossing at once under upstream's controller and Steward's, each side
    from its own cluster's size: bare nodes up to 101, every node says 15; down to 95,
    still 15 (the step goes down only under 90); every bare node gone, 0 again. After
    each step every node is updated (:func:`beat`, the kubelets' reports upstream waits
    for), then the values of every node on both sides are compared: equal, and as
    expected. Steward's side must say them already before that update (it queues every
    node when the TTL changes)."""
    ttl.start()
    sides = {"upstream": upstream_kube, "steward": nodes_kube}
    base = {side: node_names(kube) for side, kube in sides.items()}
    size = {side: len(names) for side, names in base.items()}
    assert max(size.values()) < 90, f"the crossing needs clusters under 90 nodes: {size}"
    nodes = {side: Nodes(kube) for side, kube in sides.items()}

    async def both(step: Callable[[str], Awaitable[_T]]) -> tuple[_T, _T]:
        theirs, ours = await asyncio.gather(step("upstream"), step("steward"))
        return theirs, ours

    async def step(
        side: str, change: Awaitable[object], want: str, beat_value: str | None, *, hold: bool
    ) -> tuple[Counter[str | None] | None, Counter[str | None]]:
        """The change, then (Steward's side) the values before any update, then the
        beat and the values after it (held for 2 s with ``hold``)."""
        kube = sides[side]
        await change
        before = await settled(kube, want) if side == "steward" and not hold else None
        await beat(kube, beat_value)
        return before, await (held(kube, want, 2.0) if hold else settled(kube, want))

    try:
        theirs0, ours0 = await both(lambda side: settled(sides[side], "0"))
        assert (theirs0, ours0) == (
            Counter({"0": size["upstream"]}),
            Counter({"0": size["steward"]}),
        )

        grow = await both(
            lambda side: step(side, nodes[side].make(101 - size[side]), "15", "1", hold=False)
        )
        (_, theirs), (before, ours) = grow
        assert before == Counter({"15": 101})
        assert ours == theirs == Counter({"15": 101})

        shrink = await both(lambda side: step(side, nodes[side].delete(6), "15", "2", hold=True))
        (_, theirs), (_, ours) = shrink
        assert ours == theirs == Counter({"15": 95})

        back = await both(lambda side: step(side, nodes[side].cleanup(), "0", None, hold=False))
        (_, theirs), (before, ours) = back
        assert before == Counter({"0": size["steward"]})
        assert (theirs, ours) == (Counter({"0": size["upstream"]}), Counter({"0": size["steward"]}))
    finally:
        try:
            await cleanup_all(*nodes.values())
        finally:
            await asyncio.gather(*(beat(kube, None, base[side]) for side, kube in sides.items()))


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
