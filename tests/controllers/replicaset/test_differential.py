"""The same ReplicaSet scenarios under upstream's controller (the session ``cluster``)
and under Steward's (``rs_cluster``): the same final status and the same pods, counted
by who controls them and whether they are being deleted. The same scenarios with
ReplicationControllers compare upstream's ``replicationcontroller`` controller with
Steward's (neither kind has ``spec.managedBy``, so the sides are two clusters for both);
``terminating-replicas`` is for ReplicaSets only (ReplicationControllers have no
``status.terminatingReplicas``).

# Convergence
The two sides run on different clusters, and the session cluster carries the load of
every other test: its kwok may mark pods ready long after they were created, and
upstream's controller updates a ReplicaSet's status only when a pod event reaches it.
So the sides are compared once each has settled — its pods that can run are ready and
its ReplicaSet's status agrees with the pods the API server shows (see :func:`unsettled`)
— with a generous deadline for that, never at a fixed moment."""

from __future__ import annotations

import asyncio
import functools
import re
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from steward.controllers.replicaset.controller import CONTROLLER
from steward.controllers.replicaset.replication import CONTROLLER as RC_CONTROLLER
from steward.kube import KubeClient
from tests.controllers.harness import controllers
from tests.controllers.replicaset.conftest import (
    LABELS,
    RC,
    RS,
    OwnerKind,
    controller_of,
    create_rs,
    eventually,
    get_rs,
    list_pods,
    pod_body,
    rs_body,
    stable,
    update_pod,
    update_rs,
)

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

UNSCHEDULABLE = {"nodeSelector": {"steward.io/no-such-node": "true"}}
HOLD = "steward.io/test-hold"
NOWHERE = "steward-test-nowhere"
"""A node that does not exist. kube-controller-manager's PodGC marks a terminating pod
that is bound to no node Failed within its 20 s period (it would then no longer count as
terminating); a pod bound to a missing node it leaves alone for a 40 s quarantine first."""
HELD = {**UNSCHEDULABLE, "nodeName": NOWHERE}
CONVERGE_WITHIN = 180.0
"""Seconds both sides may take to settle and agree (a deadline, not a measurement)."""
_GENERATED = re.compile(r"\brs-[a-z0-9]{5}\b")


def comparable(kube: KubeClient, ns: str, owner: OwnerKind) -> dict[str, Any]:
    """What must be identical: the status (conditions by type, status, reason and message,
    generated pod names masked), whether the generation was observed, and the pods by
    controller (the owner, another, none) and deletion state."""
    rs = get_rs(kube, ns, "rs", owner)
    st = rs.get("status") or {}
    pods = []
    for pod in list_pods(kube, ns, ""):
        ref = controller_of(pod)
        by = "none" if ref is None else ref["name"] if ref["kind"] == owner.kind else "other"
        pods.append((by, bool(pod["metadata"].get("deletionTimestamp"))))
    return {
        "replicas": st.get("replicas", 0),
        "fullyLabeledReplicas": st.get("fullyLabeledReplicas", 0),
        "readyReplicas": st.get("readyReplicas", 0),
        "availableReplicas": st.get("availableReplicas", 0),
        "terminatingReplicas": st.get("terminatingReplicas"),
        "generationObserved": st.get("observedGeneration") == rs["metadata"]["generation"],
        "conditions": [
            (c["type"], c["status"], c.get("reason"), _GENERATED.sub("rs-*", c.get("message", "")))
            for c in st.get("conditions") or ()
        ],
        "pods": sorted(pods),
    }


def _ready(pod: dict[str, Any]) -> bool:
    return any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in (pod.get("status") or {}).get("conditions") or ()
    )


