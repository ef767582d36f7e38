"""The garbage collection workloads of the controllers benchmark (bench/garbage.py): their
objects, the counts and signals they rely on, and their figures in the comparison."""

from __future__ import annotations

import time
import uuid
from collections import Counter
from typing import Any

import pytest

from bench import controllers, garbage
from bench.informer import Api
from steward.cluster import LocalCluster
from steward.cluster.identities import STEWARD_IDENTITIES
from steward.controllers.garbagecollector.controller import CONTROLLER as GC_CONTROLLER
from steward.controllers.namespace.controller import WORKERS as NAMESPACE_WORKERS


@pytest.mark.unit
def test_both_sides_run_the_same_workers_and_identities_are_steward_s() -> None:
    # kube-controller-manager's --concurrent-gc-syncs defaults to 20,
    # --concurrent-namespace-syncs to 10.
    assert GC_CONTROLLER.options.max_concurrent_reconciles == 20
    assert NAMESPACE_WORKERS == 10
    for name in garbage.CONTROLLERS:
        assert STEWARD_IDENTITIES[f"controller-{name}"] == garbage.IDENTITIES[True][name]


@pytest.mark.unit
def test_a_namespace_holds_the_objects_asked_for() -> None:
    split = garbage.split_objects(100, 2)
    # Each Deployment of one replica is 3 objects: itself, its ReplicaSet and its pod.
    assert split == {"deployments": 2, "configmaps": 47, "secrets": 47}
    assert garbage.split_objects(21, 2) == {"deployments": 2, "configmaps": 8, "secrets": 7}
    with pytest.raises(ValueError, match="more than 5"):
        garbage.split_objects(5, 2)
    posts = list(garbage.namespace_requests(["a", "b"], split))
    assert len(posts) == 2 * (47 + 47 + 2)
    deployments = [body for path, body in posts if path.endswith("/deployments")]
    assert len(deployments) == 4
    template = deployments[0]["spec"]["template"]["spec"]
    assert template["terminationGracePeriodSeconds"] == 0
    assert deployments[0]["spec"]["replicas"] == 1
    assert [garbage.nodes_for(n) for n in (30, 2000, 2001)] == [2, 10, 11]


@pytest.mark.unit
def test_the_memory_objects_are_as_many_of_each_of_twenty_types() -> None:
    assert len(garbage.MEMORY_TYPES) == 20
    assert len({resource for _, resource, _ in garbage.MEMORY_TYPES}) == 20
    posts = list(garbage.memory_requests(1_005))  # 50 of each, the 5 left over dropped
    assert len(posts) == 1_000
    per_type = Counter(path.rsplit("/", 1)[1] for path, _ in posts)
    assert set(per_type.values()) == {50}
    assert len({(path, body["metadata"]["name"]) for path, body in posts}) == 1_000
    assert len({path.split("/namespaces/")[1].split("/")[0] for path, _ in posts}) == 10
    for path, body in posts[:20]:
        assert "ownerReferences" not in body["metadata"]
        if "/apis/" in path:
            assert body["apiVersion"] == f"{garbage.GROUP}/v1"
    crd = garbage.crd_body("Thing03")
    assert crd["metadata"]["name"] == f"thing03s.{garbage.GROUP}"
    assert ("/apis/gcbench.steward.io/v1", "thing03s", "Thing03") in garbage.MEMORY_TYPES


