"""The DaemonSet workload of the controllers benchmark (bench/daemonset.py): when a DaemonSet
counts as rolled out, the check of its pods, and its figures in the comparison."""

from __future__ import annotations

from typing import Any

import pytest

from bench import controllers, daemonset
from steward.controllers.daemonset.controller import CONTROLLER

NODES = 3


def _ds(generation: int = 2, observed: int = 2, **counts: int) -> dict[str, Any]:
    status: dict[str, Any] = {"observedGeneration": observed}
    status |= {c: NODES for c in daemonset.STATUS_COUNTS}
    status |= counts
    return {"metadata": {"name": "d", "generation": generation}, "status": status}


def _pod(app: str, node: str, version: str = "2", *, deleting: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": f"{app}-{node}-{version}", "labels": {"app": app}}
    if deleting:
        meta["deletionTimestamp"] = "2026-01-01T00:00:00Z"
    env = [{"name": daemonset.VERSION_ENV, "value": version}] if version else []
    return {
        "metadata": meta,
        "spec": {"nodeName": node, "containers": [{"name": "main", "env": env}]},
    }


@pytest.mark.unit
def test_rolled_out_needs_every_count_at_the_current_generation() -> None:
    assert daemonset.rolled_out(_ds(), NODES)
    assert not daemonset.rolled_out(_ds(observed=1), NODES)
    assert not daemonset.rolled_out({"metadata": {"generation": 1}}, NODES)
    for count in daemonset.STATUS_COUNTS:
        assert not daemonset.rolled_out(_ds(**{count: NODES - 1}), NODES), count
    assert not daemonset.rolled_out(_ds(numberMisscheduled=1), NODES)
    assert not daemonset.rolled_out(_ds(numberUnavailable=1), NODES)
    assert not daemonset.rolled_out(_ds(), NODES + 1)


@pytest.mark.unit
def test_check_pods_wants_one_current_pod_per_daemonset_and_node() -> None:
    names, nodes = ["a", "b"], {"n0", "n1"}
    good = [_pod(a, n) for a in names for n in sorted(nodes)]
    daemonset.check_pods(good, names, nodes, "2")
    # A pod on its way out is not counted.
    daemonset.check_pods([*good, _pod("a", "n0", "", deleting=True)], names, nodes, "2")
    with pytest.raises(RuntimeError, match="1 \\(DaemonSet, node\\) without a pod"):
        daemonset.check_pods(good[1:], names, nodes, "2")
    with pytest.raises(RuntimeError, match="doubled \\[\\('a', 'n0'\\)\\]"):
        daemonset.check_pods([*good, _pod("a", "n0")], names, nodes, "2")
    with pytest.raises(RuntimeError, match="1 of an old template"):
        daemonset.check_pods([*good[1:], _pod("a", "n0", "")], names, nodes, "2")
    daemonset.check_pods([_pod(a, n, "") for a in names for n in nodes], names, nodes, "")


@pytest.mark.unit
def test_both_sides_run_the_same_daemonset_workers() -> None:
    # kube-controller-manager's --concurrent-daemonset-syncs defaults to 2.
    assert CONTROLLER.options.max_concurrent_reconciles == daemonset.WORKERS == 2


def _measured(kcm: float, own: float, seconds: float) -> dict[str, Any]:
    cpu = {"kube-apiserver": 10.0, "etcd": 2.0, controllers.KCM: kcm, "daemonset-controller": own}
    return {
        "daemonsets": 2,
        "nodes": 5,
        "workers": daemonset.WORKERS,
        "rollout_seconds": seconds,
        "update_requests_seconds": 0.1,
        "rolling_update_seconds": 2 * seconds,
        "cpu_seconds": cpu,
        "io_bytes": {n: {"read": 1000, "written": 1000} for n in cpu},
        "requests": {
            "upstream": {
                "system:serviceaccount:kube-system:daemon-set-controller": {"create pods": 10}
            },
            "steward": {"steward:controller:daemonset": {"create pods": 10, "delete pods": 5}},
        },
    }


@pytest.mark.unit
def test_daemonset_figures_are_compared_per_daemonset_pod() -> None:
    per_side = {
        side.name: {"daemonset": _measured(kcm, own, seconds)}
        for side, kcm, own, seconds in (
            (controllers.UPSTREAM, 4.0, 0.0, 10.0),
            (controllers.STEWARD, 1.0, 5.0, 8.0),
        )
    }
    for side in (controllers.UPSTREAM, controllers.STEWARD):
        measured = per_side[side.name]["daemonset"]
        assert controllers.units_of("daemonset", measured) == 10
        measured["summary"] = controllers.summarize_workload(side, "daemonset", measured)
    results: dict[str, Any] = {"settings": {"defaults": per_side}}
    results["ratios"] = controllers.compare(results)
    ratios = results["ratios"]["defaults"]
    assert ratios["daemonset_rollout_ratio"] == 0.8
    assert ratios["daemonset_rolling_update_ratio"] == 0.8
    assert ratios["daemonset_controller_cpu_ratio"] == 1.5  # (1 + 5) / 4
    assert ratios["daemonset_apiserver_cpu_ratio"] == 1.0
    steward = per_side["steward"]["daemonset"]["summary"]
    assert steward["requests_per_unit"] == {"create pods": 1.0, "delete pods": 0.5}
    assert steward["daemonset_controller_requests_per_unit"] == {
        "create pods": 1.0,
        "delete pods": 0.5,
        "total": 1.5,
    }
    upstream = per_side["upstream"]["daemonset"]["summary"]
    assert upstream["daemonset_controller_requests_per_unit"]["total"] == 1.0
    shown = controllers.table(results)
    assert "API requests per DaemonSet pod of the DaemonSet controller's identity" in shown
    assert "2 DaemonSet workers and 5 kwok nodes in a cluster of the DaemonSet" in shown
    assert "5 workers per controller" not in shown  # no workload of the shared cluster ran
    assert "2 DaemonSets x 5 nodes: rolled out" in shown
    assert "8.00 s (ratio 0.80)" in shown
    assert "controller-side CPU s per DaemonSet pod" in shown
