"""Upstream's ReplicaSet integration scenarios (test/integration/replicaset of Kubernetes
v1.37.2), plus the ReplicaFailure check of its e2e suite, run against Steward's
ReplicaSet controller in ``rs_cluster``.

Differences from upstream's setup, all forced by a real cluster: pods are scheduled and
run by kwok (Ready at once) and the garbage collector runs, so owner references name real
objects (another ReplicaSet, a StatefulSet) instead of made-up UIDs the collector would
strip; pods that must stay Pending or terminating are kept off the nodes by a node
selector and held by a finalizer. Upstream's feature-gate-off variants (PodDeletionCost
off, DeploymentReplicaSetTerminatingReplicas off) are not ported: Steward's controller
implements the gates' default (on).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from steward.kube import ConflictError, KubeClient
from tests.controllers.replicaset.conftest import (
    LABELS,
    Starter,
    controller_of,
    create_rs,
    eventually,
    get_rs,
    list_pods,
    pod_body,
    rs_body,
    rs_path,
    update_pod,
    update_rs,
    wait_stable_rs,
)
from tests.spans import recorded_spans

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

UNSCHEDULABLE = {"nodeSelector": {"steward.io/no-such-node": "true"}}
HOLD = "steward.io/test-hold"


def pods_path(ns: str, name: str = "") -> str:
    return f"/api/v1/namespaces/{ns}/pods/{name}" if name else f"/api/v1/namespaces/{ns}/pods"


def ref_to(obj: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        **extra,
    }


def statefulset(kube: KubeClient, ns: str) -> dict[str, Any]:
    """A real StatefulSet with no pods (a controller other than a ReplicaSet)."""
    body = {
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": {"name": "sts"},
        "spec": {
            "replicas": 0,
            "serviceName": "sts",
            "selector": {"matchLabels": {"app": "sts"}},
            "template": {
                "metadata": {"labels": {"app": "sts"}},
                "spec": {"containers": [{"name": "c", "image": "img"}]},
            },
        },
    }
    created = kube.request("POST", f"/apis/apps/v1/namespaces/{ns}/statefulsets", body)
    return {**created, "apiVersion": "apps/v1", "kind": "StatefulSet"}


def set_cost(pod: dict[str, Any], cost: str) -> None:
    pod["metadata"]["annotations"] = {"controller.kubernetes.io/pod-deletion-cost": cost}


def set_owners(pod: dict[str, Any], refs: list[dict[str, Any]]) -> None:
    pod["metadata"]["ownerReferences"] = refs


def typed(rs: dict[str, Any]) -> dict[str, Any]:
    return {**rs, "apiVersion": "apps/v1", "kind": "ReplicaSet"}


async def scale(kube: KubeClient, ns: str, name: str, replicas: int) -> dict[str, Any]:
    """Upstream's ``scaleRS``: set spec.replicas, wait until stable."""
    rs = update_rs(kube, ns, name, lambda r: r["spec"].__setitem__("replicas", replicas))
    return await wait_stable_rs(kube, rs)


def ready_pods(kube: KubeClient, ns: str, count: int) -> Callable[[], list[dict[str, Any]]]:
    def check() -> list[dict[str, Any]]:
        pods = list_pods(kube, ns)
        ok = len(pods) == count and all(
            p["status"].get("phase") == "Running"
            for p in pods
            if not p["metadata"].get("deletionTimestamp")
        )
        return pods if ok else []

    return check


def set_ready(kube: KubeClient, ns: str, name: str, status: str, at: str) -> None:
    """Upstream's ``setPodsReadyCondition`` for one pod: Running, Ready ``status`` since
    ``at``."""

    def change(pod: dict[str, Any]) -> None:
        pod["status"]["phase"] = "Running"
        conds = [c for c in pod["status"].get("conditions") or () if c["type"] != "Ready"]
        conds.append({"type": "Ready", "status": status, "lastTransitionTime": at})
        pod["status"]["conditions"] = conds

    update_pod(kube, ns, name, change, "/status")


def ago(seconds: float) -> str:
    import time

    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - seconds))


