"""The EndpointSlice controller's decisions (steward.controllers.endpointslice.sync and
.hints), against the cases of upstream's reconciler and utils unit tests: packing,
placeholder, conditions, hints, labels, ports and address types."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from steward import copy_json
from steward.controllers.endpointslice import hints, sync
from steward.controllers.endpointslice.hints import TopologyCache

pytestmark = pytest.mark.unit

UID = "svc-uid"


def service(
    name: str = "svc",
    *,
    cluster_ip: str = "10.96.0.10",
    families: list[str] | None = None,
    labels: dict[str, str] | None = None,
    annotations: dict[str, str] | None = None,
    publish: bool = False,
    distribution: str | None = None,
    ports: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "selector": {"app": "a"},
        "clusterIP": cluster_ip,
        "ipFamilies": families if families is not None else ["IPv4"],
        "ports": ports
        if ports is not None
        else [{"name": "http", "port": 80, "protocol": "TCP", "targetPort": 8080}],
    }
    if publish:
        spec["publishNotReadyAddresses"] = True
    if distribution:
        spec["trafficDistribution"] = distribution
    meta: dict[str, Any] = {"name": name, "namespace": "ns", "uid": UID}
    if labels is not None:
        meta["labels"] = labels
    if annotations is not None:
        meta["annotations"] = annotations
    return {"apiVersion": "v1", "kind": "Service", "metadata": meta, "spec": spec}


def pod(
    i: int,
    *,
    ready: bool = True,
    deleting: bool = False,
    node: str = "n1",
    ips: list[str] | None = None,
    hostname: str = "",
    subdomain: str = "",
) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": f"p{i}", "namespace": "ns", "uid": f"uid-{i}"}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:05Z"
    addresses = ips if ips is not None else [f"10.0.{i // 250}.{i % 250 + 1}"]
    spec: dict[str, Any] = {
        "nodeName": node,
        "containers": [{"name": "c", "ports": [{"name": "web", "containerPort": 8080}]}],
    }
    if hostname:
        spec["hostname"] = hostname
    if subdomain:
        spec["subdomain"] = subdomain
    return {
        "metadata": meta,
        "spec": spec,
        "status": {
            "phase": "Running",
            "podIP": addresses[0],
            "podIPs": [{"ip": ip} for ip in addresses],
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def node(
    name: str, zone: str | None = "zone-a", cpu: str = "4", ready: bool = True
) -> dict[str, Any]:
    labels = {"topology.kubernetes.io/zone": zone} if zone else {}
    return {
        "metadata": {"name": name, "labels": labels},
        "status": {
            "allocatable": {"cpu": cpu},
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


NODES = {"n1": node("n1"), "n2": node("n2", "zone-b")}


def lookup(name: str) -> dict[str, Any] | None:
    return NODES.get(name)


_counter = 0


def written(slices: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """What the API server would hold after creating these slices (named, versioned)."""
    global _counter
    out = []
    for s in slices:
        _counter += 1
        copy = copy_json(s)
        copy["metadata"].setdefault("name", f"{s['metadata'].get('generateName', 'x')}{_counter}")
        copy["metadata"]["resourceVersion"] = str(_counter)
        copy["metadata"]["uid"] = f"slice-{_counter}"
        out.append(copy)
    return out


def addresses(slices: list[dict[str, Any]]) -> list[str]:
    return sorted(a for s in slices for e in s.get("endpoints") or () for a in e["addresses"])


# Endpoints ---------------------------------------------------------------------------------
def test_conditions_follow_readiness_and_deletion() -> None:
    svc = service()
    ready = sync.endpoint_for(pod(1), NODES["n1"], svc, "IPv4")
    assert ready["conditions"] == {"ready": True, "serving": True, "terminating": False}
    assert ready["nodeName"] == "n1" and ready["zone"] == "zone-a"
    assert ready["targetRef"] == {"kind": "Pod", "namespace": "ns", "name": "p1", "uid": "uid-1"}
    assert "hostname" not in ready
    not_ready = sync.endpoint_for(pod(1, ready=False), None, svc, "IPv4")
    assert not_ready["conditions"] == {"ready": False, "serving": False, "terminating": False}
    assert "zone" not in not_ready
    terminating = sync.endpoint_for(pod(1, deleting=True), NODES["n1"], svc, "IPv4")
    assert terminating["conditions"] == {"ready": False, "serving": True, "terminating": True}
    published = sync.endpoint_for(
        pod(1, ready=False, deleting=True), None, service(publish=True), "IPv4"
    )
    assert published["conditions"] == {"ready": True, "serving": False, "terminating": True}


def test_hostname_only_when_the_pod_publishes_it_for_this_service() -> None:
    svc = service()
    assert (
        sync.endpoint_for(pod(1, hostname="h", subdomain="svc"), None, svc, "IPv4")["hostname"]
        == "h"
    )
    assert "hostname" not in sync.endpoint_for(
        pod(1, hostname="h", subdomain="x"), None, svc, "IPv4"
    )


def test_addresses_of_one_family_in_canonical_form() -> None:
    dual = pod(1, ips=["010.0.0.1", "fd00::0001"])
    assert sync.endpoint_addresses(dual, "IPv4") == ["10.0.0.1"]
    assert sync.endpoint_addresses(dual, "IPv6") == ["fd00::1"]


def test_equality_beyond_the_key_ignores_resource_version_and_hints() -> None:
    a = sync.endpoint_for(pod(1), NODES["n1"], service(), "IPv4")
    b = copy_json(a)
    b["targetRef"]["resourceVersion"] = "42"
    b["hints"] = {"forZones": [{"name": "zone-a"}]}
    assert sync.endpoint_key(a) == sync.endpoint_key(b)
    assert sync.endpoints_equal_beyond_key(a, b)
    b["conditions"]["serving"] = None
    assert not sync.endpoints_equal_beyond_key(a, b)
    c = copy_json(a)
    c["zone"] = "zone-b"
    assert not sync.endpoints_equal_beyond_key(a, c)


# Address types and labels --------------------------------------------------------------------
def test_address_types_from_ip_families_else_the_cluster_ip() -> None:
    assert sync.address_types(service(families=["IPv6", "IPv4"])) == ["IPv6", "IPv4"]
    assert sync.address_types(service(families=[], cluster_ip="fd00::10")) == ["IPv6"]
    assert sync.address_types(service(families=[], cluster_ip="10.0.0.10")) == ["IPv4"]
    assert sync.address_types(service(families=[], cluster_ip="None")) == ["IPv4", "IPv6"]


def test_labels_are_the_services_but_reserved_ones() -> None:
    svc = service(labels={"app": "a", sync.MANAGED_BY_LABEL: "x", sync.SERVICE_NAME_LABEL: "y"})
    labels, changed = sync.slice_labels({}, svc, sync.MANAGED_BY)
    assert labels == {
        "app": "a",
        sync.SERVICE_NAME_LABEL: "svc",
        sync.MANAGED_BY_LABEL: sync.MANAGED_BY,
    }
    assert changed
    assert sync.slice_labels(labels, svc, sync.MANAGED_BY) == (labels, False)
    headless, _ = sync.slice_labels({}, service(cluster_ip="None", labels={}), sync.MANAGED_BY)
    assert headless[sync.HEADLESS_LABEL] == ""
    # A headless label on a Service with a cluster IP is not copied.
    plain, _ = sync.slice_labels({}, service(labels={sync.HEADLESS_LABEL: ""}), sync.MANAGED_BY)
    assert sync.HEADLESS_LABEL not in plain


def test_new_slices_carry_owner_prefix_and_ports() -> None:
    svc = service()
    ports = sync.endpoint_ports(svc, pod(1))
    assert ports == [{"name": "http", "port": 8080, "protocol": "TCP"}]
    new = sync.new_slice(svc, ports, "IPv4", sync.MANAGED_BY)
    assert new["metadata"]["generateName"] == "svc-"
    assert new["metadata"]["ownerReferences"] == [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "name": "svc",
            "uid": UID,
            "controller": True,
            "blockOwnerDeletion": True,
        }
    ]
    assert new["addressType"] == "IPv4" and new["endpoints"] == []
    assert sync.name_prefix("a" * 253) == "a" * 253


def test_named_target_ports_resolve_per_pod() -> None:
    svc = service(ports=[{"name": "", "port": 80, "protocol": "TCP", "targetPort": "web"}])
    assert sync.endpoint_ports(svc, pod(1)) == [{"name": "", "port": 8080, "protocol": "TCP"}]
    other = pod(2)
    other["spec"]["containers"][0]["ports"] = []
    assert sync.endpoint_ports(svc, other) == []


# Packing -----------------------------------------------------------------------------------------
def test_a_service_without_pods_gets_one_placeholder_and_keeps_it() -> None:
    svc = service()
    first = sync.plan(svc, [], [], lookup)
    assert len(first.create) == 1 and not first.update and not first.delete
    placeholder = first.create[0]
    assert placeholder["endpoints"] == [] and placeholder["ports"] == []
    again = sync.plan(svc, [], written(first.create), lookup)
    assert again.empty()


def test_placeholder_is_updated_in_place_when_labels_change() -> None:
    existing = written(sync.plan(service(), [], [], lookup).create)
    changed = sync.plan(service(labels={"new": "x"}), [], existing, lookup)
    assert not changed.create and not changed.delete
    assert [s["metadata"]["name"] for s in changed.update] == [existing[0]["metadata"]["name"]]
    assert changed.update[0]["metadata"]["labels"]["new"] == "x"


def test_placeholder_is_replaced_by_the_first_endpoints() -> None:
    svc = service()
    existing = written(sync.plan(svc, [], [], lookup).create)
    result = sync.plan(svc, [pod(1)], existing, lookup)
    assert not result.create and not result.delete
    (update,) = result.update
    assert update["metadata"]["name"] == existing[0]["metadata"]["name"]
    assert addresses([update]) == ["10.0.0.2"]
    assert update["ports"] == [{"name": "http", "port": 8080, "protocol": "TCP"}]


def test_past_the_maximum_endpoints_spill_into_new_slices() -> None:
    svc = service()
    pods = [pod(i) for i in range(250)]
    result = sync.plan(svc, pods, [], lookup)
    assert sorted(len(s["endpoints"]) for s in result.create) == [50, 100, 100]
    assert len(addresses(result.create)) == 250


def test_changed_endpoints_update_in_place_and_fill_the_fullest_first() -> None:
    svc = service()
    existing = written(sync.plan(svc, [pod(i) for i in range(150)], [], lookup).create)
    assert sorted(len(s["endpoints"]) for s in existing) == [50, 100]
    # One pod of the full slice becomes not ready; 30 new pods arrive.
    pods = [pod(i, ready=(i != 0)) for i in range(150)] + [pod(i) for i in range(150, 180)]
    result = sync.plan(svc, pods, existing, lookup)
    assert not result.create and not result.delete
    by_name = {s["metadata"]["name"]: s for s in result.update}
    full = next(s for s in existing if len(s["endpoints"]) == 100)
    # Only the slice that changed anyway is written; the new pods do not fit it, so they
    # go to the unchanged slice that fits them best.
    assert set(by_name) == {s["metadata"]["name"] for s in existing}
    assert len(by_name[full["metadata"]["name"]]["endpoints"]) == 100
    assert sum(len(s["endpoints"]) for s in result.update) == 180


def test_new_endpoints_go_to_the_unchanged_slice_they_fit_best() -> None:
    svc = service()
    a = written(sync.plan(svc, [pod(i) for i in range(90)], [], lookup).create)
    b = written(sync.plan(svc, [pod(i) for i in range(90, 150)], [], lookup).create)
    result = sync.plan(svc, [pod(i) for i in range(155)], a + b, lookup)
    assert not result.create and not result.delete
    (update,) = result.update
    assert update["metadata"]["name"] == a[0]["metadata"]["name"]  # 90 + 5 fits closest
    assert len(update["endpoints"]) == 95


def test_removed_endpoints_empty_slice_is_deleted_or_reused() -> None:
    svc = service()
    existing = written(sync.plan(svc, [pod(i) for i in range(120)], [], lookup).create)
    small = next(s for s in existing if len(s["endpoints"]) == 20)
    gone = {e["targetRef"]["name"] for e in small["endpoints"]}
    keep = [pod(i) for i in range(120) if f"p{i}" not in gone]
    result = sync.plan(svc, keep, existing, lookup)
    assert [s["metadata"]["name"] for s in result.delete] == [small["metadata"]["name"]]
    assert not result.create and not result.update


def test_unchanged_pods_write_nothing_and_port_order_does_not_matter() -> None:
    ports = [
        {"name": "a", "port": 80, "protocol": "TCP", "targetPort": 80},
        {"name": "b", "port": 81, "protocol": "TCP", "targetPort": 81},
    ]
    svc = service(ports=ports)
    existing = written(sync.plan(svc, [pod(1), pod(2)], [], lookup).create)
    existing[0]["ports"].reverse()
    assert sync.plan(svc, [pod(1), pod(2)], existing, lookup).empty()


def test_pods_with_different_ports_get_slices_of_their_own() -> None:
    svc = service(ports=[{"name": "", "port": 80, "protocol": "TCP", "targetPort": "web"}])
    other = pod(2)
    other["spec"]["containers"][0]["ports"] = [{"name": "web", "containerPort": 9090}]
    result = sync.plan(svc, [pod(1), other], [], lookup)
    assert sorted(s["ports"][0]["port"] for s in result.create) == [8080, 9090]


def test_terminal_pods_and_pods_without_ip_are_left_out_terminating_kept() -> None:
    done = pod(2)
    done["status"]["phase"] = "Succeeded"
    no_ip = pod(3)
    no_ip["status"] = {"phase": "Pending"}
    result = sync.plan(service(), [pod(1), done, no_ip, pod(4, deleting=True)], [], lookup)
    (created,) = result.create
    names = sorted(e["targetRef"]["name"] for e in created["endpoints"])
    assert names == ["p1", "p4"]


def test_a_pod_on_a_missing_node_is_left_out_and_fails_the_sync() -> None:
    result = sync.plan(service(), [pod(1), pod(2, node="gone")], [], lookup)
    assert addresses(result.create) == ["10.0.0.2"]
    assert result.errors == ["skipping Pod p2 for Service ns/svc: Node gone Not Found"]
    published = sync.plan(service(publish=True), [pod(2, node="gone")], [], lookup)
    assert addresses(published.create) == ["10.0.0.3"] and not published.errors


def test_slices_of_other_address_types_or_owners_are_deleted() -> None:
    svc = service(families=["IPv4", "IPv6"])
    dual = [pod(1, ips=["10.0.0.1", "fd00::1"])]
    result = sync.plan(svc, dual, [], lookup)
    assert sorted(s["addressType"] for s in result.create) == ["IPv4", "IPv6"]
    existing = written(result.create)
    v4_only = sync.plan(service(families=["IPv4"]), dual, existing, lookup)
    assert [s["addressType"] for s in v4_only.delete] == ["IPv6"]
    assert v4_only.empty() is False and not v4_only.create and not v4_only.update
    # A slice of an old Service of the same name (another UID) is replaced: the new
    # slice is created, not written over it.
    foreign = copy_json(existing[0])
    foreign["metadata"]["ownerReferences"][0]["uid"] = "old"
    replaced = sync.plan(service(), dual, [foreign], lookup)
    assert len(replaced.create) == 1 and replaced.delete == [foreign]


def test_trigger_time_is_stamped_or_removed_on_every_write() -> None:
    at = datetime(2026, 1, 1, 0, 0, 1, 500000, tzinfo=UTC)
    result = sync.plan(service(), [pod(1)], [], lookup, trigger_time=at)
    annotations = result.create[0]["metadata"]["annotations"]
    assert annotations == {sync.TRIGGER_TIME_ANNOTATION: "2026-01-01T00:00:01.5Z"}
    existing = written(result.create)
    cleared = sync.plan(service(), [pod(1, ready=False)], existing, lookup, trigger_time=None)
    assert "annotations" not in cleared.update[0]["metadata"]


def test_no_creations_for_a_service_being_deleted() -> None:
    svc = service()
    svc["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    assert sync.plan(svc, [pod(1)], [], lookup).create == []


def test_max_endpoints_per_slice_is_a_setting() -> None:
    settings = sync.Settings(max_endpoints=2)
    result = sync.plan(service(), [pod(i) for i in range(5)], [], lookup, settings=settings)
    assert sorted(len(s["endpoints"]) for s in result.create) == [1, 2, 2]


# Hints -------------------------------------------------------------------------------------------
def test_prefer_close_hints_ready_endpoints_to_their_zone() -> None:
    svc = service(distribution="PreferClose")
    result = sync.plan(svc, [pod(1), pod(2, node="n2"), pod(3, ready=False)], [], lookup)
    by_pod = {e["targetRef"]["name"]: e for e in result.create[0]["endpoints"]}
    assert by_pod["p1"]["hints"] == {"forZones": [{"name": "zone-a"}]}
    assert by_pod["p2"]["hints"] == {"forZones": [{"name": "zone-b"}]}
    assert "hints" not in by_pod["p3"]
    existing = written(result.create)
    assert sync.plan(
        svc, [pod(1), pod(2, node="n2"), pod(3, ready=False)], existing, lookup
    ).empty()
    # Without a distribution the hints go again (an otherwise unchanged slice is rewritten).
    plain = sync.plan(service(), [pod(1), pod(2, node="n2"), pod(3, ready=False)], existing, lookup)
    assert len(plain.update) == 1
    assert all("hints" not in e for e in plain.update[0]["endpoints"])


def test_prefer_same_node_adds_node_hints() -> None:
    result = sync.plan(service(distribution="PreferSameNode"), [pod(1)], [], lookup)
    assert result.create[0]["endpoints"][0]["hints"] == {
        "forZones": [{"name": "zone-a"}],
        "forNodes": [{"name": "n1"}],
    }
    off = sync.plan(
        service(distribution="PreferSameNode"),
        [pod(1)],
        [],
        lookup,
        settings=sync.Settings(prefer_same=False),
    )
    assert "hints" not in off.create[0]["endpoints"][0]


AUTO = {hints.TOPOLOGY_MODE_ANNOTATION: "Auto"}


def test_topology_hints_refused_with_too_little_node_information() -> None:
    cache = TopologyCache()
    cache.set_nodes([node("n1"), node("n2", zone=None)])
    result = sync.plan(service(annotations=AUTO), [pod(1)], [], lookup, topology=cache)
    assert all("hints" not in e for e in result.create[0]["endpoints"])
    assert [(e.type, e.reason, e.message) for e in result.events] == [
        (
            "Warning",
            "TopologyAwareHintsDisabled",
            f"{hints.INSUFFICIENT_NODE_INFO}, addressType: IPv4",
        )
    ]
    one_zone = TopologyCache()
    one_zone.set_nodes([node("n1"), node("n2")])
    result = sync.plan(service(annotations=AUTO), [pod(1)], [], lookup, topology=one_zone)
    assert result.events[0].message == f"{hints.INSUFFICIENT_NODE_INFO}, addressType: IPv4"
    fresh = sync.plan(service(annotations=AUTO), [pod(1)], [], lookup, topology=TopologyCache())
    assert fresh.events[0].message == f"{hints.ONE_ZONE_ONLY}, addressType: IPv4"


def test_topology_hints_with_too_few_endpoints_for_the_zones() -> None:
    cache = TopologyCache()
    cache.set_nodes([node("n1"), node("n2", "zone-b")])
    result = sync.plan(service(annotations=AUTO), [pod(1)], [], lookup, topology=cache)
    assert result.events[0].message == (
        f"{hints.TOO_FEW_ENDPOINTS} (1 endpoints, 2 zones), addressType: IPv4"
    )


def test_topology_hints_balance_zones_by_cpu_and_are_disabled_again() -> None:
    cache = TopologyCache()
    cache.set_nodes([node("n1", cpu="2"), node("n2", "zone-b", cpu="2")])
    svc = service(annotations=AUTO)
    pods = [pod(i) for i in range(3)] + [pod(3, node="n2")]  # 3 in zone-a, 1 in zone-b
    result = sync.plan(svc, pods, [], lookup, topology=cache)
    assert [(e.reason, e.message) for e in result.events] == [
        ("TopologyAwareHintsEnabled", f"{hints.HINTS_ENABLED}, addressType: IPv4")
    ]
    zones = sorted(e["hints"]["forZones"][0]["name"] for e in result.create[0]["endpoints"])
    assert zones == ["zone-a", "zone-a", "zone-b", "zone-b"]  # one zone-a endpoint moved
    assert cache.has_populated_hints("ns/svc")
    assert cache.overloaded_services() == []
    cache.set_nodes([node("n1", cpu="2"), node("n2", "zone-b", cpu="6")])
    assert cache.overloaded_services() == ["ns/svc"]
    existing = written(result.create)
    off = sync.plan(service(), pods, existing, lookup, topology=cache)
    assert [(e.type, e.reason) for e in off.events] == [("Warning", "TopologyAwareHintsDisabled")]
    assert all("hints" not in e for e in off.update[0]["endpoints"])
    assert not cache.has_populated_hints("ns/svc")


def test_cpu_quantities() -> None:
    assert hints.cpu_millis("4") == 4000
    assert hints.cpu_millis("3500m") == 3500
    assert hints.cpu_millis("1.5") == 1500
    assert hints.cpu_millis("1k") == 1_000_000
    assert hints.cpu_millis(None) == 0
    assert hints.cpu_millis("lots") == 0


def test_control_plane_and_unready_nodes_do_not_count() -> None:
    cache = TopologyCache()
    control = node("c", zone=None)
    control["metadata"]["labels"]["node-role.kubernetes.io/control-plane"] = ""
    cache.set_nodes([node("n1"), node("n2", "zone-b"), control, node("u", zone=None, ready=False)])
    assert cache.ratios == {"zone-a": 0.5, "zone-b": 0.5}
