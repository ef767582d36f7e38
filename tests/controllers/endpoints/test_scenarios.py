"""Upstream's integration scenarios of the Endpoints controller
(``test/integration/endpoints``), against the real control plane with Steward's
controller in place of kube-controller-manager's (``ep_cluster``)."""

from __future__ import annotations

import asyncio
import functools
from typing import Any

import pytest

from steward.kube import ApiStatusError, KubeClient
from tests.controllers.endpoints.conftest import (
    LABELS,
    Starter,
    addresses,
    create_pod,
    endpoints_path,
    eventually,
    get_endpoints,
    pod_body,
    pods_path,
    running_status,
    service_body,
    services_path,
    set_ready,
    stays,
    update_service,
)

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

MANAGED_BY = "endpoints.kubernetes.io/managed-by"
HEADLESS = "service.kubernetes.io/headless"
HOLD = "steward.io/test-hold"
TRIGGER = "endpoints.kubernetes.io/last-change-trigger-time"


def ips(ep: dict[str, Any] | None, field: str = "addresses") -> list[str]:
    return sorted(a["ip"] for a in addresses(ep, field))


def ips_of(kube: KubeClient, ns: str, name: str) -> list[str]:
    """The ready IPs of the Service's Endpoints (none while there are none)."""
    return ips(get_endpoints(kube, ns, name))


async def test_an_unchanged_service_keeps_its_endpoints_object_as_it_is(
    ep_kube: KubeClient, ep_namespace: str, ep_controllers: Starter
) -> None:
    """TestEndpointUpdates: a Service update that changes nothing the Endpoints depend on
    writes nothing (the resource version stays), and a pod without a Ready condition is a
    not-ready address of the Service's IP family."""
    ns = ep_namespace
    ep_controllers.start(workers=1)
    create_pod(ep_kube, ns, pod_body("test-pod"), running_status(["1.1.1.1", "2001:db8::"], None))
    svc = ep_kube.request("POST", services_path(ns), service_body("foo1"))
    first = await eventually(
        lambda: (
            (e := get_endpoints(ep_kube, ns, "foo1")) and addresses(e, "notReadyAddresses") and e
        ),
        "foo1's not-ready address",
    )
    assert ips(first, "notReadyAddresses") == ["1.1.1.1"]
    assert ips(first) == []
    # A Service seen for the first time: its creation is the last change.
    created = svc["metadata"]["creationTimestamp"]
    assert first["metadata"]["annotations"][TRIGGER] == created
    version = first["metadata"]["resourceVersion"]

    def annotate(svc: dict[str, Any]) -> None:
        svc["metadata"]["annotations"] = {"foo": "bar"}

    update_service(ep_kube, ns, "foo1", annotate)
    # One worker: once foo2 is done, foo1's sync (queued before) is done too.
    ep_kube.request("POST", services_path(ns), service_body("foo2"))
    await eventually(lambda: get_endpoints(ep_kube, ns, "foo2"), "foo2's Endpoints")
    again = get_endpoints(ep_kube, ns, "foo1")
    assert again is not None
    assert again["metadata"]["resourceVersion"] == version


async def test_readiness_flipped_and_back_ends_ready_on_every_service(
    ep_kube: KubeClient, ep_namespace: str, ep_controllers: Starter
) -> None:
    """TestEndpointWithMultiplePodUpdates: ten Services over one pod, ten workers; the
    pod's readiness is flipped several times at once, and every Endpoints object must end
    with the pod's last state (the controller never acts on a stale pod).

    Upstream's flips (not ready, ready) end where they started, so the end state could be
    read before the controller saw any flip. Here the burst ends elsewhere: not ready,
    ready, not ready at once must end with the pod as every object's one not-ready
    address; only then is it made ready again, which must end with it as the one ready
    address. Each wait can succeed only once the controller acted on the pod's newest
    state."""
    ns = ep_namespace
    ep_controllers.start(workers=10)
    pod = create_pod(ep_kube, ns, pod_body("test-pod"), running_status(["1.1.1.1"], True))
    names = [f"foo{i}" for i in range(10)]
    for name in names:
        ep_kube.request("POST", services_path(ns), service_body(name))
    for name in names:
        await eventually(functools.partial(ips_of, ep_kube, ns, name), f"{name}'s address")
    expected = [
        {
            "ip": "1.1.1.1",
            "nodeName": "fakenode",
            "targetRef": {
                "kind": "Pod",
                "namespace": ns,
                "name": "test-pod",
                "uid": pod["metadata"]["uid"],
            },
        }
    ]

    async def settled(field: str, other: str, what: str) -> None:
        """Every Endpoints object lists the pod as its one ``field`` address, none
        ``other``."""
        for name in names:

            def shows(n: str = name) -> bool:
                ep = get_endpoints(ep_kube, ns, n)
                subsets = (ep or {}).get("subsets") or []
                return (
                    len(subsets) == 1
                    and subsets[0].get(field) == expected
                    and not addresses(ep, other)
                )

            await eventually(shows, f"{name} to list the pod as its one {what} address")

    for ready in (False, True, False):
        set_ready(ep_kube, ns, "test-pod", ready)
    await settled("notReadyAddresses", "addresses", "not-ready")
    set_ready(ep_kube, ns, "test-pod", True)
    await settled("addresses", "notReadyAddresses", "ready")