# TestAdoption -------------------------------------------------------------------------
ADOPTION_CASES = {
    "owner-not-controller": (
        lambda rs, other: [ref_to(rs)],
        lambda rs, other: [ref_to(rs, controller=True, blockOwnerDeletion=True)],
    ),
    "no-owner-references": (
        lambda rs, other: [],
        lambda rs, other: [ref_to(rs, controller=True, blockOwnerDeletion=True)],
    ),
    "rs-is-controller": (
        lambda rs, other: [ref_to(rs, controller=True)],
        lambda rs, other: [ref_to(rs, controller=True)],
    ),
    "other-rs-is-controller": (
        lambda rs, other: [ref_to(other, controller=True), ref_to(rs)],
        lambda rs, other: [ref_to(other, controller=True), ref_to(rs)],
    ),
}


@pytest.mark.parametrize("case", list(ADOPTION_CASES))
async def test_adoption(
    rs_kube: KubeClient, rs_namespace: str, rs_controllers: Starter, case: str
) -> None:
    ns, kube = rs_namespace, rs_kube
    existing, expected = ADOPTION_CASES[case]
    rs = typed(create_rs(kube, ns, rs_body("rs", 1)))
    # A real other ReplicaSet as the other controller: it selects the same pods and wants
    # one, so it keeps the pod it controls (one that did not select it would release it).
    other = rs
    if case == "other-rs-is-controller":
        other = typed(create_rs(kube, ns, rs_body("another-rs", 1)))
    kube.request("POST", pods_path(ns), pod_body("pod", ownerReferences=existing(rs, other)))
    rs_controllers.start()
    want = expected(rs, other)

    def check() -> bool:
        refs = kube.request("GET", pods_path(ns, "pod"))["metadata"].get("ownerReferences") or []
        return bool(refs == want)

    await eventually(check, f"owner references {want}")
    if case == "other-rs-is-controller":
        # Not adopted, so the ReplicaSet made a pod of its own.
        await wait_stable_rs(kube, rs)
        await wait_stable_rs(kube, other)
        assert len(list_pods(kube, ns)) == 2


# TestSpecReplicasChange ---------------------------------------------------------------
async def test_spec_replicas_change(
    rs_kube: KubeClient, rs_namespace: str, rs_controllers: Starter
) -> None:
    ns, kube = rs_namespace, rs_kube
    rs_controllers.start()
    rs = create_rs(kube, ns, rs_body("rs", 2))
    await wait_stable_rs(kube, rs)
    for replicas in (3, 0, 2):
        await scale(kube, ns, "rs", replicas)
        assert (
            len([p for p in list_pods(kube, ns) if not p["metadata"].get("deletionTimestamp")])
            == replicas
        )
    old_generation = get_rs(kube, ns, "rs")["metadata"]["generation"]
    updated = update_rs(
        kube,
        ns,
        "rs",
        lambda r: r["spec"]["template"]["metadata"].__setitem__(
            "annotations", {"test": "annotation"}
        ),
    )
    saved = updated["metadata"]["generation"]
    assert saved > old_generation
    await eventually(
        lambda: get_rs(kube, ns, "rs")["status"].get("observedGeneration", 0) >= saved,
        "observedGeneration to catch up",
    )


# TestDeletingAndFailedPods ------------------------------------------------------------
async def test_deleting_and_failed_pods(
    rs_kube: KubeClient, rs_namespace: str, rs_controllers: Starter
) -> None:
    ns, kube = rs_namespace, rs_kube
    rs_controllers.start()
    rs = create_rs(kube, ns, rs_body("rs", 2, pod_spec=UNSCHEDULABLE))
    await wait_stable_rs(kube, rs)
    pods = list_pods(kube, ns)
    assert len(pods) == 2
    deleting, failed = pods
    update_pod(
        kube,
        ns,
        deleting["metadata"]["name"],
        lambda p: p["metadata"].__setitem__("finalizers", [HOLD]),
    )
    kube.request("DELETE", pods_path(ns, deleting["metadata"]["name"]))
    update_pod(
        kube,
        ns,
        failed["metadata"]["name"],
        lambda p: p["status"].__setitem__("phase", "Failed"),
        "/status",
    )
    pods = await eventually(
        lambda: (lambda ps: ps if len(ps) == 4 else None)(list_pods(kube, ns)), "4 pods"
    )
    uids = {p["metadata"]["uid"] for p in pods}
    assert deleting["metadata"]["uid"] in uids
    assert failed["metadata"]["uid"] in uids

    def settled() -> dict[str, Any] | None:
        st = get_rs(kube, ns, "rs").get("status") or {}
        return st if st.get("replicas") == 2 and st.get("terminatingReplicas") == 1 else None

    await eventually(settled, "2 replicas and 1 terminating in the status")


