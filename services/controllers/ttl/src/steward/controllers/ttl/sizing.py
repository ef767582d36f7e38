"""The TTL controller's decisions, without I/O: the TTL a cluster of so many nodes asks
for (upstream's ``ttlBoundaries``, with their hysteresis), a node's current annotation
and the patch that sets it (pkg/controller/ttl/ttl_controller.go).

# The boundaries
Each step covers a range of cluster sizes; the ranges overlap, so that a cluster whose
size wobbles around a boundary does not flip its nodes' TTL back and forth: the step goes
up once the size exceeds its ``size_max`` and down once the size falls below its
``size_min``. From an empty cluster upwards: 0 s up to 100 nodes, 15 s from 101, 30 s
from 501, 60 s from 1001, 300 s from 2001; on the way down: back to 60 s under 1800,
30 s under 900, 15 s under 450, 0 s under 90.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

log = logging.getLogger(__name__)

ANNOTATION = "node.alpha.kubernetes.io/ttl"
"""The annotation the kubelet reads as how long it may cache the objects its pods use
(upstream's ``v1.ObjectTTLAnnotationKey``)."""


@dataclass(frozen=True)
class Boundary:
    """One step: the cluster sizes it covers and the TTL it asks for."""

    size_min: int
    size_max: int
    ttl_seconds: int


BOUNDARIES: tuple[Boundary, ...] = (
    Boundary(0, 100, 0),
    Boundary(90, 500, 15),
    Boundary(450, 1000, 30),
    Boundary(900, 2000, 60),
    Boundary(1800, 2**31 - 1, 300),
)
"""Upstream's ``ttlBoundaries``, in its order."""


class Sizing:
    """The cluster's node count and the step it is at, as upstream's controller keeps
    them: one node more or less at a time (:meth:`added`, :meth:`deleted`), the step
    moving by one when the count leaves its range in that direction."""

    def __init__(self) -> None:
        self.count = 0
        self.step = 0

    @property
    def ttl_seconds(self) -> int:
        """The TTL every node's annotation should say now."""
        return BOUNDARIES[self.step].ttl_seconds

    def added(self) -> bool:
        """One node more; True when the desired TTL changed."""
        self.count += 1
        if self.count > BOUNDARIES[self.step].size_max and self.step < len(BOUNDARIES) - 1:
            self.step += 1
            return True
        return False

    def deleted(self) -> bool:
        """One node fewer; True when the desired TTL changed."""
        self.count -= 1
        if self.count < BOUNDARIES[self.step].size_min and self.step > 0:
            self.step -= 1
            return True
        return False


def current_ttl(node: Mapping[str, Any]) -> int | None:
    """The node's annotation as an integer; None when absent or not an integer (as
    upstream's ``getIntFromAnnotation``, which then sets it)."""
    annotations = (node.get("metadata") or {}).get("annotations") or {}
    value = annotations.get(ANNOTATION)
    if value is None:
        return None
    try:
        return _go_atoi(value)
    except ValueError:
        name = (node.get("metadata") or {}).get("name", "")
        log.info("node %s: annotation %s=%r is not an integer", name, ANNOTATION, value)
        return None


def _go_atoi(text: str) -> int:
    """Go's ``strconv.Atoi``: an optional sign and decimal digits, nothing else (Python's
    ``int`` would also take spaces and underscores)."""
    digits = text[1:] if text[:1] in "+-" else text
    if not digits or not digits.isascii() or not digits.isdigit():
        raise ValueError(f"not an integer: {text!r}")
    return int(text)


def annotation_patch(ttl_seconds: int) -> dict[str, Any]:
    """The strategic merge patch that sets the annotation (what upstream's two-way patch
    of the node before and after comes to)."""
    return {"metadata": {"annotations": {ANNOTATION: str(ttl_seconds)}}}
