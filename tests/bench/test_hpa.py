"""The HPA workload of the controllers benchmark (bench/hpa.py): its objects, how syncs are
counted, its figures in the comparison, and a tiny run of both sides."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from bench import controllers, hpa
from steward.cluster.identities import METRICS_SERVER_USER, STEWARD_IDENTITIES
from steward.cluster.usage import CPU_ANNOTATION, quantity
from steward.controllers.hpa.controller import CONTROLLER, SYNC_PERIOD

ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = hpa.IDENTITIES[False]
STEWARD = hpa.IDENTITIES[True]


@pytest.mark.unit
def test_both_sides_run_the_same_hpa_workers_and_period() -> None:
    # kube-controller-manager's --concurrent-horizontal-pod-autoscaler-syncs defaults to 5,
    # its --horizontal-pod-autoscaler-sync-period to 15 s.
    assert CONTROLLER.options.max_concurrent_reconciles == hpa.WORKERS == 5
    assert SYNC_PERIOD == hpa.SYNC_PERIOD == 15.0
    assert CONTROLLER.name == hpa.CONTROLLER
    assert STEWARD_IDENTITIES[f"controller-{hpa.CONTROLLER}"] == STEWARD


@pytest.mark.unit
def test_targets_use_their_cpu_exactly_at_the_hpas_target() -> None:
    deployment = hpa.deployment_body("hpa-0001")
    template = deployment["spec"]["template"]
    container = template["spec"]["containers"][0]
    usage = quantity(template["metadata"]["annotations"][CPU_ANNOTATION])
    request = quantity(container["resources"]["requests"]["cpu"])
    body = hpa.hpa_body("hpa-0001")
    target = body["spec"]["metrics"][0]["resource"]["target"]
    assert usage / request * 100 == target["averageUtilization"] == hpa.TARGET_UTILIZATION
    assert body["spec"]["scaleTargetRef"]["name"] == deployment["metadata"]["name"]
    assert deployment["spec"]["replicas"] == body["spec"]["minReplicas"] == 1
    assert [hpa.nodes_for(n) for n in (5, 200, 201, 500)] == [2, 2, 2, 3]


@pytest.mark.unit
def test_scaling_active_reads_the_condition() -> None:
    def with_condition(status: str) -> dict[str, Any]:
        return {"status": {"conditions": [{"type": "ScalingActive", "status": status}]}}

    assert hpa.scaling_active(with_condition("True"))
    assert not hpa.scaling_active(with_condition("False"))
    assert not hpa.scaling_active({"metadata": {"name": "h"}})


def _event(user: str, verb: str, resource: str, sub: str, stamp: str) -> bytes:
    ref = {"resource": resource} | ({"subresource": sub} if sub else {})
    return orjson.dumps(
        {
            "stage": "ResponseComplete",
            "verb": verb,
            "user": {"username": user},
            "objectRef": ref,
            "stageTimestamp": stamp,
        }
    )


@pytest.mark.unit
def test_requests_are_counted_within_the_window_and_metrics_users_are_neither_side(
    tmp_path: Path,
) -> None:
    log = tmp_path / "audit.log"
    stamps = [
        "2026-01-01T00:00:09.999999Z",  # before the window
        "2026-01-01T00:00:10.000000Z",
        "2026-01-01T00:00:30.500000Z",
        "2026-01-01T00:01:10.000001Z",  # after it
    ]
    lines = [_event(STEWARD, "get", "deployments", "scale", s) for s in stamps]
    lines.append(_event(METRICS_SERVER_USER, "list", "nodes", "", stamps[1]))
    lines.append(_event(UPSTREAM, "get", "deployments", "scale", stamps[2]))
    log.write_bytes(b"\n".join(lines) + b"\n")
    start = 1767225610.0  # 2026-01-01T00:00:10Z
    assert controllers.audit_time(start) == stamps[1]
    found = controllers.audit_requests(log, 0, (start, start + 60.0))
    assert found["steward"] == {STEWARD: {"get deployments/scale": 2}}
    assert found["upstream"] == {UPSTREAM: {"get deployments/scale": 1}}
    assert found["other"] == {METRICS_SERVER_USER: {"list nodes": 1}}
    assert hpa.identity_count({"requests": found}, STEWARD, hpa.SYNC_REQUEST) == 2
    everything = controllers.audit_requests(log, 0)
    assert everything["steward"][STEWARD]["get deployments/scale"] == 4


def _measured(steward: bool, syncs: int, kcm: float, own: float) -> dict[str, Any]:
    cpu = {
        "kube-apiserver": 0.5 * syncs,
        "etcd": 0.1 * syncs,
        "metrics-server": 0.05 * syncs,
        "metrics-adapter": 0.0,
        "kwok": 0.01 * syncs,
        controllers.KCM: kcm,
    }
    if steward:
        cpu |= {"horizontalpodautoscaling-controller": own, "informer": 1.0, "manager": 1.0}
    user = hpa.IDENTITIES[steward]
    per_sync = {"get deployments/scale": syncs, "list pods": syncs, "update leases": 0}
    return {
        "hpas": 500,
        "workers": hpa.WORKERS,
        "sync_period_seconds": hpa.SYNC_PERIOD,
        "window_seconds": 60.0,
        "span_seconds": 60.0,
        "all_scaling_active_seconds": 30.0,
        "syncs": syncs,
        "syncs_per_s": round(syncs / 60.0, 3),
        "full_rate_syncs_per_s": round(500 / hpa.SYNC_PERIOD, 3),
        "status_writes": 0,
        "targets_rescaled": 0,
        "nodes": 3,
        "cpu_seconds": cpu,
        "io_bytes": {n: {"read": 1000, "written": 1000} for n in cpu},
        "requests": {
            "steward" if steward else "upstream": {user: per_sync},
            "other": {METRICS_SERVER_USER: {"list pods": 5}},
        },
    }


@pytest.mark.unit
def test_hpa_figures_are_compared_per_sync() -> None:
    per_side = {
        "upstream": {"hpa": _measured(False, 600, kcm=6.0, own=0.0)},
        "steward": {"hpa": _measured(True, 400, kcm=2.0, own=4.0)},
    }
    for side in (controllers.UPSTREAM, controllers.STEWARD):
        measured = per_side[side.name]["hpa"]
        measured["summary"] = controllers.summarize_workload(side, "hpa", measured)
    steward = per_side["steward"]["hpa"]["summary"]
    assert steward["own_cpu_per_unit"] == {
        "informer": 0.0025,
        "manager": 0.0025,
        "horizontalpodautoscaling-controller": 0.01,
    }
    assert steward["controller_cpu_per_unit"] == 0.02  # (2 + 4 + 1 + 1) / 400
    assert steward["own_cpu_total_per_unit"] == 0.015
    assert steward["hpa_controller_requests_per_unit"]["total"] == 2.0
    results: dict[str, Any] = {"settings": {"defaults": per_side}}
    results["ratios"] = controllers.compare(results)
    ratios = results["ratios"]["defaults"]
    assert ratios["hpa_syncs_per_s_ratio"] == pytest.approx(0.667, abs=0.001)
    assert ratios["hpa_controller_cpu_ratio"] == 2.0  # 0.02 / (6 / 600)
    assert ratios["hpa_own_cpu_total_ratio"] == 1.5
    assert ratios["hpa_apiserver_cpu_ratio"] == 1.0
    assert ratios["hpa_metrics_server_cpu_ratio"] == 1.0
    shown = controllers.table(results)
    assert "5 HPA workers" in shown
    assert "500 HPAs in steady state: HPA syncs in the window" in shown
    assert "controller-side CPU s per HPA sync (kube-controller-manager on both sides)" in shown
    assert "API requests per HPA sync of the HPA controller's identity" in shown
    assert "5 workers per controller" not in shown  # no workload of the shared cluster ran


@pytest.mark.unit
def test_a_workload_without_a_sync_is_an_error() -> None:
    measured = _measured(True, 0, kcm=1.0, own=1.0)
    with pytest.raises(RuntimeError, match="measured no unit of work"):
        controllers.summarize_workload(controllers.STEWARD, "hpa", measured)


@pytest.mark.integration
@pytest.mark.slow
def test_tiny_hpa_run(tmp_path: Path) -> None:
    """Steward's side with 5 HPAs and a 20 s window: every figure there and positive (no
    wall-clock assertion). Upstream's side differs only in which controller its
    kube-controller-manager runs and which identity is counted (its figures and the
    ratios are checked above on measured data); a cluster of its own would add another
    minute and a half of waiting for metrics-server's first samples."""
    out = tmp_path / "controllers.json"
    subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.controllers",
            "--settings=defaults",
            "--workloads=hpa",
            "--sides=steward",
            "--hpas=5",
            "--hpa-window=20",
            "--timeout=300",
            f"--out={out}",
        ],
        cwd=ROOT,
        check=True,
        timeout=900,
    )
    results = json.loads(out.read_text())
    measured = results["settings"]["defaults"]["steward"]["hpa"]
    assert measured["hpas"] == 5
    assert measured["syncs"] > 0 and measured["syncs_per_s"] > 0
    assert measured["targets_rescaled"] == 0
    summary = measured["summary"]
    for key in controllers.HPA_CPU_FIGURES:
        assert summary[key] > 0, key
    assert summary["hpa_controller_requests_per_unit"]["get deployments/scale"] == 1.0
    assert "horizontalpodautoscaling-controller" in summary["own_cpu_per_unit"]
    assert "upstream" not in results["settings"]["defaults"]
