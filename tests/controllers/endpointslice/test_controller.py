"""Steward's EndpointSlice controller against the real control plane, beside upstream's:
the scenarios of upstream's integration tests (label semantics, headless label,
terminating endpoints, readiness updates, several pod updates, an ExternalName Service
turned ClusterIP), packing past 100 endpoints, hints, slices of others, and the guard
against acting on a mirror older than the controller's own writes.

Every scenario ends comparing Steward's slices of the Service with upstream's, field by
field (:func:`view`: addresses, conditions, node, zone, hostname, hints, target, ports as
a set, labels but managed-by, owner; names, versions and annotations aside)."""

from __future__ import annotations

import asyncio
import contextlib
import json
import time
import urllib.parse
from collections.abc import Callable
from typing import Any

import pytest

import steward
from steward import ENDPOINT_SLICES, PODS, SERVICES
from steward.controllers.endpointslice import hints
from steward.controllers.endpointslice.controller import EndpointSliceReconciler
from steward.controllers.endpointslice.sync import (
    HEADLESS_LABEL,
    MANAGED_BY_LABEL,
    SERVICE_NAME_LABEL,
    STEWARD_MANAGED_BY,
    UPSTREAM_MANAGED_BY,
)
from steward.kube import KubeClient, NotFoundError
from steward.runtime.reconcile import Request, Result
from tests.controllers.endpoints.conftest import (
    create_pod,
    eventually,
    pod_body,
    pods_path,
    running_status,
    service_body,
    services_path,
    set_ready,
    stays,
    update_service,
)
from tests.controllers.endpointslice.conftest import NODE, ZONE, Starter

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

View = dict[str, Any]


def slices_path(ns: str, name: str = "") -> str:
    base = f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices"
    return f"{base}/{name}" if name else base


def slices(
    kube: KubeClient, ns: str, svc: str, managed_by: str = STEWARD_MANAGED_BY
) -> list[dict[str, Any]]:
    """The Service's slices written by ``managed_by``."""
    selector = urllib.parse.quote(f"{SERVICE_NAME_LABEL}={svc},{MANAGED_BY_LABEL}={managed_by}")
    items = kube.request("GET", f"{slices_path(ns)}?labelSelector={selector}").get("items") or []
    return [s for s in items if not s["metadata"].get("deletionTimestamp")]


def view(items: list[dict[str, Any]]) -> View:
    """What must be equal between two controllers' slices of one Service."""
    endpoints = []
    for s in items:
        for e in s.get("endpoints") or ():
            ref = dict(e.get("targetRef") or {})
            ref.pop("resourceVersion", None)
            endpoints.append(
                json.dumps(
                    {
                        "addressType": s.get("addressType"),
                        "addresses": sorted(e.get("addresses") or ()),
                        "conditions": e.get("conditions"),
                        "nodeName": e.get("nodeName"),
                        "zone": e.get("zone"),
                        "hostname": e.get("hostname"),
                        "hints": e.get("hints"),
                        "targetRef": ref,
                    },
                    sort_keys=True,
                )
            )
    labels = set()
    owners = set()
    ports = set()
    for s in items:
        meta = s["metadata"]
        kept = {k: v for k, v in (meta.get("labels") or {}).items() if k != MANAGED_BY_LABEL}
        labels.add(json.dumps(kept, sort_keys=True))
        owners.add(json.dumps(meta.get("ownerReferences"), sort_keys=True))
        ports.add(json.dumps(sorted(json.dumps(p, sort_keys=True) for p in s.get("ports") or ())))
    return {
        "endpoints": sorted(endpoints),
        "addressTypes": sorted({str(s.get("addressType")) for s in items}),
        "labels": sorted(labels),
        "owners": sorted(owners),
        "ports": sorted(ports),
    }


def endpoints_of(v: View) -> dict[str, dict[str, Any]]:
    """The endpoints of a view by pod name."""
    found = {}
    for text in v["endpoints"]:
        e = json.loads(text)
        found[e["targetRef"]["name"]] = e
    return found


def labels_of(v: View) -> dict[str, str]:
    (only,) = v["labels"]
    labels: dict[str, str] = json.loads(only)
    return labels