# TestPodDeletionCost ------------------------------------------------------------------
@pytest.mark.parametrize(
    ("costs", "restarts", "remaining"),
    [(["1000", "100"], [5, 0], 0), (["100", "100"], [5, 0], 1), (None, [5, 0], 1)],
    ids=["different-costs", "same-costs", "no-costs"],
)
async def test_pod_deletion_cost(
    rs_kube: KubeClient,
    rs_namespace: str,
    rs_controllers: Starter,
    costs: list[str] | None,
    restarts: list[int],
    remaining: int,
) -> None:
    ns, kube = rs_namespace, rs_kube
    rs_controllers.start()
    rs = create_rs(kube, ns, rs_body("rs", 2))
    await wait_stable_rs(kube, rs)
    pods = await eventually(ready_pods(kube, ns, 2), "2 running pods")
    keep = pods[remaining]["metadata"]["uid"]
    for i, pod in enumerate(pods):
        name = pod["metadata"]["name"]
        if costs:
            update_pod(
                kube,
                ns,
                name,
                functools.partial(set_cost, cost=costs[i]),
            )

        def status(p: dict[str, Any], n: int = restarts[i]) -> None:
            # Not ready (as upstream's pods, which no kubelet runs), so the ready time
            # does not decide before the restarts.
            for cond in p["status"].get("conditions") or ():
                if cond["type"] == "Ready":
                    cond["status"] = "False"
            for cs in p["status"].get("containerStatuses") or ():
                cs["restartCount"] = n
                cs["ready"] = False

        update_pod(kube, ns, name, status, "/status")
    update_rs(kube, ns, "rs", lambda r: r["spec"].__setitem__("replicas", 1))
    left = await eventually(
        lambda: (lambda ps: ps if len(ps) == 1 else None)(list_pods(kube, ns)), "1 pod left"
    )
    assert left[0]["metadata"]["uid"] == keep


# TestOverlappingRSs -------------------------------------------------------------------
async def test_overlapping_rss(
    rs_kube: KubeClient, rs_namespace: str, rs_controllers: Starter
) -> None:
    ns, kube = rs_namespace, rs_kube
    rs_controllers.start()
    for i in range(2):
        rs = create_rs(kube, ns, rs_body(f"rs-{i + 1}", i + 1))
        await wait_stable_rs(kube, rs)
    assert len(list_pods(kube, ns)) == 3
    for i in range(2):
        rs = get_rs(kube, ns, f"rs-{i + 1}")
        assert rs["status"]["replicas"] == rs["spec"]["replicas"]


# TestPodOrphaningAndAdoptionWhenLabelsChange ------------------------------------------
async def test_pod_orphaning_and_adoption_when_labels_change(
    rs_kube: KubeClient, rs_namespace: str, rs_controllers: Starter
) -> None:
    ns, kube = rs_namespace, rs_kube
    rs_controllers.start()
    rs = create_rs(kube, ns, rs_body("rs", 1))
    await wait_stable_rs(kube, rs)
    (pod,) = list_pods(kube, ns)
    name = pod["metadata"]["name"]
    assert controller_of(pod) is not None
    update_pod(
        kube, ns, name, lambda p: p["metadata"].__setitem__("labels", {"new-foo": "new-bar"})
    )
    await eventually(
        lambda: controller_of(kube.request("GET", pods_path(ns, name))) is None, "the pod released"
    )
    # Released, it is replaced.
    await eventually(lambda: len(list_pods(kube, ns)) == 1, "a replacement pod")
    update_pod(kube, ns, name, lambda p: p["metadata"].__setitem__("labels", dict(LABELS)))

    def adopted_or_deleted() -> dict[str, Any] | None:
        pods = list_pods(kube, ns)
        mine = [p for p in pods if p["metadata"]["name"] == name]
        if mine and controller_of(mine[0]) is not None:
            return mine[0]
        if not mine and len(pods) == 1:
            return pods[0]  # adopted, then deleted as the extra one
        return None

    kept = await eventually(adopted_or_deleted, "the pod adopted again")
    ref = controller_of(kept)
    assert ref is not None and ref["uid"] == rs["metadata"]["uid"]
    await eventually(
        lambda: (
            len([p for p in list_pods(kube, ns) if not p["metadata"].get("deletionTimestamp")]) == 1
        ),
        "one pod in the end",
    )


