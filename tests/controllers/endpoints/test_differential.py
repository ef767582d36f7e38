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
scenario's expected ready and not-ready IPs, then both must be identical."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

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
)

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

TRIGGER = "endpoints.kubernetes.io/last-change-trigger-time"
HOLD = "steward.io/test-hold"
WITHIN = 120.0
"""Seconds a side may take to show a scenario's outcome (a deadline, not a measurement)."""

Scenario = Callable[[KubeClient, str], None]


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


async def outcome(
    kube: KubeClient, ns: str, scenario: Scenario, expected: dict[str, IPs]
) -> dict[str, Any]:
    """Run the scenario in ``ns``; once every Service's Endpoints show the expected
    (ready, not ready) IPs, their comparable form."""
    scenario(kube, ns)
    result: dict[str, Any] = {}
    for name, want in expected.items():
        seen: dict[str, Any] = {}

        def shows(n: str = name, w: IPs = want, seen: dict[str, Any] = seen) -> Any:
            seen["last"] = get_endpoints(kube, ns, n)
            return seen["last"] is not None and shown(seen["last"]) == w and seen["last"]

        try:
            ep = await eventually(shows, f"{ns}/{name} to show {want} (ready, not ready)", WITHIN)
        except pytest.fail.Exception:
            pytest.fail(f"{ns}/{name} never showed {want} (ready, not ready): {seen.get('last')}")
        result[name] = comparable(ep)
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


SCENARIOS: dict[str, tuple[Scenario, dict[str, IPs]]] = {
    # web: pod-0 and pod-2 ready (pod-2 only for dns), pod-1 not ready.
    "mixed": (
        mixed,
        {
            "web": ips("10.2.0.3 10.2.0.2", "10.2.0.1"),
            "bare": ips("10.2.0.3 10.2.0.2", "10.2.0.1"),
            "all": ips("10.2.0.1 10.2.0.2 10.2.0.3"),
        },
    ),
    # svc: pod-2 and pod-3 ready, pod-0 not ready, pod-1 gone; pub: all four ready.
    "churn": (
        churn,
        {
            "svc": ips("10.3.0.3 10.3.0.4", "10.3.0.1"),
            "pub": ips("10.3.0.1 10.3.0.2 10.3.0.3 10.3.0.4"),
        },
    ),
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
    scenario, expected = SCENARIOS[name]
    ep_controllers.start()
    theirs = await outcome(upstream_kube, upstream_namespace, scenario, expected)
    ours = await outcome(ep_kube, ep_namespace, scenario, expected)
    assert ours == theirs
