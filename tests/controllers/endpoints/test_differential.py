"""The same Endpoints scenarios under upstream's endpoints-controller (the session
``cluster``) and under Steward's (``ep_cluster``), compared field by field: subsets
(addresses in order, with hostnames, node names and pod references; ports in order;
the subsets by their ports, since their order is a hash of pod UIDs among the rest),
labels and annotations. Pod UIDs and namespaces differ between the clusters and are
masked. The trigger-time annotation is left out: whether the last write carries one
depends on how the changes fell into syncs (a sync that saw only a deletion clears it),
on both sides; test_scenarios checks its value where it is determined.

Pods are bound to a node that does not exist and the tests write their status, so
their IPs and readiness are the same on both clusters. A side is read once it shows the
scenario's expected ready and not-ready IPs (and whatever else the scenario waits for,
e.g. new labels), or no Endpoints object where the scenario expects none; then both
must be identical.

Most scenarios of test_scenarios run here too, on both sides (a terminating pod is in
``churn``); left out are those whose
subject is not the end state (a Service update that writes nothing, leftovers deleted at
the controller's start: upstream's controller runs before the test), the refusal in a
terminating namespace, and the 1001 pods of the truncation (half a minute a side)."""

from __future__ import annotations

import inspect
from collections.abc import Awaitable, Callable
from typing import Any, NamedTuple

import pytest

from steward.kube import KubeClient
from tests.controllers.endpoints.conftest import (
    Starter,
    addresses,
    create_pod,
    eventually,
    get_endpoints,
    pod_body,
    pods_path,
    running_status,
    service_body,
    services_path,
    set_ready,
    update_service,
)

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

TRIGGER = "endpoints.kubernetes.io/last-change-trigger-time"
HOLD = "steward.io/test-hold"
WITHIN = 120.0
"""Seconds a side may take to show a scenario's outcome (a deadline, not a measurement)."""

Scenario = Callable[[KubeClient, str], Awaitable[None] | None]


def comparable(ep: dict[str, Any]) -> dict[str, Any]:
    meta = ep.get("metadata") or {}
    annotations = dict(meta.get("annotations") or {})
    annotations.pop(TRIGGER, None)
    subsets = []
    for subset in ep.get("subsets") or ():
        masked: dict[str, Any] = {"ports": subset.get("ports")}
        for field in ("addresses", "notReadyAddresses"):
            masked[field] = [
                {
                    **a,
                    "targetRef": {
                        k: v
                        for k, v in (a.get("targetRef") or {}).items()
                        if k not in ("uid", "namespace", "resourceVersion")
                    },
                }
                for a in subset.get(field) or ()
            ]
        subsets.append(masked)
    # Subsets come in the order of a hash over the whole subset, pod UIDs included: the
    # order differs between clusters, so they are compared by their ports.
    subsets.sort(key=lambda s: repr(s["ports"]))
    return {"labels": meta.get("labels"), "annotations": annotations, "subsets": subsets}


IPs = tuple[frozenset[str], frozenset[str]]


def shown(ep: dict[str, Any] | None) -> IPs:
    """The IPs that are ready and those not ready, over all subsets."""
    return (
        frozenset(a["ip"] for a in addresses(ep)),
        frozenset(a["ip"] for a in addresses(ep, "notReadyAddresses")),
    )


def ips(ready: str, not_ready: str = "") -> IPs:
    return frozenset(ready.split()), frozenset(not_ready.split())


def anything(ep: dict[str, Any]) -> bool:
    return True


class Case(NamedTuple):
    scenario: Scenario
    expected: dict[str, IPs | None]
    """Each Service's (ready, not ready) IPs at the end; None: no Endpoints object."""
    check: Callable[[dict[str, Any]], bool] = anything
    """What else each Endpoints object must show before it is read."""