async def converge(
    kube: KubeClient,
    ns: str,
    svc: str,
    check: Callable[[View], bool] = lambda v: True,
    within: float = 60.0,
    count_slices: bool = True,
) -> View:
    """Wait until Steward's slices of the Service look exactly like upstream's (and, with
    ``count_slices``, are as many) and ``check`` holds of them; their view."""
    deadline = time.monotonic() + within
    ours: View = {}
    theirs: View = {}
    while time.monotonic() < deadline:
        mine = await asyncio.to_thread(slices, kube, ns, svc, STEWARD_MANAGED_BY)
        upstream = await asyncio.to_thread(slices, kube, ns, svc, UPSTREAM_MANAGED_BY)
        ours, theirs = view(mine), view(upstream)
        same_count = len(mine) == len(upstream) or not count_slices
        if mine and ours == theirs and same_count and check(ours):
            return ours
        await asyncio.sleep(0.25)
    pytest.fail(
        f"Steward's slices of {ns}/{svc} never matched:\nSteward:  {ours}\nupstream: {theirs}"
    )


def ready_pod(
    kube: KubeClient, ns: str, name: str, ip: str, ready: bool = True, **spec: Any
) -> None:
    create_pod(kube, ns, pod_body(name, node=NODE, **spec), running_status([ip], ready))


# Upstream's integration scenarios ------------------------------------------------------------
async def test_label_semantics(kube: KubeClient, namespace: str, es_controllers: Starter) -> None:
    """TestEndpointsControllersLabelSemantics: a headless Service's labels and the
    headless label reach its slices, and label changes follow."""
    es_controllers.start()
    body = service_body(
        "test-123",
        clusterIP="None",
        selector={"app": "test"},
        ports=[{"port": 80, "targetPort": 8080, "protocol": "TCP"}],
        metadata={"labels": {"app": "test"}},
    )
    kube.request("POST", services_path(namespace), body)
    v = await converge(kube, namespace, "test-123", lambda v: "app" in labels_of(v))
    assert labels_of(v) == {"app": "test", HEADLESS_LABEL: "", SERVICE_NAME_LABEL: "test-123"}

    def relabel(svc: dict[str, Any]) -> None:
        svc["metadata"]["labels"] = {"new-label": "new-label-value"}

    update_service(kube, namespace, "test-123", relabel)
    v = await converge(kube, namespace, "test-123", lambda v: "new-label" in labels_of(v))
    assert labels_of(v) == {
        "new-label": "new-label-value",
        HEADLESS_LABEL: "",
        SERVICE_NAME_LABEL: "test-123",
    }


@pytest.mark.parametrize(
    ("labels", "headless"),
    [({}, False), ({}, True), ({HEADLESS_LABEL: ""}, False), ({HEADLESS_LABEL: ""}, True)],
    ids=["plain", "headless", "plain-with-label", "headless-with-label"],
)
async def test_headless_label(
    kube: KubeClient,
    namespace: str,
    es_controllers: Starter,
    labels: dict[str, str],
    headless: bool,
) -> None:
    """TestEndpointsHeadlessLabel: the headless label says whether the Service has a
    cluster IP, whatever the Service's own labels say."""
    es_controllers.start()
    spec: dict[str, Any] = {"selector": {"app": "test"}, "metadata": {"labels": labels}}
    spec["ports"] = [{"port": 80, "targetPort": 8080, "protocol": "TCP"}]
    if headless:
        spec["clusterIP"] = "None"
    kube.request("POST", services_path(namespace), service_body("svc", **spec))
    v = await converge(kube, namespace, "svc")
    assert (HEADLESS_LABEL in labels_of(v)) is headless


async def test_terminating_endpoints(
    kube: KubeClient, namespace: str, es_controllers: Starter
) -> None:
    """A pod being deleted stays as a terminating endpoint (serving, not ready) until it
    is gone."""
    es_controllers.start()
    kube.request("POST", services_path(namespace), service_body("svc"))
    ready_pod(kube, namespace, "p", "10.244.1.1", metadata={"finalizers": ["steward.io/test"]})
    await converge(
        kube,
        namespace,
        "svc",
        lambda v: endpoints_of(v).get("p", {}).get("conditions", {}).get("ready") is True,
    )
    kube.request("DELETE", f"{pods_path(namespace, 'p')}?gracePeriodSeconds=0")
    v = await converge(
        kube,
        namespace,
        "svc",
        lambda v: endpoints_of(v).get("p", {}).get("conditions", {}).get("terminating") is True,
    )
    assert endpoints_of(v)["p"]["conditions"] == {
        "ready": False,
        "serving": True,
        "terminating": True,
    }
    assert endpoints_of(v)["p"]["zone"] == ZONE and endpoints_of(v)["p"]["nodeName"] == NODE
    kube.request(
        "PATCH",
        pods_path(namespace, "p"),
        {"metadata": {"finalizers": None}},
        content_type="application/merge-patch+json",
    )
    v = await converge(kube, namespace, "svc", lambda v: not v["endpoints"])
    assert v["ports"] == ["[]"]  # the placeholder