# TestGeneralPodAdoption ---------------------------------------------------------------
async def test_general_pod_adoption(
    rs_kube: KubeClient, rs_namespace: str, rs_controllers: Starter
) -> None:
    ns, kube = rs_namespace, rs_kube
    rs_controllers.start()
    rs = typed(create_rs(kube, ns, rs_body("rs", 1)))
    await wait_stable_rs(kube, rs)
    (pod,) = list_pods(kube, ns)
    name = pod["metadata"]["name"]
    sts = statefulset(kube, ns)

    for refs, count in (
        ([ref_to(sts, controller=False)], 2),
        ([ref_to(rs, controller=False)], 1),
    ):
        update_pod(kube, ns, name, functools.partial(set_owners, refs=refs))

        def check(want: int = count) -> dict[str, Any] | None:
            cur = kube.request("GET", pods_path(ns, name))
            return cur if controller_of(cur) is not None else None

        cur = await eventually(check, "a controller reference again")
        assert controller_of(cur)["uid"] == rs["metadata"]["uid"]  # type: ignore[index]
        assert len(cur["metadata"]["ownerReferences"]) == count


# TestReadyAndAvailableReplicas --------------------------------------------------------
async def test_ready_and_available_replicas(
    rs_kube: KubeClient, rs_namespace: str, rs_controllers: Starter
) -> None:
    ns, kube = rs_namespace, rs_kube
    rs_controllers.start()
    rs = create_rs(kube, ns, rs_body("rs", 3, minReadySeconds=3600))
    rs = await wait_stable_rs(kube, rs)
    assert rs["status"].get("availableReplicas", 0) == 0
    pods = await eventually(ready_pods(kube, ns, 3), "3 running pods")
    set_ready(kube, ns, pods[0]["metadata"]["name"], "False", ago(0))
    set_ready(kube, ns, pods[1]["metadata"]["name"], "True", ago(0))
    set_ready(kube, ns, pods[2]["metadata"]["name"], "True", ago(7200))

    def check() -> dict[str, Any] | None:
        st = get_rs(kube, ns, "rs").get("status") or {}
        ok = (st.get("replicas"), st.get("readyReplicas"), st.get("availableReplicas")) == (3, 2, 1)
        return st if ok else None

    await eventually(check, "3 replicas, 2 ready, 1 available")


async def test_min_ready_seconds_requeues_until_available(
    rs_kube: KubeClient, rs_namespace: str, rs_controllers: Starter
) -> None:
    """Nothing changes after the pods become ready; the controller looks again by itself
    once minReadySeconds have passed."""
    ns, kube = rs_namespace, rs_kube
    rs_controllers.start()
    create_rs(kube, ns, rs_body("rs", 2, minReadySeconds=4))

    def check() -> dict[str, Any] | None:
        st = get_rs(kube, ns, "rs").get("status") or {}
        return st if st.get("availableReplicas") == 2 else None

    st = await eventually(check, "2 available replicas")
    assert st["readyReplicas"] == 2


# TestRSScaleSubresource ---------------------------------------------------------------
async def test_rs_scale_subresource(
    rs_kube: KubeClient, rs_namespace: str, rs_controllers: Starter
) -> None:
    ns, kube = rs_namespace, rs_kube
    rs_controllers.start()
    rs = create_rs(kube, ns, rs_body("rs", 1))
    await wait_stable_rs(kube, rs)
    for replicas in (3, 0):
        scale_obj = kube.request("GET", rs_path(ns, "rs") + "/scale")
        assert scale_obj["spec"]["replicas"] == get_rs(kube, ns, "rs")["spec"]["replicas"]
        for _ in range(20):  # upstream's RetryOnConflict
            scale_obj = kube.request("GET", rs_path(ns, "rs") + "/scale")
            scale_obj["spec"]["replicas"] = replicas
            try:
                kube.request("PUT", rs_path(ns, "rs") + "/scale", scale_obj)
                break
            except ConflictError:
                continue
        cur = get_rs(kube, ns, "rs")
        assert cur["spec"]["replicas"] == replicas
        await wait_stable_rs(kube, cur)