async def outcome(kube: KubeClient, ns: str, case: Case) -> dict[str, Any]:
    """Run the scenario in ``ns``; once every Service's Endpoints show the expected
    (ready, not ready) IPs and pass the case's check (or are gone, where none are
    expected), their comparable form."""
    ran = case.scenario(kube, ns)
    if inspect.isawaitable(ran):
        await ran
    result: dict[str, Any] = {}
    for name, want in case.expected.items():
        seen: dict[str, Any] = {}

        def shows(n: str = name, w: IPs | None = want, seen: dict[str, Any] = seen) -> Any:
            seen["last"] = get_endpoints(kube, ns, n)
            if w is None:
                return seen["last"] is None
            return (
                seen["last"] is not None
                and shown(seen["last"]) == w
                and case.check(seen["last"])
                and seen["last"]
            )

        also = "" if case.check is anything else f", {case.check.__name__}"
        what = f"{ns}/{name} to show {want} (ready, not ready{also})"
        try:
            ep = await eventually(shows, what, WITHIN)
        except pytest.fail.Exception:
            pytest.fail(
                f"{ns}/{name} never showed {want} (ready, not ready{also}): {seen.get('last')}"
            )
        result[name] = None if want is None else comparable(ep)
    return result


def mixed(kube: KubeClient, ns: str) -> None:
    """Three pods, two ready, one publishing a hostname, with named and numeric target
    ports, one pod lacking the named port; a headless Service without ports; one with
    publishNotReadyAddresses."""
    ports = [
        {"name": "http", "containerPort": 8080, "protocol": "TCP"},
        {"name": "dns", "containerPort": 53, "protocol": "UDP"},
    ]
    for i, (ip, ready) in enumerate([("10.2.0.3", True), ("10.2.0.1", False), ("10.2.0.2", True)]):
        spec: dict[str, Any] = {
            "containers": [
                {"name": "c", "image": "fakeimage", "ports": ports if i != 2 else ports[1:]}
            ]
        }
        if i == 0:
            spec.update(hostname="first", subdomain="web")
        create_pod(kube, ns, pod_body(f"pod-{i}", **spec), running_status([ip], ready))
    web_ports = [
        {"name": "web", "port": 80, "protocol": "TCP", "targetPort": "http"},
        {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": 53},
    ]
    kube.request(
        "POST",
        services_path(ns),
        service_body("web", ports=web_ports, metadata={"labels": {"app": "web"}}),
    )
    kube.request("POST", services_path(ns), service_body("bare", clusterIP="None", ports=[]))
    kube.request(
        "POST",
        services_path(ns),
        service_body("all", ports=web_ports, publishNotReadyAddresses=True),
    )


def churn(kube: KubeClient, ns: str) -> None:
    """Pods change after the Services exist: one turns not ready, one terminates (a
    finalizer holds it), one is added."""
    for i, ip in enumerate(["10.3.0.1", "10.3.0.2", "10.3.0.3"]):
        body = pod_body(f"pod-{i}", metadata={"finalizers": [HOLD]} if i == 1 else {})
        create_pod(kube, ns, body, running_status([ip], True))
    kube.request("POST", services_path(ns), service_body("svc"))
    kube.request("POST", services_path(ns), service_body("pub", publishNotReadyAddresses=True))
    set_ready(kube, ns, "pod-0", False)
    kube.request("DELETE", pods_path(ns, "pod-1"))
    create_pod(kube, ns, pod_body("pod-3"), running_status(["10.3.0.4"], True))


def no_ready_condition(kube: KubeClient, ns: str) -> None:
    """TestEndpointUpdates: a dual-stack pod without a Ready condition, a single-stack
    Service (an address of its family only)."""
    create_pod(kube, ns, pod_body("pod"), running_status(["10.4.0.1", "2001:db8::4"], None))
    kube.request("POST", services_path(ns), service_body("svc"))


def flips(kube: KubeClient, ns: str) -> None:
    """TestEndpointWithMultiplePodUpdates: three Services over one pod whose readiness
    goes not ready, ready, not ready at once."""
    create_pod(kube, ns, pod_body("pod"), running_status(["10.5.0.1"], True))
    for i in range(3):
        kube.request("POST", services_path(ns), service_body(f"svc-{i}"))
    for ready in (False, True, False):
        set_ready(kube, ns, "pod", ready)


def _to_cluster_ip(svc: dict[str, Any]) -> None:
    svc["spec"]["type"] = "ClusterIP"
    svc["spec"].pop("externalName", None)


def external_name(kube: KubeClient, ns: str) -> None:
    """TestExternalNameToClusterIPTransition: an ExternalName Service turned ClusterIP."""
    create_pod(kube, ns, pod_body("pod"), running_status(["10.6.0.1"], True))
    body = service_body("svc", type="ExternalName", externalName="foo.bar.example.com")
    kube.request("POST", services_path(ns), body)
    update_service(kube, ns, "svc", _to_cluster_ip)


BLUE = {"team": "blue"}


def _relabel(svc: dict[str, Any]) -> None:
    svc["metadata"]["labels"] = dict(BLUE)


async def relabel(kube: KubeClient, ns: str) -> None:
    """A headless Service without ports, its labels changed once its Endpoints exist."""
    create_pod(kube, ns, pod_body("pod"), running_status(["10.8.0.1"], True))
    kube.request("POST", services_path(ns), service_body("svc", clusterIP="None", ports=[]))
    await eventually(lambda: get_endpoints(kube, ns, "svc"), f"{ns}/svc's Endpoints", WITHIN)
    update_service(kube, ns, "svc", _relabel)


def relabelled(ep: dict[str, Any]) -> bool:
    return (ep["metadata"].get("labels") or {}).get("team") == "blue"


async def deleted(kube: KubeClient, ns: str) -> None:
    """A Service deleted once its Endpoints exist; another over the same pod stays."""
    create_pod(kube, ns, pod_body("pod"), running_status(["10.9.0.1"], True))
    kube.request("POST", services_path(ns), service_body("gone"))
    kube.request("POST", services_path(ns), service_body("kept"))
    await eventually(lambda: get_endpoints(kube, ns, "gone"), f"{ns}/gone's Endpoints", WITHIN)
    kube.request("DELETE", services_path(ns, "gone"))


SCENARIOS: dict[str, Case] = {
    # web: pod-0 and pod-2 ready (pod-2 only for dns), pod-1 not ready.
    "mixed": Case(
        mixed,
        {
            "web": ips("10.2.0.3 10.2.0.2", "10.2.0.1"),
            "bare": ips("10.2.0.3 10.2.0.2", "10.2.0.1"),
            "all": ips("10.2.0.1 10.2.0.2 10.2.0.3"),
        },
    ),
    # svc: pod-2 and pod-3 ready, pod-0 not ready, pod-1 gone; pub: all four ready.
    "churn": Case(
        churn,
        {
            "svc": ips("10.3.0.3 10.3.0.4", "10.3.0.1"),
            "pub": ips("10.3.0.1 10.3.0.2 10.3.0.3 10.3.0.4"),
        },
    ),
    "no-ready-condition": Case(no_ready_condition, {"svc": ips("", "10.4.0.1")}),
    "flips": Case(flips, {f"svc-{i}": ips("", "10.5.0.1") for i in range(3)}),
    "external-name": Case(external_name, {"svc": ips("10.6.0.1")}),
    "relabel": Case(relabel, {"svc": ips("10.8.0.1")}, relabelled),
    "deleted": Case(deleted, {"gone": None, "kept": ips("10.9.0.1")}),
}


@pytest.mark.parametrize("name", sorted(SCENARIOS))
async def test_steward_writes_the_endpoints_upstream_writes(
    name: str,
    ep_kube: KubeClient,
    ep_namespace: str,
    ep_controllers: Starter,
    upstream_kube: KubeClient,
    upstream_namespace: str,
) -> None:
    case = SCENARIOS[name]
    ep_controllers.start()
    theirs = await outcome(upstream_kube, upstream_namespace, case)
    ours = await outcome(ep_kube, ep_namespace, case)
    assert ours == theirs