async def test_pod_readiness_updates(
    kube: KubeClient, namespace: str, es_controllers: Starter
) -> None:
    """A pod turning ready moves its endpoint to ready and serving; back again."""
    es_controllers.start()
    kube.request("POST", services_path(namespace), service_body("svc"))
    ready_pod(kube, namespace, "p", "10.244.2.1", ready=False)
    v = await converge(kube, namespace, "svc", lambda v: "p" in endpoints_of(v))
    assert endpoints_of(v)["p"]["conditions"] == {
        "ready": False,
        "serving": False,
        "terminating": False,
    }
    set_ready(kube, namespace, "p", True)
    v = await converge(
        kube, namespace, "svc", lambda v: endpoints_of(v)["p"]["conditions"]["ready"] is True
    )
    assert endpoints_of(v)["p"]["conditions"]["serving"] is True
    set_ready(kube, namespace, "p", False)
    await converge(
        kube, namespace, "svc", lambda v: endpoints_of(v)["p"]["conditions"]["ready"] is False
    )


async def test_multiple_pod_updates(
    kube: KubeClient, namespace: str, es_controllers: Starter
) -> None:
    """Several pods changing readiness in quick succession end where the pods are; the
    controller's own writes do not queue their Service again."""
    running = es_controllers.start()
    kube.request("POST", services_path(namespace), service_body("svc"))
    for i in range(3):
        ready_pod(kube, namespace, f"p{i}", f"10.244.3.{i + 1}")
    await converge(kube, namespace, "svc", lambda v: len(v["endpoints"]) == 3)
    for flips in range(3):
        for i in range(3):
            set_ready(kube, namespace, f"p{i}", (i + flips) % 2 == 0)
    want = {"p0": True, "p1": False, "p2": True}
    v = await converge(
        kube,
        namespace,
        "svc",
        lambda v: {n: e["conditions"]["ready"] for n, e in endpoints_of(v).items()} == want,
    )
    assert {e["addresses"][0] for e in endpoints_of(v).values()} == {
        "10.244.3.1",
        "10.244.3.2",
        "10.244.3.3",
    }
    # Count this Service's syncs from now on (other namespaces' come and go meanwhile).
    reconciler: EndpointSliceReconciler = running.controller.reconciler
    syncs: list[Request] = []
    inner = reconciler.reconcile

    async def counted(request: Request) -> Result:
        if request == Request(namespace, "svc"):
            syncs.append(request)
        return await inner(request)

    await asyncio.sleep(1.0)  # the last write's own event is in
    reconciler.reconcile = counted  # type: ignore[method-assign]
    await stays(lambda: not syncs, "no further syncs once the slices are right", 2.0)


async def test_external_name_to_cluster_ip(
    kube: KubeClient, namespace: str, es_controllers: Starter
) -> None:
    """An ExternalName Service gets no slices; turned ClusterIP, it gets its pods'."""
    es_controllers.start()
    body = service_body("svc", type="ExternalName", externalName="example.com")
    kube.request("POST", services_path(namespace), body)
    ready_pod(kube, namespace, "p", "10.244.4.1")

    def none_written() -> bool:
        return not slices(kube, namespace, "svc") and not slices(
            kube, namespace, "svc", UPSTREAM_MANAGED_BY
        )

    await stays(none_written, "no slices for an ExternalName Service", 3.0)

    def to_cluster_ip(svc: dict[str, Any]) -> None:
        svc["spec"]["type"] = "ClusterIP"
        svc["spec"].pop("externalName", None)

    update_service(kube, namespace, "svc", to_cluster_ip)
    v = await converge(kube, namespace, "svc", lambda v: "p" in endpoints_of(v))
    assert endpoints_of(v)["p"]["addresses"] == ["10.244.4.1"]


