"""Steward's ReplicationController controller on a real control plane (``rs_cluster``,
without upstream's): what is its own beside the ReplicaSet controller's sync — pods
owned by a ``v1`` ReplicationController, its label-map selector for adoption and
release, Events from ``replication-controller``, a status without
``terminatingReplicas`` — while scaling up and down. The shared sync's behaviour against
upstream's replicationcontroller is the differential's (``rc-*`` of
test_differential.py)."""

from __future__ import annotations

from typing import Any

import pytest

from steward.kube import KubeClient
from tests.controllers.replicaset.conftest import (
    RC,
    Starter,
    controller_of,
    create_rs,
    eventually,
    get_rs,
    list_pods,
    pod_body,
    rs_body,
    update_pod,
    wait_stable_rs,
)
from tests.controllers.replicaset.conftest import (
    update_rs as update_owner,
)

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]


def _events(kube: KubeClient, ns: str, reason: str) -> list[dict[str, Any]]:
    found = kube.request("GET", f"/api/v1/namespaces/{ns}/events")
    return [e for e in found.get("items") or () if e.get("reason") == reason]


async def test_scales_owns_and_reports_as_a_replication_controller(
    rs_kube: KubeClient, rs_namespace: str, rc_controllers: Starter
) -> None:
    kube, ns = rs_kube, rs_namespace
    rc_controllers.start()
    rc = create_rs(kube, ns, rs_body("rc", 3, RC), RC)
    rc = await wait_stable_rs(kube, rc, RC)
    pods = list_pods(kube, ns)
    assert len(pods) == 3
    for pod in pods:
        ref = controller_of(pod)
        assert ref is not None
        assert (ref["apiVersion"], ref["kind"], ref["name"], ref["uid"]) == (
            "v1",
            "ReplicationController",
            "rc",
            rc["metadata"]["uid"],
        )
        assert ref.get("blockOwnerDeletion") is True
    # Status: upstream's fields, no terminatingReplicas (the kind has none).
    st = get_rs(kube, ns, "rc", RC)["status"]
    assert st["replicas"] == 3 and st["fullyLabeledReplicas"] == 3
    assert "terminatingReplicas" not in st

    rc = update_owner(kube, ns, "rc", lambda r: r["spec"].__setitem__("replicas", 1), RC)
    await wait_stable_rs(kube, rc, RC)
    await eventually(lambda: len(list_pods(kube, ns)) == 1 or None, "scaled down to one pod")

    def events_recorded() -> bool:
        for reason in ("SuccessfulCreate", "SuccessfulDelete"):
            events = _events(kube, ns, reason)
            if not events:
                return False
            for event in events:
                assert event["source"]["component"] == "replication-controller"
                involved = event["involvedObject"]
                assert (involved["kind"], involved["name"]) == ("ReplicationController", "rc")
        return True

    await eventually(events_recorded, "the controller's Events")


async def test_adopts_and_releases_by_its_label_map(
    rs_kube: KubeClient, rs_namespace: str, rc_controllers: Starter
) -> None:
    kube, ns = rs_kube, rs_namespace
    # An orphan that matches only part of the selector is neither adopted nor counted.
    kube.request("POST", f"/api/v1/namespaces/{ns}/pods", pod_body("partial"))
    body = rs_body("rc", 1, RC)
    body["spec"]["selector"] = {"foo": "bar", "app": "web"}
    body["spec"]["template"]["metadata"]["labels"] = {"foo": "bar", "app": "web"}
    orphan = pod_body("orphan-full")
    orphan["metadata"]["labels"] = {"foo": "bar", "app": "web"}
    kube.request("POST", f"/api/v1/namespaces/{ns}/pods", orphan)
    rc = create_rs(kube, ns, body, RC)
    uid = rc["metadata"]["uid"]
    # Started once both exist, so its first sync sees the orphan (no race between the
    # pods' and the owners' streams to create a pod first).
    rc_controllers.start()

    def adopted() -> bool:
        pods = {p["metadata"]["name"]: p for p in list_pods(kube, ns, "foo=bar")}
        ref = controller_of(pods["orphan-full"])
        st = get_rs(kube, ns, "rc", RC).get("status") or {}
        return ref is not None and ref["uid"] == uid and st.get("replicas") == 1

    await eventually(adopted, "the matching orphan adopted as the one replica")
    pods = {p["metadata"]["name"]: p for p in list_pods(kube, ns, "foo=bar")}
    assert set(pods) == {"partial", "orphan-full"}
    assert controller_of(pods["partial"]) is None

    # Relabelled out of the selector: released, and a new pod takes its place.
    update_pod(kube, ns, "orphan-full", lambda p: p["metadata"].__setitem__("labels", {}))

    def released_and_replaced() -> bool:
        released = kube.request("GET", f"/api/v1/namespaces/{ns}/pods/orphan-full")
        owned = [
            p
            for p in list_pods(kube, ns, "foo=bar,app=web")
            if (ref := controller_of(p)) is not None and ref["uid"] == uid
        ]
        return controller_of(released) is None and len(owned) == 1

    await eventually(released_and_replaced, "the relabelled pod released and replaced")