def _can_run(pod: dict[str, Any]) -> bool:
    """Whether kwok is to run the pod: not finished, not being deleted, schedulable."""
    selector = (pod.get("spec") or {}).get("nodeSelector") or {}
    return (
        not pod["metadata"].get("deletionTimestamp")
        and (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed")
        and not any(key in selector for key in UNSCHEDULABLE["nodeSelector"])
    )


def unsettled(kube: KubeClient, ns: str, owner: OwnerKind) -> str | None:
    """What one side still waits for, or None once it has settled: every pod that can run
    is ready, and the ReplicaSet's status — observed generation, replicas, fully labeled,
    ready and (without minReadySeconds) available replicas — is what its pods in the API
    server say."""
    rs = get_rs(kube, ns, "rs", owner)
    st = rs.get("status") or {}
    if st.get("observedGeneration") != rs["metadata"]["generation"]:
        return f"generation {rs['metadata']['generation']} not observed yet"
    pods = list_pods(kube, ns, "")
    waiting = [p["metadata"]["name"] for p in pods if _can_run(p) and not _ready(p)]
    if waiting:
        return f"pods not ready yet: {waiting}"
    uid = rs["metadata"]["uid"]
    active = [
        p
        for p in pods
        if (ref := controller_of(p)) is not None
        and ref.get("uid") == uid
        and not p["metadata"].get("deletionTimestamp")
        and p["status"].get("phase") not in ("Succeeded", "Failed")
    ]
    template = rs["spec"]["template"]["metadata"].get("labels") or {}
    ready = sum(1 for p in active if _ready(p))
    expected = {
        "replicas": len(active),
        "fullyLabeledReplicas": sum(
            1
            for p in active
            if all(p["metadata"].get("labels", {}).get(k) == v for k, v in template.items())
        ),
        "readyReplicas": ready,
    }
    if not rs["spec"].get("minReadySeconds"):
        expected["availableReplicas"] = ready
    reported = {k: st.get(k, 0) for k in expected}
    if reported != expected:
        return f"status {reported} behind the pods {expected}"
    return None


Step = Callable[[KubeClient, str, OwnerKind], Awaitable[None]]


@dataclass
class Scenario:
    steps: Step
    """What the test does in the namespace (the controller is running)."""
    done: Callable[[KubeClient, str, OwnerKind], bool]
    """When the end state is reached."""


def _rs_stable(kube: KubeClient, ns: str, owner: OwnerKind) -> bool:
    return stable(get_rs(kube, ns, "rs", owner))


async def _until(
    kube: KubeClient,
    ns: str,
    owner: OwnerKind,
    check: Callable[[KubeClient, str, OwnerKind], bool],
) -> None:
    await eventually(lambda: check(kube, ns, owner), f"{check.__name__} in {ns}")


def _running(kube: KubeClient, ns: str, owner: OwnerKind) -> bool:
    rs = get_rs(kube, ns, "rs", owner)
    pods = list_pods(kube, ns)
    return stable(rs) and all(p["status"].get("phase") == "Running" for p in pods)


def _set_replicas(rs: dict[str, Any], replicas: int) -> None:
    rs["spec"]["replicas"] = replicas


async def _scale_up_and_down(kube: KubeClient, ns: str, owner: OwnerKind) -> None:
    create_rs(kube, ns, rs_body("rs", 3, owner), owner)
    await _until(kube, ns, owner, _rs_stable)
    for replicas in (5, 1):
        update_rs(kube, ns, "rs", functools.partial(_set_replicas, replicas=replicas), owner)
        await _until(kube, ns, owner, _rs_stable)


async def _adopt_orphans(kube: KubeClient, ns: str, owner: OwnerKind) -> None:
    for i in range(3):
        kube.request("POST", f"/api/v1/namespaces/{ns}/pods", pod_body(f"orphan-{i}"))
    create_rs(kube, ns, rs_body("rs", 2, owner), owner)


def _two_owned(kube: KubeClient, ns: str, owner: OwnerKind) -> bool:
    pods = list_pods(kube, ns)
    return _rs_stable(kube, ns, owner) and len(pods) == 2 and all(controller_of(p) for p in pods)


async def _release_on_label_change(kube: KubeClient, ns: str, owner: OwnerKind) -> None:
    create_rs(kube, ns, rs_body("rs", 2, owner), owner)
    await _until(kube, ns, owner, _running)
    name = list_pods(kube, ns)[0]["metadata"]["name"]
    update_pod(kube, ns, name, lambda p: p["metadata"].__setitem__("labels", {"foo": "baz"}))


def _released_and_replaced(kube: KubeClient, ns: str, owner: OwnerKind) -> bool:
    released = list_pods(kube, ns, "foo=baz")
    return (
        _running(kube, ns, owner)
        and len(list_pods(kube, ns)) == 2
        and len(released) == 1
        and controller_of(released[0]) is None
    )


async def _quota(kube: KubeClient, ns: str, owner: OwnerKind) -> None:
    quota = {"metadata": {"name": "quota"}, "spec": {"hard": {"pods": "2"}}}
    kube.request("POST", f"/api/v1/namespaces/{ns}/resourcequotas", quota)
    await eventually(
        lambda: (
            kube.request("GET", f"/api/v1/namespaces/{ns}/resourcequotas/quota")
            .get("status", {})
            .get("hard")
        ),
        "the quota counted",
    )
    create_rs(kube, ns, rs_body("rs", 3, owner), owner)


def _failing(kube: KubeClient, ns: str, owner: OwnerKind) -> bool:
    st = get_rs(kube, ns, "rs", owner).get("status") or {}
    conds = [c["type"] for c in st.get("conditions") or ()]
    return st.get("replicas") == 2 and conds == ["ReplicaFailure"]


async def _min_ready(kube: KubeClient, ns: str, owner: OwnerKind) -> None:
    create_rs(kube, ns, rs_body("rs", 2, owner, minReadySeconds=3), owner)


def _available(kube: KubeClient, ns: str, owner: OwnerKind) -> bool:
    return (get_rs(kube, ns, "rs", owner).get("status") or {}).get("availableReplicas") == 2


async def _terminating(kube: KubeClient, ns: str, owner: OwnerKind) -> None:
    body = rs_body("rs", 3, owner, pod_spec=HELD, template_meta={"finalizers": [HOLD]})
    create_rs(kube, ns, body, owner)
    await _until(kube, ns, owner, _rs_stable)
    name = list_pods(kube, ns)[0]["metadata"]["name"]
    kube.request("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}")


def _one_terminating(kube: KubeClient, ns: str, owner: OwnerKind) -> bool:
    st = get_rs(kube, ns, "rs", owner).get("status") or {}
    return _rs_stable(kube, ns, owner) and st.get("terminatingReplicas") == 1


async def _fully_labeled(kube: KubeClient, ns: str, owner: OwnerKind) -> None:
    create_rs(kube, ns, rs_body("rs", 2, owner), owner)
    await _until(kube, ns, owner, _running)
    extra = {**LABELS, "extra": "yes"}
    update_rs(
        kube,
        ns,
        "rs",
        lambda r: r["spec"]["template"]["metadata"].__setitem__("labels", extra),
        owner,
    )
    name = list_pods(kube, ns)[0]["metadata"]["name"]
    update_pod(kube, ns, name, lambda p: p["metadata"].__setitem__("labels", dict(extra)))


def _one_fully_labeled(kube: KubeClient, ns: str, owner: OwnerKind) -> bool:
    st = get_rs(kube, ns, "rs", owner).get("status") or {}
    return _rs_stable(kube, ns, owner) and st.get("fullyLabeledReplicas") == 1


SCENARIOS = {
    "scale-up-and-down": Scenario(_scale_up_and_down, _running),
    "adopt-orphans-delete-extra": Scenario(_adopt_orphans, _two_owned),
    "release-on-label-change": Scenario(_release_on_label_change, _released_and_replaced),
    "replica-failure-quota": Scenario(_quota, _failing),
    "min-ready-seconds": Scenario(_min_ready, _available),
    "terminating-replicas": Scenario(_terminating, _one_terminating),
    "fully-labeled": Scenario(_fully_labeled, _one_fully_labeled),
}


RS_ONLY = {"terminating-replicas"}
"""Scenarios of a status field ReplicationControllers do not have."""
CASES = [
    *(pytest.param(RS, name, id=f"rs-{name}") for name in SCENARIOS),
    *(pytest.param(RC, name, id=f"rc-{name}") for name in SCENARIOS if name not in RS_ONLY),
]


@pytest.mark.parametrize(("owner", "name"), CASES)
async def test_same_final_state(
    owner: OwnerKind,
    name: str,
    upstream_kube: KubeClient,
    upstream_namespace: str,
    rs_kube: KubeClient,
    rs_namespace: str,
    rs_identity: Path,
    rc_identity: Path,
    rs_informer: str,
) -> None:
    scenario = SCENARIOS[name]
    definition, identity = (
        (CONTROLLER, rs_identity) if owner is RS else (RC_CONTROLLER, rc_identity)
    )
    async with controllers(definition, identity, rs_informer, rs_namespace) as starter:
        starter.start()
        await _compare(
            scenario, name, owner, upstream_kube, upstream_namespace, rs_kube, rs_namespace
        )


async def _compare(
    scenario: Scenario,
    name: str,
    owner: OwnerKind,
    upstream_kube: KubeClient,
    upstream_namespace: str,
    rs_kube: KubeClient,
    rs_namespace: str,
) -> None:
    sides = {"upstream": (upstream_kube, upstream_namespace), "steward": (rs_kube, rs_namespace)}
    await asyncio.gather(*(scenario.steps(kube, ns, owner) for kube, ns in sides.values()))
    for side, (kube, ns) in sides.items():
        await eventually(
            functools.partial(scenario.done, kube, ns, owner),
            f"{name} done on the {side} side ({ns})",
            within=CONVERGE_WITHIN,
        )
    # Both reached the end state; wait until each has settled (see the module docs) and
    # they agree. Past the deadline, a side that never settled fails the test with what
    # it waits for; two settled sides that differ fail with the difference.
    deadline = time.monotonic() + CONVERGE_WITHIN
    while True:
        pending = {
            side: await asyncio.to_thread(unsettled, *at, owner) for side, at in sides.items()
        }
        upstream = await asyncio.to_thread(comparable, *sides["upstream"], owner)
        steward = await asyncio.to_thread(comparable, *sides["steward"], owner)
        settled = not any(pending.values())
        if (settled and steward == upstream) or time.monotonic() > deadline:
            break
        await asyncio.sleep(0.5)
    if not settled:
        pytest.fail(
            f"not settled after {CONVERGE_WITHIN:.0f}s: "
            + "; ".join(f"{side}: {what}" for side, what in pending.items() if what)
        )
    assert steward == upstream
