"""Steward's StatefulSet controller on a control plane where upstream's is off
(:mod:`tests.controllers.statefulset.conftest`): ordered and parallel scaling, a
partitioned rolling update and its rollback, ``maxUnavailable``, ``OnDelete``,
``spec.ordinals.start``, claims under a retention policy and ``minReadySeconds``.

Each test names, in its docstring, the breakage it catches."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from prometheus_client import REGISTRY

from tests.controllers.harness import eventually, stays
from tests.controllers.statefulset.conftest import (
    UNSCHEDULABLE,
    Side,
    claim_template,
    is_ready,
    revision_of,
    settled,
)

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

WITHIN = 90.0
"""Seconds a scenario may take to converge (a deadline, not a measurement)."""


def reasons(side: Side, reason: str) -> list[str]:
    """The messages of the set's Events of ``reason``, in the order recorded."""
    return [e["message"] for e in side.events() if e.get("reason") == reason]


async def recorded(side: Side, reason: str, want: list[str]) -> None:
    """The set's Events of ``reason`` come to be ``want`` (in that order): Events are
    recorded in the background."""
    await eventually(
        lambda: reasons(side, reason) == want,
        f"{reason} Events {want}",
        WITHIN,
        failure=lambda _: f"{reason} Events: {reasons(side, reason)}, not {want}",
    )


async def watch_pods(side: Side, seen: list[list[tuple[str, bool]]], done: asyncio.Event) -> None:
    """Record (name, ready) of the live pods at every poll until ``done``."""
    while not done.is_set():
        pods = await asyncio.to_thread(side.live_pods)
        seen.append([(p["metadata"]["name"], is_ready(p)) for p in pods])
        await asyncio.sleep(0.1)


async def test_ordered_scale_up_and_down(steward: Side) -> None:
    """OrderedReady: pods come one at a time, each only once the one before is Running
    and Ready, and go highest ordinal first, one at a time. Catches: creating or deleting
    more than one pod per sync, creating past a pod that is not ready, deleting in
    another order, a wrong status."""
    seen: list[list[tuple[str, bool]]] = []
    done = asyncio.Event()
    watcher = asyncio.create_task(watch_pods(steward, seen, done))
    steward.create("web", 3)
    status = await eventually(lambda: settled(steward, "web"), "3 ready pods", WITHIN)
    assert status["currentReplicas"] == status["updatedReplicas"] == 3
    assert status["currentRevision"] == status["updateRevision"]
    steward.scale("web", 1)
    await eventually(lambda: settled(steward, "web"), "1 ready pod", WITHIN)
    done.set()
    await watcher
    assert steward.pod_names() == ["web-0"]
    for snapshot in seen:
        names = [n for n, _ in snapshot]
        assert names == [f"web-{i}" for i in range(len(names))], snapshot
        assert sum(1 for _, ready in snapshot if not ready) <= 1, snapshot
    created = [f"Create Pod web-{i} in StatefulSet web successful" for i in range(3)]
    await recorded(steward, "SuccessfulCreate", created)
    deleted = [f"Delete Pod web-{i} in StatefulSet web successful" for i in (2, 1)]
    await recorded(steward, "SuccessfulDelete", deleted)


async def test_parallel_creates_past_pending_pods(steward: Side) -> None:
    """Parallel creates every pod at once though none can run, where OrderedReady stops
    at the first. Catches: Parallel treated as OrderedReady, or the reverse."""
    steward.create("par", 3, podManagementPolicy="Parallel", pod={"nodeSelector": UNSCHEDULABLE})
    await eventually(
        lambda: steward.pod_names() == ["par-0", "par-1", "par-2"], "3 pending pods", WITHIN
    )
    status = await eventually(
        lambda: (s := steward.status("par")).get("replicas") == 3 and s, "status", WITHIN
    )
    assert status.get("readyReplicas", 0) == 0
    steward.scale("par", 0)
    await eventually(lambda: steward.pod_names() == [], "no pods", WITHIN)


