"""Steward's StatefulSet controller against upstream's, scenario by scenario: each runs at
once on both sides (:mod:`tests.controllers.statefulset.conftest`: Steward's on the
package's control plane, upstream's on the session's), and once each side has settled
the two are compared field by field:

- pods: name, labels (the revision hash among them), controller reference, hostname and
  subdomain, the claims their volumes name;
- claims: name, labels, owner references (kind, name, controller, blockOwnerDeletion);
- ControllerRevisions: name, revision number, labels, data, controller;
- the set's status, whole;
- the Events on the set: (type, reason, message), as a set (both sides' recorders fold
  repeats into a count), but for failures of a write that conflicted (the claims' owner
  updates race with the PersistentVolume binder's writes of the same claims, on both
  sides, as often as the timing has it), and, where claims are involved, the pods'
  create and update Events (see :func:`test_scale_down_with_claim_retention`). The
  sides are compared once they agree, or after :data:`AGREE` seconds.

Masked: UIDs, namespaces, resource versions and times (they differ by construction), the
node a pod runs on (the scheduler's choice), the Events' counts, and the Events of
conflicted writes.

The revision names are compared unmasked: the hash depends on the template and the
collision count only, so equal names mean Steward hashes as upstream does.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from tests.controllers.harness import eventually
from tests.controllers.statefulset.conftest import Side, claim_template, settled

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

CONFLICT = "the object has been modified"
"""In the message of a failure that lost a race (masked: see the module docs)."""
WITHIN = 120.0
AGREE = 15.0
"""Seconds the sides' settled states may take to agree (Events still being written)."""
"""Seconds a side may take to settle (a deadline, not a measurement)."""


def _refs(obj: dict[str, Any]) -> list[tuple[str, str, bool, bool]]:
    return sorted(
        (
            r.get("kind", ""),
            r.get("name", ""),
            bool(r.get("controller")),
            bool(r.get("blockOwnerDeletion")),
        )
        for r in obj["metadata"].get("ownerReferences") or ()
    )


def snapshot(side: Side, name: str, *, racy: tuple[str, ...] = ()) -> dict[str, Any]:
    """What is compared of one side (see the module docs), without the Events whose
    message starts with one of ``racy``."""
    pods = {
        p["metadata"]["name"]: {
            "labels": p["metadata"].get("labels"),
            "owners": _refs(p),
            "hostname": p["spec"].get("hostname"),
            "subdomain": p["spec"].get("subdomain"),
            "claims": sorted(
                v["persistentVolumeClaim"]["claimName"]
                for v in p["spec"].get("volumes") or ()
                if "persistentVolumeClaim" in v
            ),
            "containers": [(c["name"], c["image"]) for c in p["spec"]["containers"]],
        }
        for p in side.pods()
    }
    claims = {
        c["metadata"]["name"]: {"labels": c["metadata"].get("labels"), "owners": _refs(c)}
        for c in side.claims()
    }
    revisions = {
        r["metadata"]["name"]: {
            "revision": r.get("revision"),
            "labels": r["metadata"].get("labels"),
            "data": r.get("data"),
            "owners": _refs(r),
        }
        for r in side.revisions()
    }
    events = sorted(
        {
            (e.get("type", ""), e.get("reason", ""), e.get("message", ""))
            for e in side.events()
            if CONFLICT not in e.get("message", "") and not e.get("message", "").startswith(racy)
        }
    )
    return {
        "pods": pods,
        "claims": claims,
        "revisions": revisions,
        "status": side.status(name),
        "events": events,
    }


async def both(
    steward: Side,
    upstream: Side,
    scenario: Callable[[Side], Awaitable[None]],
    *,
    racy: tuple[str, ...] = (),
) -> tuple[dict[str, Any], dict[str, Any]]:
    """Run ``scenario`` on both sides at once; both sides' snapshots once they agree
    (Events are recorded in the background, each side's at its own pace), or after
    :data:`AGREE` seconds as they are then."""
    await asyncio.gather(scenario(steward), scenario(upstream))

    def pair() -> tuple[dict[str, Any], dict[str, Any]]:
        return snapshot(steward, "web", racy=racy), snapshot(upstream, "web", racy=racy)

    end = time.monotonic() + AGREE
    ours, theirs = await asyncio.to_thread(pair)
    while ours != theirs and time.monotonic() < end:
        await asyncio.sleep(0.5)
        ours, theirs = await asyncio.to_thread(pair)
    return ours, theirs


