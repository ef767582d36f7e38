"""The Endpoints controller's pure decisions (:mod:`steward.controllers.endpoints.sync`),
with upstream's cases (pkg/controller/endpoint/endpoints_controller_test.go,
pkg/api/v1/endpoints/util_test.go) where they exist."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from steward.controllers.endpoints import sync

pytestmark = pytest.mark.unit


def svc(**spec: Any) -> dict[str, Any]:
    meta = {"name": "foo", "namespace": "ns", "labels": {"app": "x"}, **spec.pop("metadata", {})}
    body = {
        "selector": {"foo": "bar"},
        "clusterIP": "10.96.0.10",
        "ipFamilies": ["IPv4"],
        "ports": [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}],
    }
    body.update(spec)
    return {"metadata": meta, "spec": body}


def pod(
    name: str,
    ip: str = "1.2.3.4",
    *,
    ready: bool = True,
    ips: list[str] | None = None,
    deleting: bool = False,
    phase: str = "Running",
    **spec: Any,
) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": "ns",
        "uid": f"uid-{name}",
        "labels": {"foo": "bar"},
    }
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    all_ips = ips if ips is not None else [ip]
    return {
        "metadata": meta,
        "spec": {"nodeName": "node-1", "containers": [{"name": "c"}], **spec},
        "status": {
            "phase": phase,
            "podIP": all_ips[0] if all_ips else "",
            "podIPs": [{"ip": i} for i in all_ips],
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def addr(name: str, ip: str, **extra: Any) -> dict[str, Any]:
    return {
        "ip": ip,
        "nodeName": "node-1",
        "targetRef": {"kind": "Pod", "namespace": "ns", "name": name, "uid": f"uid-{name}"},
        **extra,
    }


def _ip(service: dict[str, Any], p: dict[str, Any]) -> str:
    address = sync.endpoint_address(service, p)
    assert address is not None
    return str(address["ip"])


# Addresses ---------------------------------------------------------------------------
def test_address_is_the_pod_ip_of_the_service_family() -> None:
    dual = pod("p", ips=["1.1.1.1", "2001:db8::"])
    assert sync.endpoint_address(svc(), dual) == addr("p", "1.1.1.1")
    v6 = svc(ipFamilies=["IPv6"], clusterIP="fd00::10")
    assert sync.endpoint_address(v6, dual) == addr("p", "2001:db8::")
    assert sync.endpoint_address(v6, pod("q", "1.1.1.1")) is None


def test_address_family_without_ip_families() -> None:
    dual = pod("p", ips=["1.1.1.1", "2001:db8::1"])
    assert _ip(svc(ipFamilies=[], clusterIP="fd00::1"), dual) == "2001:db8::1"
    headless = svc(ipFamilies=[], clusterIP="None")
    assert _ip(headless, dual) == "1.1.1.1"
    v6_first = pod("p", ips=["2001:db8::1", "1.1.1.1"])
    assert _ip(headless, v6_first) == "2001:db8::1"


def test_address_ip_is_normalised_as_go_parses_it() -> None:
    assert _ip(svc(), pod("p", "010.001.002.003")) == "10.1.2.3"
    v6 = svc(ipFamilies=["IPv6"])
    assert _ip(v6, pod("p", "2001:0db8:0:0::1")) == "2001:db8::1"


def test_hostname_only_with_the_service_as_subdomain() -> None:
    named = pod("p", hostname="h", subdomain="foo")
    [subset] = sync.desired_subsets(svc(), [named])
    assert subset["addresses"][0]["hostname"] == "h"
    for other in (pod("p", hostname="h", subdomain="bar"), pod("p", subdomain="foo")):
        [subset] = sync.desired_subsets(svc(), [other])
        assert "hostname" not in subset["addresses"][0]
    elsewhere = pod("p", hostname="h", subdomain="foo")
    elsewhere["metadata"]["namespace"] = "other"
    [subset] = sync.desired_subsets(svc(), [elsewhere])
    assert "hostname" not in subset["addresses"][0]


# Which pods, ready or not -------------------------------------------------------------
def test_ready_and_not_ready_addresses() -> None:
    subsets = sync.desired_subsets(svc(), [pod("a", "1.0.0.1"), pod("b", "1.0.0.2", ready=False)])
    assert subsets == [
        {
            "addresses": [addr("a", "1.0.0.1")],
            "notReadyAddresses": [addr("b", "1.0.0.2")],
            "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
        }
    ]


@pytest.mark.parametrize(
    ("publish", "deleting", "ready", "phase", "ip", "want"),
    [
        (False, False, True, "Running", "1.0.0.1", "addresses"),
        (False, False, False, "Running", "1.0.0.1", "notReadyAddresses"),
        (False, True, True, "Running", "1.0.0.1", None),  # terminating: left out
        (True, True, True, "Running", "1.0.0.1", "addresses"),  # ...unless published
        (True, True, False, "Running", "1.0.0.1", "addresses"),  # published: all ready
        (True, False, False, "Running", "1.0.0.1", "addresses"),
        (False, False, True, "Succeeded", "1.0.0.1", None),  # finished
        (True, False, False, "Failed", "1.0.0.1", None),
        (True, False, True, "Pending", None, None),  # no IP yet
    ],
)
def test_which_pods_count(
    publish: bool, deleting: bool, ready: bool, phase: str, ip: str | None, want: str | None
) -> None:
    service = svc(publishNotReadyAddresses=publish)
    subsets = sync.desired_subsets(
        service, [pod("p", ips=[ip] if ip else [], ready=ready, deleting=deleting, phase=phase)]
    )
    if want is None:
        assert subsets == []
    else:
        [subset] = subsets
        assert list(k for k in subset if k != "ports") == [want]


# Ports -----------------------------------------------------------------------------------
def _named(port_name: str, number: int, protocol: str = "TCP") -> dict[str, Any]:
    return {
        "name": "c",
        "ports": [{"name": port_name, "containerPort": number, "protocol": protocol}],
    }


def test_named_target_ports_by_name_and_protocol() -> None:
    service = svc(
        ports=[
            {"name": "web", "port": 80, "protocol": "TCP", "targetPort": "http"},
            {"name": "dns", "port": 53, "protocol": "UDP", "targetPort": "dns"},
        ]
    )
    p = pod("p", containers=[_named("http", 8080), _named("dns", 5353, "TCP")])
    # "dns" exists only over TCP: the UDP Service port does not resolve on this pod.
    assert sync.desired_subsets(service, [p]) == [
        {
            "addresses": [addr("p", "1.2.3.4")],
            "ports": [{"name": "web", "port": 8080, "protocol": "TCP"}],
        }
    ]


def test_named_port_of_a_sidecar_but_not_of_a_plain_init_container() -> None:
    service = svc(ports=[{"name": "web", "port": 80, "protocol": "TCP", "targetPort": "http"}])
    sidecar = {**_named("http", 9000), "restartPolicy": "Always"}
    assert sync.desired_subsets(service, [pod("p", initContainers=[sidecar])])[0]["ports"] == [
        {"name": "web", "port": 9000, "protocol": "TCP"}
    ]
    assert sync.desired_subsets(service, [pod("p", initContainers=[_named("http", 9000)])]) == []


def test_app_protocol_is_kept() -> None:
    service = svc(ports=[{"port": 80, "protocol": "TCP", "targetPort": 80, "appProtocol": "h2c"}])
    [subset] = sync.desired_subsets(service, [pod("p")])
    assert subset["ports"] == [{"port": 80, "protocol": "TCP", "appProtocol": "h2c"}]


def test_headless_without_ports() -> None:
    headless = svc(clusterIP="None", ports=[])
    assert sync.desired_subsets(headless, [pod("p")]) == [{"addresses": [addr("p", "1.2.3.4")]}]
    # Not headless and no ports: nothing (upstream's "allow headless service not to have ports").
    assert sync.desired_subsets(svc(ports=[]), [pod("p")]) == []


# Repacking and sorting ---------------------------------------------------------------------
def test_hashes_are_go_spews() -> None:
    """The values upstream's Go code (dump.ForHash + FNV-128a) gives for these objects."""
    http = {"name": "http", "port": 80, "protocol": "TCP"}
    grpc = {"name": "grpc", "port": 9090, "protocol": "TCP", "appProtocol": "h2c"}
    assert f"{sync.port_hash(http):032x}" == "754b003f50f133a539c60d18cfb30a55"
    assert f"{sync.port_hash(grpc):032x}" == "79417cf06d3aebf5cede50dd6e0146ed"
    subset = {
        "addresses": [
            {
                "ip": "10.0.0.1",
                "nodeName": "node-1",
                "targetRef": {"kind": "Pod", "namespace": "ns", "name": "p", "uid": "u1"},
            },
            {"ip": "10.0.0.2", "hostname": "h"},
        ],
        "ports": [http, grpc],
    }
    assert f"{sync.subset_hash(subset):032x}" == "ad4d8e7ade7defcc7aca59a5cd2ce4f5"
    not_ready = {"notReadyAddresses": [{"ip": "10.0.0.3", "nodeName": "node-1"}]}
    assert f"{sync.subset_hash(not_ready):032x}" == "bb445c2a8f5607e8cd7facd9836584fe"