# Packing, ports, hints -------------------------------------------------------------------------
async def test_packing_past_100_endpoints(
    kube: KubeClient, namespace: str, es_controllers: Starter
) -> None:
    """120 pods make slices of at most 100 endpoints, holding every pod once; a Service
    losing them keeps one placeholder."""
    kube.request("POST", services_path(namespace), service_body("svc"))

    def one(i: int) -> None:
        ready_pod(kube, namespace, f"p{i}", f"10.244.{10 + i // 200}.{i % 200 + 1}")

    await asyncio.gather(*(asyncio.to_thread(one, i) for i in range(120)))
    es_controllers.start()  # starts on all 120 at once: two slices, as upstream's first sync
    v = await converge(
        kube, namespace, "svc", lambda v: len(v["endpoints"]) == 120, count_slices=False
    )
    mine = slices(kube, namespace, "svc")
    assert all(len(s["endpoints"]) <= 100 for s in mine)
    assert sorted(len(s["endpoints"]) for s in mine) == [20, 100]
    assert len(endpoints_of(v)) == 120
    kube.request("DELETE", f"{pods_path(namespace)}?gracePeriodSeconds=0")
    v = await converge(kube, namespace, "svc", lambda v: not v["endpoints"])
    assert len(slices(kube, namespace, "svc")) == 1


async def test_named_ports_and_hostnames(
    kube: KubeClient, namespace: str, es_controllers: Starter
) -> None:
    """Named target ports resolve per pod (pods serving different ports get slices of
    their own); a pod's hostname shows for the Service its subdomain names."""
    es_controllers.start()
    ports = [{"name": "web", "port": 80, "protocol": "TCP", "targetPort": "web"}]
    kube.request("POST", services_path(namespace), service_body("svc", ports=ports))
    for i, number in enumerate((8080, 9090)):
        container = {
            "name": "c",
            "image": "fakeimage",
            "ports": [{"name": "web", "containerPort": number}],
        }
        ready_pod(
            kube,
            namespace,
            f"p{i}",
            f"10.244.5.{i + 1}",
            containers=[container],
            hostname=f"h{i}",
            subdomain="svc",
        )
    v = await converge(kube, namespace, "svc", lambda v: len(v["endpoints"]) == 2)
    assert len(v["ports"]) == 2
    assert {e["hostname"] for e in endpoints_of(v).values()} == {"h0", "h1"}


async def test_prefer_close_hints(
    kube: KubeClient, namespace: str, es_controllers: Starter
) -> None:
    """trafficDistribution PreferClose hints ready endpoints to their zone."""
    es_controllers.start()
    kube.request(
        "POST", services_path(namespace), service_body("svc", trafficDistribution="PreferClose")
    )
    ready_pod(kube, namespace, "p0", "10.244.6.1")
    ready_pod(kube, namespace, "p1", "10.244.6.2", ready=False)
    v = await converge(kube, namespace, "svc", lambda v: len(v["endpoints"]) == 2)
    assert endpoints_of(v)["p0"]["hints"] == {"forZones": [{"name": ZONE}]}
    assert endpoints_of(v)["p1"]["hints"] is None

    def no_distribution(svc: dict[str, Any]) -> None:
        svc["spec"].pop("trafficDistribution", None)

    update_service(kube, namespace, "svc", no_distribution)
    await converge(kube, namespace, "svc", lambda v: endpoints_of(v)["p0"]["hints"] is None)