async def test_an_external_name_service_gets_endpoints_once_it_is_cluster_ip(
    ep_kube: KubeClient, ep_namespace: str, ep_controllers: Starter
) -> None:
    """TestExternalNameToClusterIPTransition: none for ExternalName; after the switch to
    ClusterIP an Endpoints object with the managed-by label and without the headless one."""
    ns = ep_namespace
    ep_controllers.start()
    create_pod(ep_kube, ns, pod_body("test-pod"), running_status(["1.1.1.1", "2001:db8::"], None))
    ep_kube.request(
        "POST",
        services_path(ns),
        service_body("foo1", type="ExternalName", externalName="foo.bar.example.com"),
    )
    await stays(
        lambda: get_endpoints(ep_kube, ns, "foo1") is None,
        "no Endpoints for an ExternalName Service",
        3.0,
    )

    def to_cluster_ip(svc: dict[str, Any]) -> None:
        svc["spec"]["type"] = "ClusterIP"
        svc["spec"].pop("externalName", None)

    update_service(ep_kube, ns, "foo1", to_cluster_ip)
    ep = await eventually(lambda: get_endpoints(ep_kube, ns, "foo1"), "foo1's Endpoints")
    labels = ep["metadata"].get("labels") or {}
    assert HEADLESS not in labels
    assert labels[MANAGED_BY] == "endpoint-controller"
    assert labels["foo"] == "bar"  # the Service's labels are copied


async def test_a_terminating_pod_leaves_the_endpoints_unless_not_ready_ones_are_published(
    ep_kube: KubeClient, ep_namespace: str, ep_controllers: Starter
) -> None:
    """TestEndpointWithTerminatingPod: a pod being deleted (a finalizer holds it) is no
    address of a Service, while a Service with publishNotReadyAddresses keeps it ready."""
    ns = ep_namespace
    ep_controllers.start()
    body = pod_body("test-pod", metadata={"finalizers": [HOLD]})
    create_pod(ep_kube, ns, body, running_status(["10.0.0.1"], True))
    ep_kube.request("POST", services_path(ns), service_body("plain"))
    ep_kube.request(
        "POST", services_path(ns), service_body("published", publishNotReadyAddresses=True)
    )
    for name in ("plain", "published"):

        def listed(n: str = name) -> bool:
            return ips_of(ep_kube, ns, n) == ["10.0.0.1"]

        await eventually(listed, f"{name}'s address")
    ep_kube.request("DELETE", pods_path(ns, "test-pod"))
    await eventually(
        lambda: (
            (e := get_endpoints(ep_kube, ns, "plain")) is not None and not (e.get("subsets") or [])
        ),
        "the terminating pod to leave 'plain'",
    )
    published = get_endpoints(ep_kube, ns, "published")
    assert ips(published) == ["10.0.0.1"]
    assert addresses(published, "notReadyAddresses") == []


async def test_labels_follow_the_service_and_headless_services_say_so(
    ep_kube: KubeClient, ep_namespace: str, ep_controllers: Starter
) -> None:
    """The Service's labels (changed later too), the managed-by label, and the headless
    label for a Service without a cluster IP; a headless Service without ports lists its
    pods without ports."""
    ns = ep_namespace
    ep_controllers.start()
    create_pod(ep_kube, ns, pod_body("test-pod"), running_status(["10.0.0.2"], True))
    ep_kube.request("POST", services_path(ns), service_body("headless", clusterIP="None", ports=[]))
    ep = await eventually(
        lambda: (e := get_endpoints(ep_kube, ns, "headless")) and ips(e) and e, "headless's address"
    )
    assert ep["metadata"]["labels"] == {**LABELS, HEADLESS: "", MANAGED_BY: "endpoint-controller"}
    assert [s.get("ports") for s in ep["subsets"]] == [None]

    def relabel(svc: dict[str, Any]) -> None:
        svc["metadata"]["labels"] = {"team": "blue"}

    update_service(ep_kube, ns, "headless", relabel)
    await eventually(
        lambda: (
            ((get_endpoints(ep_kube, ns, "headless") or {}).get("metadata") or {}).get("labels")
            == {"team": "blue", HEADLESS: "", MANAGED_BY: "endpoint-controller"}
        ),
        "the Endpoints' labels to follow the Service's",
    )


