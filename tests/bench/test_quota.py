"""The resource quota workload of the controllers benchmark (bench/quota.py): its objects,
the truth it compares quotas with, the burst's order, its figures in the comparison, and a
tiny run of both sides."""

from __future__ import annotations

import json
import subprocess
import sys
from fractions import Fraction
from pathlib import Path
from typing import Any

import pytest

from bench import controllers, quota
from steward.cluster.identities import STEWARD_IDENTITIES
from steward.controllers.resourcequota.controller import CONTROLLER, SYNC_PERIOD

ROOT = Path(__file__).resolve().parents[2]
NOW = 1767225605.0  # 2026-01-01T00:00:05Z


@pytest.mark.unit
def test_both_sides_run_the_same_quota_workers_and_period() -> None:
    # kube-controller-manager's --concurrent-resource-quota-syncs defaults to 5, its
    # --resource-quota-sync-period to 5m.
    assert CONTROLLER.options.max_concurrent_reconciles == quota.WORKERS == 5
    assert SYNC_PERIOD == quota.SYNC_PERIOD == 300.0
    assert CONTROLLER.name == quota.CONTROLLER
    assert STEWARD_IDENTITIES[f"controller-{quota.CONTROLLER}"] == quota.IDENTITIES[True]


def _pod(ns: str, cpu: str, memory: str, **extra: Any) -> dict[str, Any]:
    body = quota.pod_body("p", "kwok-node-0", {"cpu": cpu, "memory": memory})
    body["metadata"] |= {"namespace": ns} | extra.get("metadata", {})
    body["status"] = extra.get("status", {"phase": "Running"})
    return body


@pytest.mark.unit
def test_truth_counts_what_the_pods_evaluator_counts() -> None:
    pods = [
        _pod("a", "100m", "64Mi"),
        _pod("a", "50m", "32Mi"),
        _pod("a", "1", "1Gi", status={"phase": "Succeeded"}),
        _pod("a", "1", "1Gi", status={"phase": "Failed"}),
        _pod(
            "a",
            "1",
            "1Gi",
            metadata={"deletionTimestamp": "2026-01-01T00:00:00Z", "deletionGracePeriodSeconds": 0},
        ),
        _pod(  # within its grace period at NOW: still counted
            "a",
            "200m",
            "1Mi",
            metadata={
                "deletionTimestamp": "2026-01-01T00:00:10Z",
                "deletionGracePeriodSeconds": 30,
            },
        ),
        _pod(  # past it
            "a",
            "1",
            "1Gi",
            metadata={
                "deletionTimestamp": "2025-12-31T23:59:00Z",
                "deletionGracePeriodSeconds": 30,
            },
        ),
        _pod("b", "100m", "64Mi"),
    ]
    found = quota.truth(pods, NOW)
    assert found["a"] == {
        "pods": 3,
        "requests.cpu": Fraction(35, 100),
        "requests.memory": 97 * 2**20,
    }
    assert quota.truth(pods, NOW + 40)["a"]["pods"] == 2  # the grace period over
    assert found["b"] == quota.usage_of(1, 1)
    assert quota.usage_of(4, 2) == {
        "pods": 4,
        "requests.cpu": Fraction(3, 10),
        "requests.memory": 192 * 2**20,
    }


@pytest.mark.unit
def test_a_quota_matches_by_value_whatever_the_format() -> None:
    expected = quota.usage_of(6, 3)  # 450m, 288Mi
    used = {"pods": "6", "requests.cpu": "450m", "requests.memory": "288Mi"}
    assert quota.matches({"status": {"used": used}}, expected)
    same = used | {"requests.cpu": "0.45", "requests.memory": str(288 * 2**20)}
    assert quota.matches({"status": {"used": same | {"count/configmaps": "1"}}}, expected)
    assert not quota.matches({"status": {"used": used | {"pods": "5"}}}, expected)
    assert not quota.matches({"status": {"used": used | {"requests.cpu": "451m"}}}, expected)
    missing = {k: v for k, v in used.items() if k != "requests.memory"}
    assert not quota.matches({"status": {"used": missing}}, expected)
    assert not quota.matches({"status": {"used": used | {"pods": "many"}}}, expected)
    assert not quota.matches({"metadata": {"name": "quota"}}, expected)


@pytest.mark.unit
def test_each_namespace_creates_before_it_deletes_and_the_peak_has_nodes() -> None:
    names = [quota.namespace_name(i) for i in range(3)]
    burst = quota.burst_requests(names, 7, 2)
    assert len(burst) == 3
    for ns, sequence in zip(names, burst, strict=True):
        methods = [method for method, _, _ in sequence]
        assert methods == ["POST"] * 3 + ["DELETE"] * 3
        assert all(f"/namespaces/{ns}/" in path for _, path, _ in sequence)
        deleted = [path.rsplit("/", 1)[1] for m, path, _ in sequence if m == "DELETE"]
        assert deleted == [f"old-{i:04d}?gracePeriodSeconds=0" for i in range(3)]
        created = [body for m, _, body in sequence if m == "POST"]
        assert {c["spec"]["containers"][0]["resources"]["requests"]["cpu"] for c in created} == {
            quota.SECOND["cpu"]
        }
        assert {c["spec"]["nodeName"] for c in created} <= {"kwok-node-0", "kwok-node-1"}
    assert quota.nodes_for(100, 100) == 60  # 15,000 pods at the peak, 250 a node
    assert quota.nodes_for(2, 6) == 2
    assert quota.usage_of(7, 7) != quota.usage_of(7, 7 - quota.half(7))
    assert set(quota.quota_body()["spec"]["hard"]) == {*quota.CHECKED, "count/configmaps"}