async def test_topology_mode_auto_without_zones_on_every_node(
    kube: KubeClient, namespace: str, es_controllers: Starter
) -> None:
    """topology-mode Auto on a cluster whose nodes lack zones: no hints, and a Warning
    TopologyAwareHintsDisabled on the Service from Steward's controller."""
    es_controllers.start()
    body = service_body("svc", metadata={"annotations": {hints.TOPOLOGY_MODE_ANNOTATION: "Auto"}})
    kube.request("POST", services_path(namespace), body)
    ready_pod(kube, namespace, "p0", "10.244.7.1")
    v = await converge(kube, namespace, "svc", lambda v: len(v["endpoints"]) == 1)
    assert endpoints_of(v)["p0"]["hints"] is None

    def warned() -> list[dict[str, Any]]:
        events = kube.request("GET", f"/api/v1/namespaces/{namespace}/events").get("items") or ()
        return [
            e
            for e in events
            if e.get("reason") == "TopologyAwareHintsDisabled"
            and e.get("reportingComponent") == "steward.io/endpoint-slice-controller"
        ]

    (event, *_) = await eventually(warned, "a TopologyAwareHintsDisabled Event from Steward")
    assert event["type"] == "Warning"
    assert event["involvedObject"]["kind"] == "Service" and event["involvedObject"]["name"] == "svc"
    assert event["message"] == f"{hints.INSUFFICIENT_NODE_INFO}, addressType: IPv4"


# Whose slices ------------------------------------------------------------------------------------
async def test_others_slices_untouched_and_ours_restored(
    kube: KubeClient, namespace: str, es_controllers: Starter
) -> None:
    """A slice of the Service managed by someone else is never touched; one of ours that
    someone deletes comes back."""
    es_controllers.start()
    kube.request("POST", services_path(namespace), service_body("svc"))
    ready_pod(kube, namespace, "p0", "10.244.8.1")
    foreign = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "svc-by-hand",
            "labels": {SERVICE_NAME_LABEL: "svc", MANAGED_BY_LABEL: "someone-else"},
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["192.0.2.1"]}],
        "ports": [],
    }
    made = kube.request("POST", slices_path(namespace), foreign)
    await converge(kube, namespace, "svc", lambda v: "p0" in endpoints_of(v))
    (ours,) = slices(kube, namespace, "svc")
    kube.request("DELETE", slices_path(namespace, ours["metadata"]["name"]))

    def restored() -> bool:
        now = slices(kube, namespace, "svc")
        return len(now) == 1 and now[0]["metadata"]["uid"] != ours["metadata"]["uid"]

    await eventually(restored, "Steward's slice written again")
    await converge(kube, namespace, "svc", lambda v: "p0" in endpoints_of(v))
    still = kube.request("GET", slices_path(namespace, "svc-by-hand"))
    assert still["metadata"]["resourceVersion"] == made["metadata"]["resourceVersion"]