def _wait_absent(api: Api, path: str, timeout: float = 120.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not garbage.exists(api, path):
            return True
        time.sleep(0.5)
    return False


@pytest.mark.integration
def test_counts_and_sentinels_against_the_api_server(cluster: LocalCluster) -> None:
    """The poll's count of a list with ``limit=1`` is the whole list's length, and a
    sentinel is collected by a garbage collector (here upstream's) while an object of
    the same body without the owner reference stays."""
    api = Api(cluster)
    ns = f"gc-bench-{uuid.uuid4().hex[:8]}"
    api.namespace(ns)
    path = f"/api/v1/namespaces/{ns}/configmaps"
    for i in range(7):
        api.request("POST", path, garbage.object_body("/api/v1", "ConfigMap", f"cm-{i}"))
    whole = len(api.request("GET", path)["items"])
    assert whole >= 7
    assert garbage.remaining(api.request("GET", f"{path}?limit=1")) == whole
    assert garbage.remaining(api.request("GET", f"/api/v1/namespaces/{ns}/secrets?limit=1")) == 0

    api.request("POST", path, garbage.sentinel_body("/api/v1", "ConfigMap", "sentinel"))
    assert _wait_absent(api, f"{path}/sentinel"), "the garbage collector left the sentinel"
    api.request("GET", f"{path}/cm-0")  # the object without an owner is still there
    api.request("DELETE", f"/api/v1/namespaces/{ns}")


def _span(steward: bool, units: int, *, kcm: float, own: float) -> dict[str, Any]:
    """A measured gc span: CPU seconds, the collector's and namespace controller's
    requests."""
    gc_user = garbage.IDENTITIES[steward]["garbagecollector"]
    ns_user = garbage.IDENTITIES[steward]["namespace"]
    cpu = {"kube-controller-manager": kcm, "kube-apiserver": 10.0, "etcd": 2.0, "kwok": 1.0}
    if steward:
        cpu |= {"informer": own / 2, "garbagecollector-controller": own / 2}
    side = "steward" if steward else "upstream"
    return {
        "deployments": units,
        "replicas": 10,
        "nodes": 10,
        "policy": "Background",
        "seconds": 50.0 if steward else 40.0,
        "cpu_seconds": cpu,
        "io_bytes": {"kube-controller-manager": {"read": 1024, "written": 1024}},
        "requests": {
            side: {
                gc_user: {"delete pods": units * 10, "get replicasets": units * 10},
                ns_user: {"list pods": 1},
            }
        },
    }


@pytest.mark.unit
def test_gc_figures_are_compared_per_deployment() -> None:
    per_side: dict[str, Any] = {
        "upstream": {"gc_background": _span(False, 100, kcm=4.0, own=0.0)},
        "steward": {"gc_background": _span(True, 100, kcm=1.0, own=6.0)},
    }
    for side in (controllers.UPSTREAM, controllers.STEWARD):
        measured = per_side[side.name]["gc_background"]
        measured["summary"] = controllers.summarize_workload(side, "gc_background", measured)
    s = per_side["steward"]["gc_background"]["summary"]
    assert s["controller_cpu_per_unit"] == 0.07  # (1 + 6) / 100
    assert s["garbagecollector_requests_per_unit"]["total"] == 20.0
    assert s["namespace_requests_per_unit"]["total"] == 0.01
    assert s["kwok_cpu_per_unit"] == 0.01
    results: dict[str, Any] = {"settings": {"defaults": per_side}}
    results["ratios"] = controllers.compare(results)
    ratios = results["ratios"]["defaults"]
    assert ratios["gc_background_time_ratio"] == 1.25
    assert ratios["gc_background_controller_cpu_ratio"] == 1.75
    shown = controllers.table(results)
    assert "100 Deployments x 10 deleted: propagationPolicy Background" in shown
    assert "of which the garbagecollector identity's" in shown
    assert "10 kwok nodes in a cluster of the gc workload's own" in shown


@pytest.mark.unit
def test_gc_memory_is_compared_with_both_kube_controller_managers() -> None:
    def memory(rss: dict[str, int]) -> dict[str, Any]:
        return {
            "objects": 1000,
            "types": 20,
            "rss_after": rss,
            "rss_growth_per_object": {n: 100.0 for n in rss},
        }

    per_side = {
        "upstream": {
            "gc_memory": memory({"kube-controller-manager": 200 << 20}),
            "gc_memory_alone": memory({"kube-controller-manager": 100 << 20}),
        },
        "steward": {
            "gc_memory": memory(
                {
                    "kube-controller-manager": 150 << 20,
                    "garbagecollector-controller": 80 << 20,
                    "informer": 90 << 20,
                }
            )
        },
    }
    results: dict[str, Any] = {"settings": {"defaults": per_side}}
    results["ratios"] = controllers.compare(results)
    ratios = results["ratios"]["defaults"]
    assert ratios["gc_memory_rss_ratio"] == 0.4
    assert ratios["gc_memory_alone_rss_ratio"] == 0.8
    shown = controllers.table(results)
    assert "kube-controller-manager --controllers=garbagecollector" in shown
    assert "Steward's informer (apart)" in shown
