"""Upstream's Deployment integration scenarios (test/integration/deployment), ported:
Steward's Deployment controller in a cluster where upstream's is off, upstream's
ReplicaSet controller making the pods, kwok running them."""

from __future__ import annotations

from typing import Any

import pytest

from steward.kube import KubeClient
from steward.runtime.hashing import pod_template_hash
from tests.controllers.deployment.conftest import (
    APPS,
    Running,
    condition,
    create,
    deployment_body,
    eventually,
    get,
    patch,
    replica_sets,
    wait_rolled_out,
)

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

UNSCHEDULABLE = {"nodeSelector": {"steward.io/no-such-node": "true"}}


def revisions(rss: list[dict[str, Any]]) -> dict[str, str]:
    return {
        rs["metadata"]["name"]: rs["metadata"]
        .get("annotations", {})
        .get("deployment.kubernetes.io/revision", "")
        for rs in rss
    }


def sizes(rss: list[dict[str, Any]]) -> dict[str, int]:
    return {rs["metadata"]["name"]: rs["spec"]["replicas"] for rs in rss}


async def test_new_deployment(
    skube: KubeClient, sns: str, tracing: None, deployment_controller: Running
) -> None:
    created = create(skube, sns, deployment_body("web", 3))
    d = await wait_rolled_out(skube, sns, "web")
    (rs,) = replica_sets(skube, sns)
    pod_hash = pod_template_hash(created["spec"]["template"])
    assert rs["metadata"]["name"] == f"web-{pod_hash}"
    assert rs["metadata"]["labels"]["pod-template-hash"] == pod_hash
    assert rs["spec"]["selector"]["matchLabels"] == {"app": "web", "pod-template-hash": pod_hash}
    assert rs["spec"]["template"]["metadata"]["labels"]["pod-template-hash"] == pod_hash
    ann = rs["metadata"]["annotations"]
    assert ann["deployment.kubernetes.io/revision"] == "1"
    assert ann["deployment.kubernetes.io/desired-replicas"] == "3"
    assert ann["deployment.kubernetes.io/max-replicas"] == "4"  # 3 + 25% rounded up
    assert ann["traceparent"].startswith("00-")
    (ref,) = rs["metadata"]["ownerReferences"]
    assert ref == {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "name": "web",
        "uid": created["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    assert d["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "1"
    st = d["status"]
    assert (st["replicas"], st["updatedReplicas"], st["readyReplicas"]) == (3, 3, 3)
    assert (st["availableReplicas"], st.get("unavailableReplicas", 0)) == (3, 0)
    assert st["observedGeneration"] == d["metadata"]["generation"]
    available = condition(d, "Available")
    progressing = condition(d, "Progressing")
    assert available and (available["status"], available["reason"]) == (
        "True",
        "MinimumReplicasAvailable",
    )
    assert progressing and (progressing["status"], progressing["reason"]) == (
        "True",
        "NewReplicaSetAvailable",
    )
    assert progressing["message"] == f'ReplicaSet "web-{pod_hash}" has successfully progressed.'


def set_image(api: KubeClient, ns: str, name: str, image: str, **pod_spec: Any) -> None:
    patch(
        api,
        ns,
        name,
        {
            "spec": {
                "template": {"spec": {"containers": [{"name": "main", "image": image}], **pod_spec}}
            }
        },
    )


async def test_rolling_update(skube: KubeClient, sns: str, deployment_controller: Running) -> None:
    body = deployment_body(
        "roll",
        4,
        strategy={"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 1}},
    )
    create(skube, sns, body)
    await wait_rolled_out(skube, sns, "roll")
    set_image(skube, sns, "roll", "busybox:2")
    seen_total: list[int] = []

    def done() -> dict[str, Any] | None:
        rss = replica_sets(skube, sns)
        seen_total.append(sum(rs["spec"]["replicas"] for rs in rss))
        d = get(skube, sns, "roll")
        cond = condition(d, "Progressing")
        if (
            len(rss) == 2
            and cond
            and cond["reason"] == "NewReplicaSetAvailable"
            and d["status"].get("observedGeneration") == d["metadata"]["generation"]
            and d["status"].get("updatedReplicas") == 4
            and d["status"].get("replicas") == 4
        ):
            return d
        return None

    d = await eventually(done, "the rolling update")
    assert max(seen_total) <= 5  # replicas + maxSurge
    rss = replica_sets(skube, sns)
    by_rev = {rs["metadata"]["annotations"]["deployment.kubernetes.io/revision"]: rs for rs in rss}
    assert by_rev["1"]["spec"]["replicas"] == 0
    assert by_rev["2"]["spec"]["replicas"] == 4
    assert by_rev["2"]["spec"]["template"]["spec"]["containers"][0]["image"] == "busybox:2"
    assert d["metadata"]["annotations"]["deployment.kubernetes.io/revision"] == "2"


async def test_recreate(skube: KubeClient, sns: str, deployment_controller: Running) -> None:
    create(skube, sns, deployment_body("rec", 3, strategy={"type": "Recreate"}))
    await wait_rolled_out(skube, sns, "rec")
    (first,) = replica_sets(skube, sns)
    set_image(skube, sns, "rec", "busybox:2")
    violations: list[str] = []

    def done() -> dict[str, Any] | None:
        rss = replica_sets(skube, sns)
        old = next(rs for rs in rss if rs["metadata"]["name"] == first["metadata"]["name"])
        if len(rss) == 2 and (old["spec"]["replicas"] or old["status"].get("replicas", 0)):
            violations.append(f"new replica set while old has {old['status'].get('replicas')}")
        d = get(skube, sns, "rec")
        cond = condition(d, "Progressing")
        if (
            len(rss) == 2
            and cond
            and cond["reason"] == "NewReplicaSetAvailable"
            and d["status"].get("observedGeneration") == d["metadata"]["generation"]
            and d["status"].get("updatedReplicas") == 3
        ):
            return d
        return None

    await eventually(done, "the recreate rollout")
    assert violations == []
    rss = replica_sets(skube, sns)
    assert sorted(rs["spec"]["replicas"] for rs in rss) == [0, 3]


async def test_paused(skube: KubeClient, sns: str, deployment_controller: Running) -> None:
    create(skube, sns, deployment_body("pause", 2, paused=True))

    def paused() -> dict[str, Any] | None:
        d = get(skube, sns, "pause")
        cond = condition(d, "Progressing")
        return d if cond and cond["reason"] == "DeploymentPaused" else None

    d = await eventually(paused, "the DeploymentPaused condition")
    assert condition(d, "Progressing")["status"] == "Unknown"  # type: ignore[index]
    assert replica_sets(skube, sns) == []  # a paused Deployment does not roll out
    patch(skube, sns, "pause", {"spec": {"paused": False}})
    d = await wait_rolled_out(skube, sns, "pause")
    assert len(replica_sets(skube, sns)) == 1
    # Pause mid-life: a template change makes no new ReplicaSet, a scale still applies.
    patch(skube, sns, "pause", {"spec": {"paused": True}})
    await eventually(paused, "paused again")
    set_image(skube, sns, "pause", "busybox:2")
    patch(skube, sns, "pause", {"spec": {"replicas": 3}})

    def scaled() -> list[dict[str, Any]] | None:
        rss = replica_sets(skube, sns)
        return rss if [rs["spec"]["replicas"] for rs in rss] == [3] else None

    await eventually(scaled, "the paused Deployment scaled")
    assert len(replica_sets(skube, sns)) == 1
    patch(skube, sns, "pause", {"spec": {"paused": False}})

    def resumed() -> dict[str, Any] | None:
        rss = replica_sets(skube, sns)
        d = get(skube, sns, "pause")
        return d if len(rss) == 2 and d["status"].get("updatedReplicas") == 3 else None

    await eventually(resumed, "the rollout after resume")
    d = await wait_rolled_out(skube, sns, "pause")


async def test_scaled_rollout_proportional(
    skube: KubeClient, sns: str, deployment_controller: Running
) -> None:
    """Scaling a Deployment whose rollout is stuck spreads the new replicas over both
    ReplicaSets in proportion to their sizes (the max-replicas annotation)."""
    body = deployment_body(
        "prop",
        10,
        strategy={"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 3, "maxUnavailable": 2}},
    )
    create(skube, sns, body)
    await wait_rolled_out(skube, sns, "prop")
    set_image(skube, sns, "prop", "busybox:2", **UNSCHEDULABLE)

    def stuck() -> list[dict[str, Any]] | None:
        rss = replica_sets(skube, sns)
        return rss if sorted(rs["spec"]["replicas"] for rs in rss) == [5, 8] else None

    rss = await eventually(stuck, "the rollout stuck at 8 old + 5 new")
    patch(skube, sns, "prop", {"spec": {"replicas": 20}})

    def spread() -> dict[str, int] | None:
        got = sizes(replica_sets(skube, sns))
        return got if sum(got.values()) == 23 else None

    got = await eventually(spread, "the scale spread over both ReplicaSets")
    old, new = (
        rs["metadata"]["name"]
        for rs in sorted(rss, key=lambda r: r["spec"]["replicas"], reverse=True)
    )
    # 20 + 3 surge = 23 allowed; old 8 * 23/13 = 14.15 → 14, new 5 * 23/13 = 8.8 → 9.
    assert got == {old: 14, new: 9}
    for rs in replica_sets(skube, sns):
        ann = rs["metadata"]["annotations"]
        assert ann["deployment.kubernetes.io/desired-replicas"] == "20"
        assert ann["deployment.kubernetes.io/max-replicas"] == "23"


async def test_rollback(skube: KubeClient, sns: str, deployment_controller: Running) -> None:
    """``kubectl rollout undo``: the old template again; its ReplicaSet becomes the new
    one with the next revision, the old revision kept in revision-history."""
    create(skube, sns, deployment_body("undo", 2))
    await wait_rolled_out(skube, sns, "undo")
    set_image(skube, sns, "undo", "busybox:2")

    def two() -> dict[str, Any] | None:
        d = get(skube, sns, "undo")
        return (
            d
            if d["metadata"].get("annotations", {}).get("deployment.kubernetes.io/revision") == "2"
            else None
        )

    await eventually(two, "revision 2")
    await wait_rolled_out(skube, sns, "undo")
    set_image(skube, sns, "undo", "busybox:1")

    def three() -> dict[str, Any] | None:
        d = get(skube, sns, "undo")
        return (
            d
            if d["metadata"].get("annotations", {}).get("deployment.kubernetes.io/revision") == "3"
            else None
        )

    await eventually(three, "revision 3")
    await wait_rolled_out(skube, sns, "undo")
    rss = replica_sets(skube, sns)
    assert len(rss) == 2
    current = next(
        rs for rs in rss if rs["spec"]["template"]["spec"]["containers"][0]["image"] == "busybox:1"
    )
    ann = current["metadata"]["annotations"]
    assert ann["deployment.kubernetes.io/revision"] == "3"
    assert ann["deployment.kubernetes.io/revision-history"] == "1"
    assert current["spec"]["replicas"] == 2


async def test_progress_deadline_exceeded(
    skube: KubeClient, sns: str, deployment_controller: Running
) -> None:
    create(
        skube, sns, deployment_body("late", 2, progressDeadlineSeconds=5, pod_spec=UNSCHEDULABLE)
    )

    def timed_out() -> dict[str, Any] | None:
        d = get(skube, sns, "late")
        cond = condition(d, "Progressing")
        return d if cond and cond["reason"] == "ProgressDeadlineExceeded" else None

    d = await eventually(timed_out, "ProgressDeadlineExceeded", within=90)
    cond = condition(d, "Progressing")
    assert cond is not None and cond["status"] == "False"
    (rs,) = replica_sets(skube, sns)
    assert cond["message"] == f'ReplicaSet "{rs["metadata"]["name"]}" has timed out progressing.'
    available = condition(d, "Available")
    assert available is not None and (available["status"], available["reason"]) == (
        "False",
        "MinimumReplicasUnavailable",
    )


async def test_min_ready_seconds(
    skube: KubeClient, sns: str, deployment_controller: Running
) -> None:
    """minReadySeconds reaches the ReplicaSet (whose controller counts availability), and
    a change of it updates the current ReplicaSet instead of making a new one."""
    create(skube, sns, deployment_body("mrs", 2, minReadySeconds=2))
    await wait_rolled_out(skube, sns, "mrs")
    (rs,) = replica_sets(skube, sns)
    assert rs["spec"]["minReadySeconds"] == 2
    patch(skube, sns, "mrs", {"spec": {"minReadySeconds": 0}})

    def updated() -> list[dict[str, Any]] | None:
        rss = replica_sets(skube, sns)
        return rss if len(rss) == 1 and not rss[0]["spec"].get("minReadySeconds") else None

    await eventually(updated, "minReadySeconds 0 on the ReplicaSet")
    await wait_rolled_out(skube, sns, "mrs")


async def test_revision_history_cleanup(
    skube: KubeClient, sns: str, deployment_controller: Running
) -> None:
    create(skube, sns, deployment_body("hist", 1, revisionHistoryLimit=1))
    await wait_rolled_out(skube, sns, "hist")
    for image in ("busybox:2", "busybox:3", "busybox:4"):
        set_image(skube, sns, "hist", image)

        def at(image: str = image) -> dict[str, Any] | None:
            d = get(skube, sns, "hist")
            rss = replica_sets(skube, sns)
            cur = [
                rs
                for rs in rss
                if rs["spec"]["template"]["spec"]["containers"][0]["image"] == image
            ]
            return (
                d
                if cur
                and cur[0]["status"].get("availableReplicas") == 1
                and d["status"].get("updatedReplicas") == 1
                and d["status"].get("replicas") == 1
                else None
            )

        await eventually(at, f"{image} rolled out")

    def cleaned() -> dict[str, str] | None:
        got = revisions(replica_sets(skube, sns))
        return got if len(got) == 2 else None

    got = await eventually(cleaned, "old ReplicaSets beyond the limit deleted")
    assert sorted(got.values()) == ["3", "4"]


async def test_adoption_and_orphaning(
    skube: KubeClient, sns: str, deployment_controller: Running
) -> None:
    """A Deployment deleted with orphan propagation leaves its ReplicaSet; a new one with
    the same selector and template adopts it (no new ReplicaSet); a ReplicaSet whose
    labels stop matching is released."""
    create(skube, sns, deployment_body("adopt", 2))
    await wait_rolled_out(skube, sns, "adopt")
    (rs,) = replica_sets(skube, sns)
    skube.request(
        "DELETE",
        f"{APPS}/namespaces/{sns}/deployments/adopt",
        {"kind": "DeleteOptions", "apiVersion": "v1", "propagationPolicy": "Orphan"},
    )

    def orphaned() -> dict[str, Any] | None:
        found = replica_sets(skube, sns)
        return found[0] if found and not found[0]["metadata"].get("ownerReferences") else None

    await eventually(orphaned, "the ReplicaSet orphaned")

    def gone() -> bool:
        names = skube.request("GET", f"{APPS}/namespaces/{sns}/deployments").get("items") or []
        return not names

    await eventually(gone, "the Deployment gone")
    again = create(skube, sns, deployment_body("adopt", 2))

    def adopted() -> dict[str, Any] | None:
        found = replica_sets(skube, sns)
        refs = found[0]["metadata"].get("ownerReferences") or [] if found else []
        return (
            found[0]
            if len(found) == 1 and refs and refs[0]["uid"] == again["metadata"]["uid"]
            else None
        )

    adopted_rs = await eventually(adopted, "the ReplicaSet adopted")
    assert adopted_rs["metadata"]["name"] == rs["metadata"]["name"]
    assert adopted_rs["metadata"]["ownerReferences"][0]["controller"] is True
    await wait_rolled_out(skube, sns, "adopt")
    # Release: the ReplicaSet's labels no longer match the selector.
    skube.request(
        "PATCH",
        f"{APPS}/namespaces/{sns}/replicasets/{rs['metadata']['name']}",
        {"metadata": {"labels": {"app": "elsewhere"}}},
        content_type="application/merge-patch+json",
    )

    def released() -> list[dict[str, Any]] | None:
        found = replica_sets(skube, sns)
        mine = [r for r in found if r["metadata"]["name"] == rs["metadata"]["name"]]
        return found if mine and not mine[0]["metadata"].get("ownerReferences") else None

    await eventually(released, "the ReplicaSet released")