def _measured(steward: bool, kcm: float, own: float) -> dict[str, Any]:
    cpu = {"kube-apiserver": 20.0, "etcd": 4.0, "kwok": 2.0, controllers.KCM: kcm}
    if steward:
        cpu |= {"resourcequota-controller": own, "informer": 2.0, "manager": 0.0}
    user = quota.IDENTITIES[steward]
    return {
        "namespaces": 100,
        "pods_per_namespace": 100,
        "pods_churned": 10_000,
        "workers": quota.WORKERS,
        "sync_period_seconds": quota.SYNC_PERIOD,
        "nodes": 60,
        "settle_seconds": 4.0 if steward else 2.0,
        "seconds": 50.0 if steward else 40.0,
        "burst_requests_seconds": 39.0,
        "trailing_seconds": 11.0 if steward else 1.0,
        "status_writes": 500,
        "span_seconds": 50.0,
        "cpu_seconds": cpu,
        "io_bytes": {n: {"read": 1000, "written": 1000} for n in cpu},
        "requests": {
            "steward" if steward else "upstream": {user: {"update resourcequotas/status": 500}},
        },
    }


@pytest.mark.unit
def test_quota_figures_are_compared_per_pod_churned() -> None:
    per_side = {
        "upstream": {"quota": _measured(False, kcm=10.0, own=0.0)},
        "steward": {"quota": _measured(True, kcm=2.0, own=8.0)},
    }
    for side in (controllers.UPSTREAM, controllers.STEWARD):
        measured = per_side[side.name]["quota"]
        measured["summary"] = controllers.summarize_workload(side, "quota", measured)
    steward = per_side["steward"]["quota"]["summary"]
    assert steward["controller_cpu_per_unit"] == 0.0012  # (2 + 8 + 2) / 10,000
    assert steward["own_cpu_total_per_unit"] == 0.001
    assert steward["quota_controller_requests_per_unit"] == {
        "update resourcequotas/status": 0.05,
        "total": 0.05,
    }
    results: dict[str, Any] = {"settings": {"defaults": per_side}}
    results["ratios"] = controllers.compare(results)
    ratios = results["ratios"]["defaults"]
    assert ratios["quota_seconds_ratio"] == 1.25
    assert ratios["quota_trailing_ratio"] == 11.0
    assert ratios["quota_settle_ratio"] == 2.0
    assert ratios["quota_controller_cpu_ratio"] == 1.2
    assert ratios["quota_own_cpu_total_ratio"] == 1.0
    assert ratios["quota_apiserver_cpu_ratio"] == 1.0
    shown = controllers.table(results)
    assert "5 resource quota workers" in shown
    assert "100 quotas over 100 x 100 pods: burst of 10,000 pods churned" in shown
    assert "API requests per pod churned of the resource quota controller's identity" in shown
    assert "5 workers per controller" not in shown  # no workload of the shared cluster ran


@pytest.mark.unit
def test_a_burst_without_churn_is_an_error() -> None:
    measured = _measured(True, kcm=1.0, own=1.0) | {"pods_churned": 0}
    with pytest.raises(RuntimeError, match="measured no unit of work"):
        controllers.summarize_workload(controllers.STEWARD, "quota", measured)


@pytest.mark.integration
@pytest.mark.slow
def test_tiny_quota_run(tmp_path: Path) -> None:
    """Both sides, 2 namespaces of 6 pods: every figure there and positive, and every
    quota right after the burst (the run fails otherwise: bench.quota.check_truth); no
    wall-clock assertion."""
    out = tmp_path / "controllers.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.controllers",
            "--settings=defaults",
            "--workloads=quota",
            "--sides=upstream,steward",
            "--quota-namespaces=2",
            "--quota-pods=6",
            "--timeout=120",
            f"--out={out}",
        ],
        cwd=ROOT,
        check=True,
        timeout=900,
    )
    results = json.loads(out.read_text())
    sides = results["settings"]["defaults"]
    for name in ("upstream", "steward"):
        measured = sides[name]["quota"]
        assert measured["namespaces"] == 2 and measured["pods_churned"] == 12
        for key in ("seconds", "settle_seconds", "burst_requests_seconds", "span_seconds"):
            assert measured[key] > 0, (name, key)
        assert measured["seconds"] >= measured["burst_requests_seconds"]
        # Only the controller gives a deleted pod's usage back: it wrote statuses.
        assert measured["status_writes"] > 0, name
        summary = measured["summary"]
        writes = summary["quota_controller_requests_per_unit"]["update resourcequotas/status"]
        assert writes == round(measured["status_writes"] / 12, 3)
        assert summary["controller_cpu_per_unit"] > 0
    assert "resourcequota-controller" in sides["steward"]["quota"]["summary"]["own_cpu_per_unit"]
    assert "resourcequota-controller" not in sides["upstream"]["quota"]["cpu_seconds"]
    assert set(results["ratios"]["defaults"]) >= {
        "quota_seconds_ratio",
        "quota_controller_cpu_ratio",
    }
