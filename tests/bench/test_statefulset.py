"""The StatefulSet workload of the controllers benchmark (bench/statefulset.py): when a
StatefulSet counts as rolled out, the check of its pods, the refusal of a Steward side
without Steward's controller, its figures in the comparison, and a tiny run on a real
control plane."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bench import controllers, statefulset
from bench.informer import Api
from steward.cluster import LocalCluster
from steward.cluster.progress import Progress

ROOT = Path(__file__).resolve().parents[2]
REPLICAS = 3


def _sts(generation: int = 2, observed: int = 2, **status: Any) -> dict[str, Any]:
    st: dict[str, Any] = {"observedGeneration": observed}
    st |= {c: REPLICAS for c in statefulset.STATUS_COUNTS}
    st |= {"currentRevision": "web-2", "updateRevision": "web-2"}
    st |= status
    return {
        "metadata": {"name": "web", "generation": generation},
        "spec": {"replicas": REPLICAS},
        "status": st,
    }


def _pod(i: int, revision: str = "web-2", version: str = "2", **extra: Any) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": f"web-{i}",
        "labels": {"app": "web", "controller-revision-hash": revision},
    }
    if extra.get("deleting"):
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    env = [{"name": statefulset.VERSION_ENV, "value": version}] if version else []
    ready = "False" if extra.get("unready") else "True"
    return {
        "metadata": meta,
        "spec": {"containers": [{"name": "main", "env": env}]},
        "status": {"conditions": [{"type": "Ready", "status": ready}]},
    }


@pytest.mark.unit
def test_rolled_out_needs_every_count_and_one_revision() -> None:
    assert statefulset.rolled_out(_sts())
    assert not statefulset.rolled_out(_sts(observed=1))
    assert not statefulset.rolled_out({"metadata": {"generation": 1}, "spec": {"replicas": 1}})
    for count in statefulset.STATUS_COUNTS:
        assert not statefulset.rolled_out(_sts(**{count: REPLICAS - 1})), count
    assert not statefulset.rolled_out(_sts(currentRevision="web-1"))
    assert not statefulset.rolled_out(_sts(currentRevision="", updateRevision=""))


@pytest.mark.unit
def test_check_pods_wants_every_ordinal_ready_and_current() -> None:
    good = [_pod(i) for i in range(REPLICAS)]
    statefulset.check_pods(good, "web", REPLICAS, "web-2", "2")
    # A pod on its way out is not counted.
    statefulset.check_pods([*good, _pod(3, deleting=True)], "web", REPLICAS, "web-2", "2")
    with pytest.raises(RuntimeError, match=r"missing \['web-0'\] \(1\)"):
        statefulset.check_pods(good[1:], "web", REPLICAS, "web-2", "2")
    with pytest.raises(RuntimeError, match=r"unexpected \['web-3'\] \(1\)"):
        statefulset.check_pods([*good, _pod(3)], "web", REPLICAS, "web-2", "2")
    for odd in (_pod(0, revision="web-1"), _pod(0, version=""), _pod(0, unready=True)):
        with pytest.raises(RuntimeError, match=r"another revision \['web-0'\] \(1\)"):
            statefulset.check_pods([odd, *good[1:]], "web", REPLICAS, "web-2", "2")


@pytest.mark.unit
def test_a_statefulset_of_defaults() -> None:
    spec = statefulset.statefulset_body("web", 7)["spec"]
    assert spec["replicas"] == 7
    assert "podManagementPolicy" not in spec and "updateStrategy" not in spec  # OrderedReady
    assert statefulset.nodes_for(100) == 2 and statefulset.nodes_for(450) == 3


def _measured(kcm: float, own: float, seconds: float) -> dict[str, Any]:
    # Steward's informer: a process of its side whether or not "statefulset" is registered.
    cpu = {"kube-apiserver": 10.0, "etcd": 2.0, controllers.KCM: kcm, "informer": own}
    return {
        "replicas": 10,
        "workers": statefulset.WORKERS,
        "nodes": 2,
        "ready_seconds": seconds,
        "rollout_seconds": 2 * seconds,
        "cpu_seconds": cpu,
        "io_bytes": {n: {"read": 1000, "written": 1000} for n in cpu},
        "requests": {
            "upstream": {statefulset.IDENTITIES[False]: {"create pods": 20}},
            "steward": {statefulset.IDENTITIES[True]: {"create pods": 20, "delete pods": 10}},
        },
    }


@pytest.mark.unit
def test_statefulset_figures_are_compared_per_replica() -> None:
    per_side = {
        "upstream": {"statefulset": _measured(4.0, 0.0, 10.0)},
        "steward": {"statefulset": _measured(1.0, 5.0, 12.0)},
    }
    for side in (controllers.UPSTREAM, controllers.STEWARD):
        measured = per_side[side.name]["statefulset"]
        measured["summary"] = controllers.summarize_workload(side, "statefulset", measured)
    steward = per_side["steward"]["statefulset"]["summary"]
    assert steward["statefulset_controller_requests_per_unit"] == {
        "create pods": 2.0,
        "delete pods": 1.0,
        "total": 3.0,
    }
    results: dict[str, Any] = {"settings": {"high": per_side}}
    results["ratios"] = controllers.compare(results)
    ratios = results["ratios"]["high"]
    assert ratios["statefulset_ready_ratio"] == 1.2
    assert ratios["statefulset_rollout_ratio"] == 1.2
    assert ratios["statefulset_controller_cpu_ratio"] == 1.5  # (1 + 5) / 4
    shown = controllers.table(results)
    assert "5 StatefulSet workers and 2 kwok nodes" in shown
    assert "a StatefulSet of 10 replicas: template changed → all updated and Ready" in shown
    assert "12.00 s (ratio 1.20)" in shown
    assert "API requests per replica of the StatefulSet controller's identity" in shown


@pytest.mark.integration
@pytest.mark.slow
def test_tiny_statefulset_run(cluster: LocalCluster) -> None:
    """Three replicas under upstream's controller: Ready, then rolled out to a new
    revision, the pods checked after each (run_phase raises otherwise); no wall-clock
    assertion."""
    api = Api(cluster)
    figures = statefulset.run_phase(api, "bench-sts-tiny", REPLICAS, 120, Progress(quiet=True))
    assert figures["replicas"] == REPLICAS
    assert figures["ready_seconds"] > 0 and figures["rollout_seconds"] > 0
    path = f"/apis/apps/v1/namespaces/bench-sts-tiny/statefulsets/{statefulset.NAME}"
    status = api.request("GET", path)["status"]
    assert status["currentRevision"] == status["updateRevision"]
    assert status["updatedReplicas"] == status["readyReplicas"] == REPLICAS