async def test_ordered_stops_at_pending_pod(steward: Side) -> None:
    """OrderedReady waits for its first pod: with that pod Pending no other is made.
    Catches: OrderedReady creating past a pod that is not ready."""
    steward.create("web", 3, pod={"nodeSelector": UNSCHEDULABLE})
    await eventually(lambda: steward.pod_names() == ["web-0"], "web-0", WITHIN)
    await stays(lambda: steward.pod_names() == ["web-0"], "only web-0", 3.0)


async def test_partitioned_rollout_then_rollback(steward: Side) -> None:
    """A template change with partition 1 replaces pods 2 then 1, never 0; going back to
    the first template reuses its revision (renumbered), no third one is made. Catches:
    ignoring the partition, updating out of order, creating a revision on rollback, not
    renumbering, wrong revision names or status."""
    steward.create(
        "web", 3, updateStrategy={"type": "RollingUpdate", "rollingUpdate": {"partition": 1}}
    )
    first = await eventually(lambda: settled(steward, "web"), "3 ready pods", WITHIN)
    old = first["currentRevision"]
    steward.set_image("web", "img:v2")

    def rolled() -> dict[str, Any] | None:
        status = settled(steward, "web")
        if status is None or status.get("updatedReplicas") != 2:
            return None
        return status

    status = await eventually(rolled, "2 pods updated", WITHIN)
    new = status["updateRevision"]
    assert new != old and status["currentRevision"] == old
    assert status["currentReplicas"] == 1
    assert {p["metadata"]["name"]: revision_of(p) for p in steward.pods()} == {
        "web-0": old,
        "web-1": new,
        "web-2": new,
    }
    deleted = [f"Delete Pod web-{i} in StatefulSet web successful" for i in (2, 1)]
    await recorded(steward, "SuccessfulDelete", deleted)
    revisions = {r["metadata"]["name"]: r["revision"] for r in steward.revisions()}
    assert revisions == {old: 1, new: 2}

    steward.set_image("web", "img:v1")

    def back() -> dict[str, Any] | None:
        status = settled(steward, "web")
        if status is None or status.get("updateRevision") != old:
            return None
        return status if status.get("updatedReplicas") == 3 else None

    status = await eventually(back, "rolled back", WITHIN)
    assert status["currentRevision"] == old
    revisions = {r["metadata"]["name"]: r["revision"] for r in steward.revisions()}
    assert revisions == {old: 3, new: 2}
    assert {revision_of(p) for p in steward.pods()} == {old}