def test_repack_merges_addresses_by_shared_ports() -> None:
    """Upstream's TestPackSubsets cases: one address on two ports is one subset; two
    addresses on different ports are two."""
    a, b = {"ip": "1.1.1.1"}, {"ip": "2.2.2.2"}
    p1 = {"port": 111, "protocol": "TCP"}
    p2 = {"port": 222, "protocol": "TCP"}
    merged = sync.repack([{"addresses": [a], "ports": [p1]}, {"addresses": [a], "ports": [p2]}])
    assert len(merged) == 1 and merged[0]["addresses"] == [a]
    assert sorted(p["port"] for p in merged[0]["ports"]) == [111, 222]
    split = sync.repack([{"addresses": [a], "ports": [p1]}, {"addresses": [b], "ports": [p2]}])
    assert sorted((s["addresses"][0]["ip"], s["ports"][0]["port"]) for s in split) == [
        ("1.1.1.1", 111),
        ("2.2.2.2", 222),
    ]
    same_port = sync.repack([{"addresses": [b], "ports": [p1]}, {"addresses": [a], "ports": [p1]}])
    assert same_port == [{"addresses": [a, b], "ports": [p1]}]


def test_repack_not_ready_wins_and_dedupes_by_ip_and_uid() -> None:
    a = addr("a", "1.1.1.1")
    port = {"port": 80, "protocol": "TCP"}
    packed = sync.repack(
        [{"addresses": [a], "ports": [port]}, {"notReadyAddresses": [a], "ports": [port]}]
    )
    assert packed == [{"notReadyAddresses": [a], "ports": [port]}]
    same_ip_other_pod = addr("b", "1.1.1.1")
    packed = sync.repack([{"addresses": [a, same_ip_other_pod, a], "ports": [port]}])
    assert packed == [{"addresses": [a, same_ip_other_pod], "ports": [port]}]