# TestExtraPodsAdoptionAndDeletion -----------------------------------------------------
async def test_extra_pods_adoption_and_deletion(
    rs_kube: KubeClient, rs_namespace: str, rs_controllers: Starter
) -> None:
    ns, kube = rs_namespace, rs_kube
    rs = create_rs(kube, ns, rs_body("rs", 2))
    for i in range(3):
        kube.request("POST", pods_path(ns), pod_body(f"pod-{i + 1}"))
    rs_controllers.start()
    await wait_stable_rs(kube, rs)

    def two_left() -> list[dict[str, Any]] | None:
        pods = list_pods(kube, ns)
        return pods if len(pods) == 2 else None

    pods = await eventually(two_left, "2 pods left")
    assert {p["metadata"]["name"] for p in pods} <= {"pod-1", "pod-2", "pod-3"}
    assert all(controller_of(p)["uid"] == rs["metadata"]["uid"] for p in pods)  # type: ignore[index]


# TestFullyLabeledReplicas -------------------------------------------------------------
async def test_fully_labeled_replicas(
    rs_kube: KubeClient, rs_namespace: str, rs_controllers: Starter
) -> None:
    ns, kube = rs_namespace, rs_kube
    rs_controllers.start()
    extra = {"foo": "bar", "extraKey": "extraValue"}
    rs = create_rs(kube, ns, rs_body("rs", 2))
    await wait_stable_rs(kube, rs)
    update_rs(
        kube,
        ns,
        "rs",
        lambda r: r["spec"]["template"]["metadata"].__setitem__("labels", dict(extra)),
    )
    pods = list_pods(kube, ns)
    assert len(pods) == 2
    update_pod(
        kube,
        ns,
        pods[0]["metadata"]["name"],
        lambda p: p["metadata"].__setitem__("labels", dict(extra)),
    )

    def check() -> dict[str, Any] | None:
        st = get_rs(kube, ns, "rs").get("status") or {}
        return st if (st.get("replicas"), st.get("fullyLabeledReplicas")) == (2, 1) else None

    await eventually(check, "2 replicas, 1 fully labeled")


# TestReplicaSetsAppsV1DefaultGCPolicy -------------------------------------------------
async def test_default_gc_policy_adds_no_finalizer(
    rs_kube: KubeClient, rs_namespace: str, rs_controllers: Starter
) -> None:
    ns, kube = rs_namespace, rs_kube
    rs_controllers.start()
    fake = "kube.io/dummy-finalizer"
    rs = create_rs(kube, ns, rs_body("rs", 2, metadata={"finalizers": [fake]}))
    await wait_stable_rs(kube, rs)
    assert len(list_pods(kube, ns)) == 2
    kube.request("DELETE", rs_path(ns, "rs"))

    def check() -> dict[str, Any] | None:
        cur = get_rs(kube, ns, "rs")
        if not cur["metadata"].get("deletionTimestamp"):
            return None
        assert cur["metadata"].get("finalizers") == [fake]
        return cur

    await eventually(check, "the ReplicaSet being deleted")
    update_rs(kube, ns, "rs", lambda r: r["metadata"].__setitem__("finalizers", []))


# TestTerminatingReplicas (feature gate on) --------------------------------------------
async def test_terminating_replicas(
    rs_kube: KubeClient, rs_namespace: str, rs_controllers: Starter
) -> None:
    ns, kube = rs_namespace, rs_kube
    rs_controllers.start()
    body = rs_body("rs", 5, pod_spec=UNSCHEDULABLE, template_meta={"finalizers": [HOLD]})
    rs = create_rs(kube, ns, body)
    await wait_stable_rs(kube, rs)

    def terminating(count: int) -> Callable[[], Any]:
        def check() -> Any:
            st = get_rs(kube, ns, "rs").get("status") or {}
            if st.get("terminatingReplicas") == count and st.get("replicas") == 5:
                return st
            return None

        return check

    await eventually(terminating(0), "terminatingReplicas 0")
    pods = list_pods(kube, ns)
    assert len(pods) == 5
    assert all(HOLD in (p["metadata"].get("finalizers") or ()) for p in pods)
    names = [p["metadata"]["name"] for p in pods]
    kube.request("DELETE", pods_path(ns, names[0]))
    await eventually(terminating(1), "terminatingReplicas 1")
    kube.request("DELETE", pods_path(ns, names[1]))
    await eventually(terminating(2), "terminatingReplicas 2")
    # A terminating pod that goes is no longer counted.
    update_pod(kube, ns, names[0], lambda p: p["metadata"].__setitem__("finalizers", []))
    await eventually(terminating(1), "terminatingReplicas 1 again")
    kube.request("DELETE", pods_path(ns, names[2]))
    await eventually(terminating(2), "terminatingReplicas 2 again")
    final = [
        (p["metadata"]["name"], bool(p["metadata"].get("deletionTimestamp")))
        for p in list_pods(kube, ns)
    ]
    assert len(final) == 7, (
        final,
        names,
        get_rs(kube, ns, "rs")["status"],
    )  # 5 active, 2 terminating