async def test_max_unavailable(steward: Side) -> None:
    """maxUnavailable 2 with Parallel: an update takes down at most two pods at once,
    and upstream's gauge says 2. Catches: ignoring maxUnavailable (all four at once) or
    exceeding it, the gauge not set."""
    steward.create(
        "web",
        4,
        podManagementPolicy="Parallel",
        updateStrategy={"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 2}},
    )
    await eventually(lambda: settled(steward, "web"), "4 ready pods", WITHIN)
    seen: list[list[tuple[str, bool]]] = []
    done = asyncio.Event()
    watcher = asyncio.create_task(watch_pods(steward, seen, done))
    steward.set_image("web", "img:v2")

    def rolled() -> dict[str, Any] | None:
        status = settled(steward, "web")
        return status if status and status.get("updatedReplicas") == 4 else None

    status = await eventually(rolled, "4 pods updated", WITHIN)
    done.set()
    await watcher
    assert status["currentRevision"] == status["updateRevision"]
    for snapshot in seen:
        ready = sum(1 for _, r in snapshot if r)
        assert ready >= 2, snapshot
    labels = {
        "statefulset_namespace": steward.ns,
        "statefulset_name": "web",
        "pod_management_policy": "Parallel",
    }
    gauge = "statefulset_controller_statefulset_max_unavailable"
    assert REGISTRY.get_sample_value(gauge, labels) == 2


async def test_on_delete(steward: Side) -> None:
    """OnDelete: a template change replaces no pod; a pod deleted by hand comes back from
    the new revision. Catches: rolling under OnDelete, recreating from the old revision."""
    steward.create("web", 2, updateStrategy={"type": "OnDelete"})
    first = await eventually(lambda: settled(steward, "web"), "2 ready pods", WITHIN)
    steward.set_image("web", "img:v2")
    status = await eventually(
        lambda: (s := steward.status("web")).get("updateRevision") != first["updateRevision"] and s,
        "a new update revision",
        WITHIN,
    )
    await stays(
        lambda: {revision_of(p) for p in steward.pods()} == {first["currentRevision"]},
        "old pods kept",
        2.0,
    )
    steward.delete_pod("web-1")

    def replaced() -> bool:
        pods = {p["metadata"]["name"]: p for p in steward.live_pods()}
        pod = pods.get("web-1")
        return pod is not None and revision_of(pod) == status["updateRevision"] and is_ready(pod)

    await eventually(replaced, "web-1 from the new revision", WITHIN)
    assert (
        revision_of(next(p for p in steward.pods() if p["metadata"]["name"] == "web-0"))
        == (first["currentRevision"])
    )


async def test_ordinals_start(steward: Side) -> None:
    """spec.ordinals.start 5: pods web-5 and web-6 with their index labels, hostname and
    subdomain. Catches: ordinals from 0, missing identity labels."""
    steward.create("web", 2, ordinals={"start": 5})
    await eventually(lambda: settled(steward, "web"), "2 ready pods", WITHIN)
    pods = steward.pods()
    assert [p["metadata"]["name"] for p in pods] == ["web-5", "web-6"]
    for pod in pods:
        name = pod["metadata"]["name"]
        labels = pod["metadata"]["labels"]
        assert labels["statefulset.kubernetes.io/pod-name"] == name
        assert labels["apps.kubernetes.io/pod-index"] == name.split("-")[1]
        assert pod["spec"]["hostname"] == name and pod["spec"]["subdomain"] == "web"


async def test_claims_and_retention(steward: Side) -> None:
    """Claims from volumeClaimTemplates, owned as whenScaled: Delete, whenDeleted: Retain
    wants (none in range, the pod once scaled down, so the garbage collector takes the
    claim with it). Catches: no claims, claims without volumes in the pod, wrong
    owners, a scaled-down claim kept."""
    steward.volumes([f"data-web-{i}" for i in range(2)])
    steward.create(
        "web",
        2,
        volumeClaimTemplates=[claim_template("data")],
        persistentVolumeClaimRetentionPolicy={"whenScaled": "Delete", "whenDeleted": "Retain"},
    )
    await eventually(lambda: settled(steward, "web"), "2 ready pods", WITHIN)
    claims = {c["metadata"]["name"]: c for c in steward.claims()}
    assert sorted(claims) == ["data-web-0", "data-web-1"]
    assert all(not c["metadata"].get("ownerReferences") for c in claims.values())
    for pod in steward.pods():
        volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
        want = f"data-{pod['metadata']['name']}"
        assert volumes["data"]["persistentVolumeClaim"]["claimName"] == want
    steward.scale("web", 1)
    await eventually(
        lambda: [c["metadata"]["name"] for c in steward.claims()] == ["data-web-0"],
        "data-web-1 collected",
        WITHIN,
    )
    assert any(
        m == "Create Claim data-web-1 Pod web-1 in StatefulSet web success"
        for m in reasons(steward, "SuccessfulCreate")
    )


async def test_min_ready_seconds(steward: Side) -> None:
    """minReadySeconds 2: a ready pod counts as available only after it, and the set is
    synced again then without another event. Catches: no requeue for availability (the
    status would stay at 0 available), counting ready as available at once."""
    steward.create("web", 1, minReadySeconds=2)
    status = await eventually(
        lambda: (s := steward.status("web")).get("readyReplicas") == 1 and s, "ready", WITHIN
    )
    assert status.get("availableReplicas", 0) in (0, 1)
    await eventually(
        lambda: steward.status("web").get("availableReplicas") == 1, "available", WITHIN
    )