def test_addresses_sorted_by_ip_bytes_then_uid() -> None:
    x = {"ip": "10.0.0.10", "targetRef": {"uid": "b"}}
    y = {"ip": "10.0.0.9", "targetRef": {"uid": "a"}}
    z = {"ip": "10.0.0.10"}
    w = {"ip": "10.0.0.10", "targetRef": {"uid": "a"}}
    [subset] = sync.repack([{"addresses": [y, x, w, z]}])
    assert subset["addresses"] == [z, w, x, y]  # "10.0.0.10" < "10.0.0.9" bytewise


def test_subsets_sorted_by_hash() -> None:
    subsets = [
        {"addresses": [{"ip": f"10.0.0.{i}"}], "ports": [{"port": 1000 + i, "protocol": "TCP"}]}
        for i in range(6)
    ]
    packed = sync.repack(list(reversed(subsets)))
    assert [sync.subset_hash(s) for s in packed] == sorted(sync.subset_hash(s) for s in subsets)
    assert sync.repack(packed) == packed  # canonical: repacking again changes nothing


# Truncation ------------------------------------------------------------------------------------
def _many(prefix: str, n: int) -> list[dict[str, Any]]:
    return [{"ip": f"{prefix}.{i // 250}.{i % 250}"} for i in range(n)]