def compare(ours: dict[str, Any], theirs: dict[str, Any]) -> None:
    for part in ("revisions", "status", "pods", "claims", "events"):
        assert ours[part] == theirs[part], f"{part} differ"


async def until_settled(side: Side, what: str, extra: Callable[[dict[str, Any]], bool]) -> None:
    def check() -> bool:
        status = settled(side, "web")
        return status is not None and extra(status)

    await eventually(check, f"{side.name}: {what}", WITHIN)


async def test_partitioned_rollout_then_rollback(steward: Side, upstream: Side) -> None:
    """OrderedReady, partition 1: v1, then v2 (pods 2 and 1 replaced, 0 kept), then back
    to v1 (its revision renumbered, pods 2 and 1 replaced again, the update complete).
    Catches: revision names, data or numbers unlike upstream's, another order or number of
    pod deletions and creations, a status or an Event unlike upstream's."""

    async def scenario(side: Side) -> None:
        side.create(
            "web",
            3,
            updateStrategy={"type": "RollingUpdate", "rollingUpdate": {"partition": 1}},
        )
        await until_settled(side, "v1", lambda s: s.get("updatedReplicas") == 3)
        side.set_image("web", "img:v2")
        await until_settled(side, "v2", lambda s: s.get("updatedReplicas") == 2)
        side.set_image("web", "img:v1")
        await until_settled(
            side,
            "back to v1",
            lambda s: s.get("updatedReplicas") == 3 and s["currentRevision"] == s["updateRevision"],
        )

    ours, theirs = await both(steward, upstream, scenario)
    compare(ours, theirs)
    assert len(ours["revisions"]) == 2


async def test_scale_down_with_claim_retention(steward: Side, upstream: Side) -> None:
    """Parallel, one claim template, whenScaled and whenDeleted Delete: three pods with
    their claims (owned by the set), then one: the scaled-down pods' claims named their
    pods as owners and went with them. Catches: claims, owners or Events unlike
    upstream's, a claim kept or lost.

    The pods' create and update Events are not compared here (the claims' are): whether
    a new pod's claims get their owner in the creation's last step or in a later update
    in place (``SuccessfulUpdate``) depends on whether the claim created a moment before
    is in the controller's cache yet, and an owner update that loses the race with the
    PersistentVolume binder fails the creation's step (no ``SuccessfulCreate``, a
    ``FailedUpdate``), on either side."""

    async def scenario(side: Side) -> None:
        side.volumes([f"data-web-{i}" for i in range(3)])
        side.create(
            "web",
            3,
            podManagementPolicy="Parallel",
            volumeClaimTemplates=[claim_template("data")],
            persistentVolumeClaimRetentionPolicy={"whenScaled": "Delete", "whenDeleted": "Delete"},
        )
        await until_settled(side, "3 pods", lambda s: True)

        def owned() -> bool:
            claims = side.claims()
            return len(claims) == 3 and all(c["metadata"].get("ownerReferences") for c in claims)

        await eventually(owned, f"{side.name}: claims owned by the set", WITHIN)
        side.scale("web", 1)
        await eventually(
            lambda: [c["metadata"]["name"] for c in side.claims()] == ["data-web-0"],
            f"{side.name}: scaled-down claims collected",
            WITHIN,
        )
        await until_settled(side, "1 pod", lambda s: True)

    ours, theirs = await both(steward, upstream, scenario, racy=("Create Pod", "Update Pod"))
    compare(ours, theirs)


async def test_ordinals_start(steward: Side, upstream: Side) -> None:
    """spec.ordinals.start 3: two pods, then three, then the start moved to 1 (pods 3
    and 4 replaced by 1 and 2 in order). Catches: ordinals, identity or order unlike
    upstream's."""

    async def scenario(side: Side) -> None:
        side.create("web", 2, ordinals={"start": 3})
        await until_settled(side, "2 pods", lambda s: True)
        side.scale("web", 3)
        await until_settled(side, "3 pods", lambda s: True)
        side.change("web", lambda spec: spec.update(ordinals={"start": 1}))
        await eventually(
            lambda: side.pod_names() == ["web-1", "web-2", "web-3"],
            f"{side.name}: pods 1 to 3",
            WITHIN,
        )
        await until_settled(side, "moved", lambda s: True)

    ours, theirs = await both(steward, upstream, scenario)
    compare(ours, theirs)