# e2e: "should surface a failure condition on a common issue like exceeded quota" -------
async def test_replica_failure_with_quota(
    rs_kube: KubeClient, rs_namespace: str, rs_controllers: Starter
) -> None:
    ns, kube = rs_namespace, rs_kube
    rs_controllers.start()
    quota = {"metadata": {"name": "condition-test"}, "spec": {"hard": {"pods": "2"}}}
    kube.request("POST", f"/api/v1/namespaces/{ns}/resourcequotas", quota)
    await eventually(
        lambda: (
            kube.request("GET", f"/api/v1/namespaces/{ns}/resourcequotas/condition-test")
            .get("status", {})
            .get("hard")
        ),
        "the quota to be counted",
    )
    create_rs(kube, ns, rs_body("condition-test", 3))

    def failure() -> dict[str, Any] | None:
        for cond in get_rs(kube, ns, "condition-test").get("status", {}).get("conditions") or ():
            if cond["type"] == "ReplicaFailure" and cond["status"] == "True":
                return dict(cond)
        return None

    cond = await eventually(failure, "the ReplicaFailure condition")
    assert cond["reason"] == "FailedCreate"
    assert "exceeded quota" in cond["message"]
    assert len(list_pods(kube, ns)) == 2
    update_rs(kube, ns, "condition-test", lambda r: r["spec"].__setitem__("replicas", 2))
    await eventually(lambda: failure() is None, "the condition removed")
    rs = get_rs(kube, ns, "condition-test")
    assert rs["status"]["replicas"] == 2


# Owner references and the pods Steward creates ----------------------------------------
async def test_pod_of_another_controller_is_not_adopted(
    rs_kube: KubeClient, rs_namespace: str, rs_controllers: Starter
) -> None:
    ns, kube = rs_namespace, rs_kube
    # A controller of a kind that no controller in the cluster acts for (a StatefulSet
    # would release a pod it does not select, and the ReplicaSet then adopt it).
    owner = kube.request(
        "POST", f"/api/v1/namespaces/{ns}/configmaps", {"metadata": {"name": "owner"}}
    )
    owner = {**owner, "apiVersion": "v1", "kind": "ConfigMap"}
    kube.request(
        "POST", pods_path(ns), pod_body("taken", ownerReferences=[ref_to(owner, controller=True)])
    )
    rs = create_rs(kube, ns, rs_body("rs", 1))
    rs_controllers.start()
    await wait_stable_rs(kube, rs)
    pods = list_pods(kube, ns)
    assert len(pods) == 2
    owners = {p["metadata"]["name"]: controller_of(p)["uid"] for p in pods}  # type: ignore[index]
    assert owners.pop("taken") == owner["metadata"]["uid"]
    assert list(owners.values()) == [rs["metadata"]["uid"]]


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    yield from recorded_spans()


async def test_created_pods_carry_template_owner_and_trace(
    rs_kube: KubeClient, rs_namespace: str, rs_controllers: Starter, spans: InMemorySpanExporter
) -> None:
    ns, kube = rs_namespace, rs_kube
    rs_controllers.start()
    body = rs_body("web", 2, template_meta={"annotations": {"note": "kept"}})
    body["spec"]["template"]["metadata"]["labels"]["tier"] = "front"
    rs = create_rs(kube, ns, body)
    await wait_stable_rs(kube, rs)
    pods = list_pods(kube, ns)
    assert len(pods) == 2
    reconciles = {
        format(s.context.trace_id, "032x")
        for s in spans.get_finished_spans()
        if s.name.startswith("reconcile")
    }
    for pod in pods:
        meta = pod["metadata"]
        assert meta["generateName"] == "web-"
        assert meta["labels"] == {"foo": "bar", "tier": "front"}
        assert meta["annotations"]["note"] == "kept"
        assert meta["ownerReferences"] == [
            {
                "apiVersion": "apps/v1",
                "kind": "ReplicaSet",
                "name": "web",
                "uid": rs["metadata"]["uid"],
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        traceparent = meta["annotations"]["traceparent"]
        assert traceparent.split("-")[1] in reconciles