@pytest.mark.parametrize(
    ("ready", "not_ready", "want_ready", "want_not_ready"),
    [
        # Upstream's TestTruncateEndpoints cases.
        ([], [], [], []),
        (
            [50, 100, 100, 100, 100],
            [50, 100, 100, 100, 100],
            [50, 100, 100, 100, 100],
            [50, 100, 100, 100, 100],
        ),
        ([100] * 5, [100] * 5, [100] * 5, [100] * 5),
        (
            [90, 110, 50, 10, 20],
            [101, 200, 200, 201, 298],
            [90, 110, 50, 10, 20],
            [73, 144, 144, 145, 214],
        ),
        ([205, 400, 402, 400, 693], [100, 200, 200, 200, 300], [98, 191, 192, 191, 328], [0] * 5),
        # More: the not-ready ones shrink; ready ones over capacity; no room left at all.
        ([300, 400, 200], [50, 100, 100], [300, 400, 200], [20, 40, 40]),
        ([400, 400, 500], [50, 100, 100], [308, 308, 384], [0, 0, 0]),
        ([0, 600, 400], [100, 100, 100], [0, 600, 400], [0, 0, 0]),
    ],
)
def test_truncation_proportions(
    ready: list[int], not_ready: list[int], want_ready: list[int], want_not_ready: list[int]
) -> None:
    subsets: list[dict[str, Any]] = []
    for i, (r, n) in enumerate(zip(ready, not_ready, strict=True)):
        subset: dict[str, Any] = {"ports": [{"port": i + 1}]}
        if r:
            subset["addresses"] = _many(f"1{i}", r)
        if n:
            subset["notReadyAddresses"] = _many(f"2{i}", n)
        subsets.append(subset)
    over = sum(ready) + sum(not_ready) > sync.MAX_CAPACITY
    assert sync.truncate(subsets) is over
    assert [len(s.get("addresses") or ()) for s in subsets] == want_ready
    assert [len(s.get("notReadyAddresses") or ()) for s in subsets] == want_not_ready
    # What is kept is each list's head (the sorted order upstream truncates in).
    if subsets and subsets[0].get("addresses"):
        assert subsets[0]["addresses"][0] == {"ip": "10.0.0"}


def test_capacity_annotation_check() -> None:
    small = [{"addresses": _many("1", 10)}]
    assert sync.capacity_annotation_correct({}, small)
    assert not sync.capacity_annotation_correct({sync.OVER_CAPACITY_ANNOTATION: "truncated"}, small)
    assert not sync.capacity_annotation_correct({}, [{"addresses": _many("1", 1001)}])


# Labels, annotations and the write ---------------------------------------------------------------
def test_labels_of_the_service_plus_headless_and_managed_by() -> None:
    assert sync.desired_labels(svc()) == {"app": "x", sync.MANAGED_BY_LABEL: "endpoint-controller"}
    assert sync.desired_labels(svc(clusterIP="None")) == {
        "app": "x",
        sync.HEADLESS_LABEL: "",
        sync.MANAGED_BY_LABEL: "endpoint-controller",
    }


def test_labels_compared_as_upstream() -> None:
    mine = {"app": "x", sync.MANAGED_BY_LABEL: "endpoint-controller"}
    assert sync.labels_correct(mine, {"app": "x"})
    assert sync.labels_correct({**mine, sync.HEADLESS_LABEL: ""}, {"app": "x"})
    assert not sync.labels_correct({"app": "x"}, {"app": "x"})  # not (yet) ours
    assert not sync.labels_correct({**mine, sync.MANAGED_BY_LABEL: "someone"}, {"app": "x"})
    assert not sync.labels_correct({**mine, "extra": "1"}, {"app": "x"})
    assert not sync.labels_correct(mine, {"app": "x", "new": "1"})