async def test_the_endpoints_go_with_their_service_and_leftovers_are_removed_at_start(
    ep_kube: KubeClient, ep_namespace: str, ep_controllers: Starter
) -> None:
    """Deleting a Service deletes its Endpoints; an Endpoints object whose Service was
    deleted while no controller ran is deleted once one starts, but a leader-election
    record (an Endpoints object with the leader annotation) is left alone."""
    ns = ep_namespace
    leftover = {"metadata": {"name": "leftover"}, "subsets": []}
    leader = {
        "metadata": {
            "name": "leader",
            "annotations": {"control-plane.alpha.kubernetes.io/leader": "{}"},
        },
        "subsets": [],
    }
    ep_kube.request("POST", endpoints_path(ns), leftover)
    ep_kube.request("POST", endpoints_path(ns), leader)
    ep_controllers.start()
    await eventually(
        lambda: get_endpoints(ep_kube, ns, "leftover") is None, "the leftover to be deleted"
    )
    assert get_endpoints(ep_kube, ns, "leader") is not None

    create_pod(ep_kube, ns, pod_body("test-pod"), running_status(["10.0.0.3"], True))
    ep_kube.request("POST", services_path(ns), service_body("gone"))
    await eventually(lambda: ips(get_endpoints(ep_kube, ns, "gone")), "gone's address")
    ep_kube.request("DELETE", services_path(ns, "gone"))
    await eventually(
        lambda: get_endpoints(ep_kube, ns, "gone") is None, "gone's Endpoints to be deleted"
    )
    assert get_endpoints(ep_kube, ns, "leader") is not None


async def test_past_1000_addresses_the_endpoints_are_truncated_and_say_so(
    ep_kube: KubeClient, ep_namespace: str, ep_controllers: Starter
) -> None:
    """TestEndpointTruncate (upstream's unit scenario, here end to end): 1001 pods give
    1000 addresses and the over-capacity annotation; with one pod fewer the annotation
    goes."""
    ns = ep_namespace
    ep_kube.request("POST", services_path(ns), service_body("big"))

    def make(i: int) -> None:
        ip = f"10.1.{i // 250}.{i % 250 + 1}"
        create_pod(ep_kube, ns, pod_body(f"pod-{i}"), running_status([ip], i % 2 == 0))

    for start in range(0, 1001, 50):
        await asyncio.gather(
            *(asyncio.to_thread(make, i) for i in range(start, min(start + 50, 1001)))
        )
    ep_controllers.start()

    def truncated() -> dict[str, Any] | None:
        ep = get_endpoints(ep_kube, ns, "big")
        annotations = ((ep or {}).get("metadata") or {}).get("annotations") or {}
        if annotations.get("endpoints.kubernetes.io/over-capacity") != "truncated":
            return None
        return ep

    ep = await eventually(truncated, "the truncated Endpoints", within=120)
    ready, not_ready = len(ips(ep)), len(ips(ep, "notReadyAddresses"))
    assert ready + not_ready == 1000
    # Ready addresses are kept first: all 501, and 499 of the 500 not ready.
    assert (ready, not_ready) == (501, 499)

    ep_kube.request("DELETE", pods_path(ns, "pod-0"))

    def whole() -> bool:
        ep = get_endpoints(ep_kube, ns, "big")
        annotations = ((ep or {}).get("metadata") or {}).get("annotations") or {}
        return (
            "endpoints.kubernetes.io/over-capacity" not in annotations
            and len(ips(ep)) + len(ips(ep, "notReadyAddresses")) == 1000
        )

    await eventually(whole, "1000 addresses without the annotation", within=120)


async def test_a_create_in_a_terminating_namespace_is_refused_with_its_cause(
    ep_kube: KubeClient, ep_namespace: str
) -> None:
    """What the controller drops quietly: the API server's refusal of a create in a
    namespace being deleted names the cause NamespaceTerminating (the client reads it
    from the Status, not from the message)."""
    ns = ep_namespace
    create_pod(
        ep_kube, ns, pod_body("held", metadata={"finalizers": [HOLD]}), running_status([], None)
    )
    ep_kube.request("DELETE", f"/api/v1/namespaces/{ns}")
    await eventually(
        lambda: (
            (ep_kube.request("GET", f"/api/v1/namespaces/{ns}").get("status") or {}).get("phase")
            == "Terminating"
        ),
        "the namespace to be terminating",
    )
    with pytest.raises(ApiStatusError) as refused:
        ep_kube.request("POST", endpoints_path(ns), {"metadata": {"name": "x"}})
    assert refused.value.status == 403
    assert refused.value.has_cause("NamespaceTerminating")
    ep_kube.request(
        "PATCH",
        pods_path(ns, "held"),
        {"metadata": {"finalizers": None}},
        content_type="application/merge-patch+json",
    )