async def test_slices_of_a_replaced_controller_go_once_ours_are_written(
    kube: KubeClient, namespace: str, es_controllers: Starter
) -> None:
    """With --replace-managed-by (given when upstream's controller is off), the slices
    that controller left behind for a Service go once Steward's are written; one of that
    value that the Service does not own stays."""
    svc = kube.request("POST", services_path(namespace), service_body("svc"))
    ready_pod(kube, namespace, "p0", "10.244.9.1")

    def left_behind(name: str, owned: bool) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "name": name,
            "labels": {SERVICE_NAME_LABEL: "svc", MANAGED_BY_LABEL: "replaced.steward.io"},
        }
        if owned:
            meta["ownerReferences"] = [
                {
                    "apiVersion": "v1",
                    "kind": "Service",
                    "name": "svc",
                    "uid": svc["metadata"]["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ]
        body = {
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": meta,
            "addressType": "IPv4",
            "endpoints": [{"addresses": ["10.244.9.1"]}],
            "ports": [],
        }
        return kube.request("POST", slices_path(namespace), body)

    left_behind("svc-left", owned=True)
    stranger = left_behind("svc-stranger", owned=False)
    es_controllers.start("--replace-managed-by=replaced.steward.io")
    await converge(kube, namespace, "svc", lambda v: "p0" in endpoints_of(v))

    def gone() -> bool:
        try:
            kube.request("GET", slices_path(namespace, "svc-left"))
        except NotFoundError:
            return True
        return False

    await eventually(gone, "the replaced controller's slice to be deleted")
    assert len(slices(kube, namespace, "svc")) == 1  # Steward's, written before
    still = kube.request("GET", slices_path(namespace, "svc-stranger"))
    assert still["metadata"]["resourceVersion"] == stranger["metadata"]["resourceVersion"]


# A mirror older than the controller's own writes ------------------------------------------
async def _wait_mirror(check: Callable[[], bool], what: str) -> None:
    deadline = time.monotonic() + 30
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"the mirror never showed {what}")
        await asyncio.sleep(0.05)


async def _pause(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def test_stale_mirror_never_writes_twice(
    kube: KubeClient, namespace: str, es_controllers: Starter
) -> None:
    """With the mirror held still after a sync's writes, the next syncs of the Service
    write nothing: not a second slice (creation expected), not a second deletion
    (deletion expected), not an update over the mirror's older copy (read-your-writes);
    once the mirror shows the writes, a sync finds nothing to do."""
    controller = es_controllers.new("--max-endpoints-per-slice=1")
    mirror = controller.mirror

    def mirrored() -> list[Any]:
        """Steward's slices of the Service in the mirror (upstream's are there too)."""
        held = mirror.by_index(ENDPOINT_SLICES, "service", f"{namespace}/svc")
        return [s for s in held if s.meta.labels.get(MANAGED_BY_LABEL) == STEWARD_MANAGED_BY]

    request = Request(namespace, "svc")
    task = es_controllers.run_mirror(controller)
    kube.request("POST", services_path(namespace), service_body("svc"))
    ready_pod(kube, namespace, "p0", "10.244.9.1")
    ready_pod(kube, namespace, "p1", "10.244.9.2")

    def pods_ready() -> bool:
        pods = [mirror.get(PODS, namespace, f"p{i}") for i in range(2)]
        return mirror.get(SERVICES, namespace, "svc") is not None and all(
            p is not None and (p.object.get("status") or {}).get("podIP") for p in pods
        )

    await _wait_mirror(pods_ready, "the Service and its pods")

    # Creations: the first sync creates two slices; while the mirror does not show them,
    # a sync waits (expectations) rather than creating them again.
    await _pause(task)
    assert await controller.reconcile_once(request) == Result()
    assert len(slices(kube, namespace, "svc")) == 2
    assert await controller.reconcile_once(request) == Result(requeue=True)
    assert len(slices(kube, namespace, "svc")) == 2
    task = es_controllers.run_mirror(controller)
    await _wait_mirror(lambda: len(mirrored()) == 2, "both slices")
    assert await controller.reconcile_once(request) == Result()
    assert len(slices(kube, namespace, "svc")) == 2

    # Updates: p0 turns not ready; the sync updates its slice; while the mirror still
    # holds the slice's older copy, a sync ends early (StaleRead) and writes nothing.
    set_ready(kube, namespace, "p0", False)

    def p0_not_ready() -> bool:
        p0 = mirror.get(PODS, namespace, "p0")
        return p0 is not None and not steward.pods.is_ready(p0.object)

    await _wait_mirror(p0_not_ready, "p0 not ready")
    await _pause(task)
    assert await controller.reconcile_once(request) == Result()
    before = {
        s["metadata"]["name"]: s["metadata"]["resourceVersion"]
        for s in slices(kube, namespace, "svc")
    }
    stale = [s for s in mirrored() if mirror.is_stale(s)]
    assert len(stale) == 1
    assert await controller.reconcile_once(request) == Result()  # ended by StaleRead
    after = {
        s["metadata"]["name"]: s["metadata"]["resourceVersion"]
        for s in slices(kube, namespace, "svc")
    }
    assert after == before
    task = es_controllers.run_mirror(controller)
    await _wait_mirror(
        lambda: not any(mirror.is_stale(s) for s in mirrored()),
        "the updated slice",
    )

    # Deletions: p1 goes; its slice is deleted; while the mirror still shows it, a sync
    # waits rather than deleting it again.
    kube.request("DELETE", f"{pods_path(namespace, 'p1')}?gracePeriodSeconds=0")
    await _wait_mirror(lambda: mirror.get(PODS, namespace, "p1") is None, "p1 gone")
    await _pause(task)
    assert await controller.reconcile_once(request) == Result()
    assert len(slices(kube, namespace, "svc")) == 1
    assert len(mirrored()) == 2
    assert await controller.reconcile_once(request) == Result(requeue=True)
    task = es_controllers.run_mirror(controller)
    await _wait_mirror(lambda: len(mirrored()) == 1, "one slice")
    assert await controller.reconcile_once(request) == Result()
    (left,) = slices(kube, namespace, "svc")
    assert [e["targetRef"]["name"] for e in left["endpoints"]] == ["p0"]
    with pytest.raises(NotFoundError):
        kube.request("GET", pods_path(namespace, "p1"))