def test_new_endpoints_object() -> None:
    created = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    body = sync.endpoints_for(svc(), [pod("a")], None, created)
    assert body == {
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {
            "name": "foo",
            "namespace": "ns",
            "annotations": {sync.TRIGGER_TIME_ANNOTATION: "2026-01-02T03:04:05Z"},
            "labels": {"app": "x", sync.MANAGED_BY_LABEL: "endpoint-controller"},
        },
        "subsets": [
            {
                "addresses": [addr("a", "1.2.3.4")],
                "ports": [{"name": "http", "port": 8080, "protocol": "TCP"}],
            }
        ],
    }


def test_no_write_when_nothing_changed_ignoring_resource_versions() -> None:
    service = svc()
    current = sync.endpoints_for(service, [pod("a")], None, None)
    assert current is not None
    current["metadata"]["resourceVersion"] = "7"
    current["subsets"][0]["addresses"][0]["targetRef"]["resourceVersion"] = "42"
    assert sync.endpoints_for(service, [pod("a")], current, None) is None
    # A differently ordered (older writer's) layout still compares equal once repacked.
    two = sync.endpoints_for(service, [pod("a", "1.0.0.1"), pod("b", "1.0.0.2")], None, None)
    assert two is not None
    two["subsets"][0]["addresses"].reverse()
    assert (
        sync.endpoints_for(service, [pod("a", "1.0.0.1"), pod("b", "1.0.0.2")], two, None) is None
    )


def test_update_keeps_metadata_and_sets_or_clears_annotations() -> None:
    service = svc()
    current = {
        "apiVersion": "v1",
        "kind": "Endpoints",
        "metadata": {
            "name": "foo",
            "namespace": "ns",
            "resourceVersion": "5",
            "annotations": {
                "keep": "me",
                sync.TRIGGER_TIME_ANNOTATION: "2020-01-01T00:00:00Z",
                sync.OVER_CAPACITY_ANNOTATION: "truncated",
            },
            "labels": {"app": "x", sync.MANAGED_BY_LABEL: "endpoint-controller"},
        },
        "subsets": [],
    }
    body = sync.endpoints_for(service, [], current, None)
    assert body is not None
    assert body["metadata"]["resourceVersion"] == "5"
    assert body["metadata"]["annotations"] == {"keep": "me"}  # no trigger time: cleared
    assert "subsets" not in body
    at = datetime(2026, 5, 6, 7, 8, 9, 250000, tzinfo=UTC)
    body = sync.endpoints_for(service, [pod("a")], current, at)
    assert body is not None
    assert (
        body["metadata"]["annotations"][sync.TRIGGER_TIME_ANNOTATION] == "2026-05-06T07:08:09.25Z"
    )


def test_takes_over_an_endpoints_object_it_did_not_write() -> None:
    service = svc()
    foreign = sync.endpoints_for(service, [pod("a")], None, None)
    assert foreign is not None
    del foreign["metadata"]["labels"][sync.MANAGED_BY_LABEL]
    body = sync.endpoints_for(service, [pod("a")], foreign, None)
    assert body is not None
    assert body["metadata"]["labels"][sync.MANAGED_BY_LABEL] == "endpoint-controller"


def test_over_capacity_written_truncated_and_annotated() -> None:
    pods = [pod(f"p{i}", f"10.{i // 250}.{i % 250}.1") for i in range(1001)]
    body = sync.endpoints_for(svc(), pods, None, None)
    assert body is not None
    assert len([a for s in body["subsets"] for a in s.get("addresses") or ()]) == 1000
    assert body["metadata"]["annotations"] == {sync.OVER_CAPACITY_ANNOTATION: "truncated"}
    # Truncated, it is written on every sync (as upstream: its subsets never equal the
    # desired ones); once back under capacity the annotation goes.
    assert sync.endpoints_for(svc(), pods, body, None) is not None
    back = sync.endpoints_for(svc(), pods[:500], body, None)
    assert back is not None and "annotations" not in back["metadata"]
