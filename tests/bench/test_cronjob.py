"""The CronJob workload of the controllers benchmark (bench/cronjob.py): how a Job's scheduled
time and lag are read, what counts as missing, its figures in the comparison, and a tiny
run on a real control plane."""

from __future__ import annotations

from typing import Any

import pytest

from bench import controllers, cronjob
from bench.informer import Api
from steward.cluster import LocalCluster
from steward.cluster.progress import Progress
from steward.controllers.cronjob.controller import CONTROLLER

MINUTE = 29_450_000 * 60.0  # 2025-12-29T09:20:00Z, a minute boundary


def _job(name: str, stamp: str | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name}
    if stamp is not None:
        meta["annotations"] = {cronjob.SCHEDULED_TIMESTAMP: stamp}
    return {"metadata": meta}


@pytest.mark.unit
def test_the_scheduled_time_is_the_minute_the_name_carries() -> None:
    assert cronjob.scheduled_time(_job("cron-0001-29450000")) == ("cron-0001", MINUTE)
    stamp = "2025-12-29T09:20:00Z"
    assert cronjob.scheduled_time(_job("cron-0001-29450000", stamp)) == ("cron-0001", MINUTE)
    with pytest.raises(RuntimeError, match="its name says"):
        cronjob.scheduled_time(_job("cron-0001-29450001", stamp))
    assert cronjob.scheduled_time(_job("warm-up")) is None
    assert cronjob.scheduled_time(_job("cron-x")) is None


@pytest.mark.unit
def test_the_first_minute_leaves_the_margin() -> None:
    assert cronjob.first_minute(MINUTE - 20.0) == MINUTE
    assert cronjob.first_minute(MINUTE - cronjob.MARGIN) == MINUTE
    assert cronjob.first_minute(MINUTE - cronjob.MARGIN + 0.01) == MINUTE + 60.0
    assert cronjob.first_minute(MINUTE) == MINUTE + 60.0


@pytest.mark.unit
def test_lag_figures_count_the_missing_per_minute() -> None:
    window = [MINUTE, MINUTE + 60.0]
    names = ["a", "b"]
    seen = {
        "a-29450000": MINUTE + 0.5,
        "b-29450000": MINUTE + 1.5,
        "a-29450001": MINUTE + 60.0 + 2.5,
        "a-29449999": MINUTE - 60.0 + 9.0,  # outside the window: ignored
    }
    created = {n: float(int(t)) for n, t in seen.items()}
    figures = cronjob.lag_figures(names, window, seen, created)
    assert figures["jobs_expected"] == 4
    assert figures["jobs_seen"] == 3
    assert figures["missing_per_minute"] == [0, 1]
    assert figures["missing"] == 1
    assert figures["seen_lag_p50_s"] == 1.5
    assert figures["seen_lag_max_s"] == 2.5
    assert figures["created_lag_p50_s"] == 1.0
    assert figures["created_lag_max_s"] == 2.0


@pytest.mark.unit
def test_the_cronjob_fires_every_minute_with_suspended_jobs() -> None:
    body = cronjob.cronjob_body("cron-0000")
    assert body["spec"]["schedule"] == "* * * * *"
    assert body["spec"]["jobTemplate"]["spec"]["suspend"] is True
    assert "concurrencyPolicy" not in body["spec"]  # Allow: suspended Jobs never block


@pytest.mark.unit
def test_both_sides_run_the_same_cronjob_workers() -> None:
    # kube-controller-manager's --concurrent-cron-job-syncs defaults to 5.
    assert CONTROLLER.options.max_concurrent_reconciles == cronjob.WORKERS == 5


def _measured(kcm: float, own: float, p50: float, missing: list[int]) -> dict[str, Any]:
    cpu = {"kube-apiserver": 10.0, "etcd": 2.0, controllers.KCM: kcm, "cronjob-controller": own}
    figures: dict[str, Any] = {
        "jobs_expected": 10,
        "jobs_seen": 10 - sum(missing),
        "missing": sum(missing),
        # The Jobs made in the span: some of the minute after the last are among them.
        "jobs_in_span": 12,
    }
    for key in ("seen", "created"):
        figures |= {f"{key}_lag_{q}_s": p50 * m for q, m in (("p50", 1), ("p99", 2), ("max", 3))}
    return figures | {
        "cronjobs": 5,
        "minutes": 2,
        "workers": cronjob.WORKERS,
        "nodes": cronjob.NODES,
        "missing_per_minute": missing,
        "cpu_seconds": cpu,
        "io_bytes": {n: {"read": 1000, "written": 1000} for n in cpu},
        "requests": {
            "upstream": {controllers.CRONJOB_IDENTITIES[False]: {"create jobs": 12}},
            "steward": {controllers.CRONJOB_IDENTITIES[True]: {"create jobs": 6}},
        },
    }


@pytest.mark.unit
def test_cronjob_figures_are_compared_per_job_made_in_the_span() -> None:
    per_side = {
        "upstream": {"cronjob": _measured(4.0, 0.0, 0.5, [0, 0])},
        "steward": {"cronjob": _measured(1.0, 5.0, 1.0, [0, 2])},
    }
    for side in (controllers.UPSTREAM, controllers.STEWARD):
        measured = per_side[side.name]["cronjob"]
        measured["summary"] = controllers.summarize_workload(side, "cronjob", measured)
    steward = per_side["steward"]["cronjob"]["summary"]
    assert steward["cronjob_controller_requests_per_unit"] == {"create jobs": 0.5, "total": 0.5}
    assert steward["controller_cpu_per_unit"] == 0.5  # (1 + 5) / 12 Jobs made in the span
    results: dict[str, Any] = {"settings": {"defaults": per_side}}
    results["ratios"] = controllers.compare(results)
    ratios = results["ratios"]["defaults"]
    assert ratios["cronjob_seen_lag_p50_ratio"] == 2.0
    assert ratios["cronjob_created_lag_max_ratio"] == 2.0
    assert ratios["cronjob_controller_cpu_ratio"] == 1.5  # 0.5 / (4 / 12)
    shown = controllers.table(results)
    assert "5 CronJob workers and 2 kwok nodes" in shown
    assert "5 CronJobs x 2 minutes: Jobs seen of expected" in shown
    assert "Jobs missing per minute 0 0 0 2" in " ".join(shown.split())
    assert "1.000 s (ratio 2.00)" in shown
    assert "API requests per Job of the CronJob controller's identity" in shown


@pytest.mark.integration
@pytest.mark.slow
def test_tiny_cronjob_run(cluster: LocalCluster) -> None:
    """Three CronJobs for one minute under upstream's controller: every Job comes, named
    for its minute and annotated with it (checked as the watch sees it), and both lags
    are there; no wall-clock assertion."""
    figures = cronjob.run_phase(Api(cluster), "bench-cronjob-tiny", 3, 1, 4, Progress(quiet=True))
    assert figures["jobs_expected"] == figures["jobs_seen"] == 3
    assert figures["missing_per_minute"] == [0]
    assert figures["jobs_in_span"] >= 3
    # Upstream's controller wakes 100 ms after the minute: never early.
    assert 0 < figures["seen_lag_p50_s"] <= figures["seen_lag_max_s"]
    assert 0 <= figures["created_lag_p50_s"] <= figures["created_lag_max_s"]
    jobs = Api(cluster).request("GET", "/apis/batch/v1/namespaces/bench-cronjob-tiny/jobs")
    assert all(cronjob.SCHEDULED_TIMESTAMP in j["metadata"]["annotations"] for j in jobs["items"])
    assert all(j["spec"]["suspend"] for j in jobs["items"])
