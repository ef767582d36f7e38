"""The HPA controller's replica arithmetic, case by case as upstream's
``replica_calculator_test.go`` states it: resource utilization up and down (pod and container
metrics), unready, hot-CPU, failed, deleted and missing pods, tolerances (the controller's and
per-HPA), Pods, Object and External metrics (per pod too), overflow caps, the pod grouping and
the request sums; and the quantity parser."""

from __future__ import annotations

import math
from collections.abc import Sequence
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from steward import parse_quantity_milli
from steward.controllers.hpa.replicas import (
    MAX_INT32,
    MAX_INT64,
    Calculator,
    PodMetric,
    PodMetrics,
    ReplicaError,
    Tolerances,
    calculate_requests,
    group_pods,
)

pytestmark = pytest.mark.unit

NOW = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
ZERO = datetime(1, 1, 1, tzinfo=UTC)
CALC = Calculator(
    tolerance=0.1,
    cpu_initialization_period=timedelta(minutes=2),
    delay_of_initial_readiness=timedelta(seconds=10),
)
DEFAULT = Tolerances(0.1, 0.1)
CONTAINERS = 2


def ts(when: datetime) -> str:
    return when.strftime("%Y-%m-%dT%H:%M:%SZ")


HOT = NOW
COOL = NOW - timedelta(minutes=3)


def make_pods(
    count: int,
    requests: Sequence[str] = (),
    readiness: Sequence[str] = (),
    phases: Sequence[str] = (),
    start_times: Sequence[datetime] = (),
    deleted: Sequence[bool] = (),
) -> list[dict[str, Any]]:
    """Pods test-pod-0.. as upstream's fake pod lister builds them: two containers
    (container1, container2), each requesting ``requests[i]`` of CPU."""
    pods = []
    for i in range(max(count, len(phases))):
        containers: list[dict[str, Any]] = [{"name": "container1"}, {"name": "container2"}]
        if i < len(requests):
            for c in containers:
                c["resources"] = {"requests": {"cpu": requests[i]}}
        pod: dict[str, Any] = {
            "metadata": {"name": f"test-pod-{i}", "namespace": "test-namespace"},
            "spec": {"containers": containers},
            "status": {
                "phase": phases[i] if phases else "Running",
                "startTime": ts(start_times[i] if start_times else ZERO),
                "conditions": [
                    {"type": "Ready", "status": readiness[i] if i < len(readiness) else "True"}
                ],
            },
        }
        if deleted and deleted[i]:
            pod["metadata"]["deletionTimestamp"] = ts(NOW)
        pods.append(pod)
    return pods


def usage(levels: Sequence[Sequence[int]], container: str | None = None) -> PodMetrics:
    """The resource metrics client's answer: per pod, the sum over its containers, or the
    named container's usage (a pod whose metrics lack it is left out)."""
    out: PodMetrics = {}
    for i, containers in enumerate(levels):
        if container is None:
            value = sum(containers)
        else:
            index = int(container.removeprefix("container")) - 1
            if index >= len(containers):
                continue
            value = containers[index]
        out[f"test-pod-{i}"] = PodMetric(ZERO, timedelta(minutes=1), value)
    return out


def pod_levels(*levels: int) -> list[list[int]]:
    return [[level] * CONTAINERS for level in levels]


def plain(*levels: int) -> PodMetrics:
    return {f"test-pod-{i}": PodMetric(ZERO, timedelta(0), v) for i, v in enumerate(levels)}


def resource(
    current: int,
    target: int,
    pods: list[dict[str, Any]],
    metrics: PodMetrics,
    container: str | None = None,
    tolerances: Tolerances = DEFAULT,
) -> tuple[int, int, int]:
    return CALC.resource_replicas(current, target, "cpu", pods, metrics, container, NOW, tolerances)


# --- resource utilization (TestReplicaCalcResourceScale) ----------------------------------


def test_resource_scale_up() -> None:
    pods = make_pods(3, ["1.0"] * 3)
    assert resource(3, 30, pods, usage(pod_levels(300, 500, 700))) == (5, 50, 2 * 500)


def test_resource_scale_up_container_metric() -> None:
    pods = make_pods(3, ["1.0"] * 3)
    metrics = usage([[1000, 300], [1000, 500], [1000, 700]], "container2")
    assert resource(3, 30, pods, metrics, "container2") == (5, 50, 500)


def test_resource_scale_up_unready_pod_scales_less() -> None:
    pods = make_pods(3, ["1.0"] * 3, readiness=["False", "True", "True"])
    assert resource(3, 30, pods, usage(pod_levels(300, 500, 700))) == (4, 60, 2 * 600)


def test_resource_scale_up_hot_cpu_container_scales_less() -> None:
    pods = make_pods(3, ["1.0"] * 3, start_times=[HOT, COOL, COOL])
    metrics = usage([[0, 300], [0, 500], [0, 700]], "container2")
    assert resource(3, 30, pods, metrics, "container2") == (4, 60, 600)


def test_resource_scale_up_hot_cpu_pod_scales_less() -> None:
    pods = make_pods(3, ["1.0"] * 3, start_times=[HOT, COOL, COOL])
    assert resource(3, 30, pods, usage(pod_levels(300, 500, 700))) == (4, 60, 2 * 600)


def test_resource_no_scale_unready_pods_ignored() -> None:
    pods = make_pods(3, ["1.0"] * 3, readiness=["True", "False", "False"])
    assert resource(3, 30, pods, usage(pod_levels(400, 500, 700))) == (3, 40, 2 * 400)


def test_resource_no_scale_hot_cpu_pods_ignored() -> None:
    pods = make_pods(
        3, ["1.0"] * 3, readiness=["True", "False", "False"], start_times=[COOL, HOT, HOT]
    )
    assert resource(3, 30, pods, usage(pod_levels(400, 500, 700))) == (3, 40, 2 * 400)


def test_resource_scale_up_failed_pods_ignored() -> None:
    pods = make_pods(
        2,
        ["1.0"] * 4,
        readiness=["True", "True", "False", "False"],
        phases=["Running", "Running", "Failed", "Failed"],
    )
    assert resource(2, 30, pods, usage(pod_levels(500, 700))) == (4, 60, 2 * 600)


def test_resource_scale_up_failed_pods_ignored_with_missing_container_metric() -> None:
    pods = make_pods(
        2,
        ["1.0"] * 4,
        readiness=["True", "True", "False", "False"],
        phases=["Running", "Running", "Failed", "Failed"],
    )
    metrics = usage([[1000, 500], [9000, 700], [1000], [9000]], "container2")
    assert resource(2, 30, pods, metrics, "container2") == (4, 60, 600)


def test_resource_scale_up_pods_being_deleted_are_ignored() -> None:
    pods = make_pods(
        2,
        ["1.0"] * 4,
        readiness=["True", "True", "False", "False"],
        phases=["Running"] * 4,
        deleted=[False, False, True, True],
    )
    assert resource(2, 30, pods, usage(pod_levels(500, 700))) == (4, 60, 2 * 600)


def test_resource_scale_down() -> None:
    pods = make_pods(5, ["1.0"] * 5)
    metrics = usage(pod_levels(100, 300, 500, 250, 250))
    assert resource(5, 50, pods, metrics) == (3, 28, 2 * 280)


def test_resource_scale_down_container_metric() -> None:
    pods = make_pods(5, ["1.0"] * 5)
    metrics = usage([[1000, 100], [1000, 300], [1000, 500], [1000, 250], [1000, 250]], "container2")
    assert resource(5, 50, pods, metrics, "container2") == (3, 28, 280)


def test_resource_scale_down_exclude_unready_pods() -> None:
    pods = make_pods(5, ["1.0"] * 5, readiness=["True", "True", "True", "False", "False"])
    metrics = usage(pod_levels(100, 300, 500, 250, 250))
    assert resource(5, 50, pods, metrics) == (2, 30, 2 * 300)


def test_resource_scale_down_exclude_unscheduled_pods() -> None:
    pods = make_pods(
        5,
        ["1.0"] * 5,
        readiness=["True", "False", "False", "False", "False"],
        phases=["Running", "Pending", "Pending", "Pending", "Pending"],
    )
    assert resource(5, 50, pods, usage(pod_levels(100))) == (1, 10, 2 * 100)


def test_resource_scale_down_ignore_hot_cpu_pods() -> None:
    pods = make_pods(5, ["1.0"] * 5, start_times=[COOL, COOL, COOL, HOT, HOT])
    metrics = usage(pod_levels(100, 300, 500, 250, 250))
    assert resource(5, 50, pods, metrics) == (2, 30, 2 * 300)


def test_resource_scale_down_failed_pods_ignored() -> None:
    pods = make_pods(
        5,
        ["1.0"] * 7,
        readiness=["True"] * 5 + ["False"] * 2,
        phases=["Running"] * 5 + ["Failed"] * 2,
    )
    metrics = usage(pod_levels(100, 300, 500, 250, 250))
    assert resource(5, 50, pods, metrics) == (3, 28, 2 * 280)


def test_resource_scale_down_still_running_pods_being_deleted_are_ignored() -> None:
    pods = make_pods(
        5,
        ["1.0"] * 7,
        readiness=["True"] * 5 + ["False"] * 2,
        phases=["Running"] * 7,
        deleted=[False] * 5 + [True] * 2,
    )
    metrics = usage([[1000, 100], [1000, 300], [1000, 500], [1000, 250], [1000, 250]], "container2")
    assert resource(5, 50, pods, metrics, "container2") == (3, 28, 280)


# --- resource errors, tolerance, missing metrics ------------------------------------------


def test_replica_calc_disjoint_resources_metrics() -> None:
    pods = make_pods(1, ["1.0"])
    metrics = {"an-older-pod-name": PodMetric(ZERO, timedelta(minutes=1), 200)}
    with pytest.raises(ReplicaError, match=r"^no metrics returned matched known pods$"):
        resource(1, 100, pods, metrics)


def test_replica_calc_empty_cpu_request() -> None:
    pods = make_pods(1, [])
    with pytest.raises(ReplicaError) as err:
        resource(1, 100, pods, usage(pod_levels(200)))
    assert str(err.value) == "missing request for cpu in container container1 of Pod test-pod-0"


def test_replica_calc_no_pods() -> None:
    with pytest.raises(ReplicaError) as err:
        resource(1, 100, [], usage(pod_levels(200)))
    assert str(err.value) == "no pods returned by selector while calculating replica count"


def test_replica_calc_all_pods_unready() -> None:
    pods = make_pods(2, ["1.0"] * 2, readiness=["False", "False"])
    with pytest.raises(ReplicaError) as err:
        resource(2, 50, pods, usage(pod_levels(100, 100)))
    assert str(err.value) == "did not receive metrics for targeted pods (pods might be unready)"


def test_replica_calc_tolerance() -> None:
    pods = make_pods(3, ["0.9", "1.0", "1.1"])
    assert resource(3, 100, pods, usage(pod_levels(1010, 1030, 1020))) == (3, 102, 2 * 1020)


def test_replica_calc_configurable_tolerance_outside_of_a_0_percent_tolerance() -> None:
    pods = make_pods(3, ["0.9", "1.0", "1.1"])
    got = resource(3, 100, pods, usage(pod_levels(909, 1010, 1111)), tolerances=Tolerances(0, 0))
    assert got == (4, 101, 2 * 1010)


def test_replica_calc_configurable_tolerance_within_a_200_percent_scale_up_tolerance() -> None:
    pods = make_pods(3, ["0.9", "1.0", "1.1"])
    metrics = usage(pod_levels(1890, 1910, 1900))
    assert resource(3, 100, pods, metrics, tolerances=Tolerances(0.1, 2.0)) == (3, 190, 2 * 1900)


def test_replica_calc_configurable_tolerance_outside_8_percent_scale_up_tolerance() -> None:
    pods = make_pods(3, ["0.9", "1.0", "1.1"])
    metrics = usage(pod_levels(1100, 1080, 1090))
    assert resource(3, 100, pods, metrics, tolerances=Tolerances(2.0, 0.08)) == (4, 109, 2 * 1090)


def test_replica_calc_configurable_tolerance_within_a_36_percent_scale_down_tolerance() -> None:
    pods = make_pods(3, ["0.9", "1.0", "1.1"])
    metrics = usage(pod_levels(660, 640, 650))
    assert resource(3, 100, pods, metrics, tolerances=Tolerances(0.36, 0.1)) == (3, 65, 2 * 650)


def test_replica_calc_configurable_tolerance_outside_a_34_percent_scale_down_tolerance() -> None:
    pods = make_pods(3, ["0.9", "1.0", "1.1"])
    metrics = usage(pod_levels(660, 640, 650))
    assert resource(3, 100, pods, metrics, tolerances=Tolerances(0.34, 0.1)) == (2, 65, 2 * 650)


def test_replica_calc_superfluous_metrics() -> None:
    pods = make_pods(4, ["1.0"] * 4)
    metrics = usage(pod_levels(4000, 9500, 3000, 7000, 3200, 2000))
    assert resource(4, 100, pods, metrics) == (24, 587, 2 * 5875)


def test_replica_calc_missing_metrics() -> None:
    pods = make_pods(4, ["1.0"] * 4)
    assert resource(4, 100, pods, usage(pod_levels(400, 95))) == (3, 24, 495)


def test_replica_calc_missing_metrics_no_change_eq() -> None:
    pods = make_pods(2, ["1.0"] * 2)
    assert resource(2, 100, pods, usage(pod_levels(1000))) == (2, 100, 2 * 1000)


def test_replica_calc_missing_metrics_no_change_gt() -> None:
    pods = make_pods(2, ["1.0"] * 2)
    assert resource(2, 100, pods, usage(pod_levels(1900))) == (2, 190, 2 * 1900)


def test_replica_calc_missing_metrics_no_change_lt() -> None:
    pods = make_pods(2, ["1.0"] * 2)
    assert resource(2, 100, pods, usage(pod_levels(600))) == (2, 60, 2 * 600)


def test_replica_calc_missing_metrics_unready_change() -> None:
    pods = make_pods(3, ["1.0"] * 3, readiness=["False", "True", "True"])
    assert resource(3, 50, pods, usage(pod_levels(100, 450))) == (3, 45, 2 * 450)


def test_replica_calc_missing_metrics_hot_cpu_no_change() -> None:
    pods = make_pods(3, ["1.0"] * 3, start_times=[HOT, COOL, COOL])
    assert resource(3, 50, pods, usage(pod_levels(100, 450))) == (3, 45, 2 * 450)


def test_replica_calc_missing_metrics_unready_scale_up() -> None:
    pods = make_pods(3, ["1.0"] * 3, readiness=["False", "True", "True"])
    assert resource(3, 50, pods, usage(pod_levels(100, 2000))) == (4, 200, 2 * 2000)


def test_replica_calc_missing_metrics_hot_cpu_scale_up() -> None:
    pods = make_pods(
        3, ["1.0"] * 3, readiness=["False", "True", "True"], start_times=[HOT, COOL, COOL]
    )
    assert resource(3, 50, pods, usage(pod_levels(100, 2000))) == (4, 200, 2 * 2000)


def test_replica_calc_missing_metrics_unready_scale_down() -> None:
    pods = make_pods(4, ["1.0"] * 4, readiness=["False", "True", "True", "True"])
    assert resource(4, 50, pods, usage(pod_levels(100, 100, 100))) == (3, 10, 2 * 100)


def test_replica_calc_missing_metrics_scale_down_target_over_100() -> None:
    pods = make_pods(4, ["1.0", "1.0", "2.0", "2.0"], readiness=["False", "True", "True", "True"])
    assert resource(4, 300, pods, usage(pod_levels(200, 100, 100))) == (2, 6, 2 * 100)


def test_replica_calc_during_rolling_update_with_max_surge() -> None:
    pods = make_pods(2, ["1.0"] * 3, phases=["Running"] * 3)
    assert resource(2, 50, pods, usage(pod_levels(100, 100))) == (2, 10, 2 * 100)


def test_replica_calc_computed_tolerance_alg_implementation() -> None:
    start_pods = 10
    used_total = start_pods * 150
    requested_total = 2 * used_total
    requested_to_used = float(requested_total // used_total)
    per_pod = requested_total // start_pods
    offsets = [100, -100, 10, -10, 2, -2, 1, -1, 0, 0]
    pods = make_pods(start_pods, [f"{per_pod + o}m" for o in offsets])
    metrics = usage(pod_levels(*([used_total // 10] * 10)))

    target = abs(1 / (requested_to_used * (1 - 0.1))) + 0.01
    ratio = float(used_total) / (float(requested_total) * target)
    expected = (math.ceil(ratio * start_pods), used_total * 100 // requested_total, 2 * 150)
    assert resource(start_pods, int(target * 100), pods, metrics) == expected

    target = abs(1 / (requested_to_used * (1 - 0.1))) + 0.004
    got = resource(start_pods, int(target * 100), pods, metrics)
    assert got == (start_pods, used_total * 100 // requested_total, 2 * 150)


# --- raw resource and Pods metrics ----------------------------------------------------------


def test_raw_resource_replicas_scale_up() -> None:
    pods = make_pods(3, ["1.0"] * 3)
    got = CALC.raw_resource_replicas(
        3, 400, "cpu", pods, usage(pod_levels(300, 500, 700)), None, NOW, DEFAULT
    )
    assert got == (8, 1000)


def test_replica_calc_scale_up_cm() -> None:
    pods = make_pods(3)
    assert CALC.metric_replicas(3, 15000, pods, plain(20000, 10000, 30000), NOW, DEFAULT) == (
        4,
        20000,
    )


def test_replica_calc_scale_up_cm_unready_hot_cpu_no_less_scale() -> None:
    pods = make_pods(3, readiness=["True", "True", "False"], start_times=[COOL, COOL, HOT])
    got = CALC.metric_replicas(3, 15000, pods, plain(50000, 10000, 30000), NOW, DEFAULT)
    assert got == (6, 30000)


def test_replica_calc_scale_up_cm_unready_hot_cpu_scale_would_scale_down() -> None:
    pods = make_pods(3, readiness=["False", "True", "False"], start_times=[HOT, COOL, HOT])
    got = CALC.metric_replicas(3, 15000, pods, plain(50000, 15000, 30000), NOW, DEFAULT)
    assert got == (7, 31666)


def test_replica_calc_scale_down_cm() -> None:
    pods = make_pods(5)
    got = CALC.metric_replicas(5, 20000, pods, plain(*[12000] * 5), NOW, DEFAULT)
    assert got == (3, 12000)


def test_replica_calc_tolerance_cm() -> None:
    pods = make_pods(3)
    got = CALC.metric_replicas(3, 20000, pods, plain(20000, 21000, 21000), NOW, DEFAULT)
    assert got == (3, 20666)


def test_replica_calc_configurable_tolerance_cm() -> None:
    pods = make_pods(3)
    tolerances = Tolerances(0.1, 0.01)
    got = CALC.metric_replicas(3, 20000, pods, plain(20000, 21000, 21000), NOW, tolerances)
    assert got == (4, 20666)


def test_plain_metric_replica_calc_missing_metrics_no_change_eq() -> None:
    pods = make_pods(5)
    got = CALC.metric_replicas(5, 20000, pods, plain(20000, 19000, 21000), NOW, DEFAULT)
    assert got == (5, 20000)


def test_replica_calc_during_rolling_update_with_max_surge_cm() -> None:
    pods = make_pods(2, phases=["Running"] * 3)
    got = CALC.metric_replicas(2, 17000, pods, plain(10000, 10000), NOW, DEFAULT)
    assert got == (2, 10000)


# --- Object metrics -------------------------------------------------------------------------


def test_replica_calc_scale_up_cm_object() -> None:
    assert CALC.object_replicas(3, 15000, 20000, make_pods(3), NOW, DEFAULT) == (4, 20000)


def test_replica_calc_scale_up_cm_object_ignores_unready_pods() -> None:
    pods = make_pods(3, readiness=["False", "True", "False"])
    assert CALC.object_replicas(3, 10000, 50000, pods, NOW, DEFAULT) == (5, 50000)


def test_replica_calc_scale_down_cm_object() -> None:
    assert CALC.object_replicas(5, 20000, 12000, make_pods(5), NOW, DEFAULT) == (3, 12000)


def test_replica_calc_tolerance_cm_object() -> None:
    assert CALC.object_replicas(3, 20000, 20666, make_pods(3), NOW, DEFAULT) == (3, 20666)


def test_replica_calc_configurable_tolerance_cm_object() -> None:
    got = CALC.object_replicas(3, 20000, 20666, make_pods(3), NOW, Tolerances(0.1, 0.01))
    assert got == (4, 20666)


def test_replica_calc_scale_up_overflow() -> None:
    got = CALC.object_replicas(3, 1, MAX_INT64, make_pods(3), NOW, DEFAULT)
    assert got == (MAX_INT32, MAX_INT64)


def test_object_replicas_from_zero_ignore_pods_and_tolerance() -> None:
    assert CALC.object_replicas(0, 10000, 10500, [], NOW, DEFAULT) == (2, 10500)


def test_object_replicas_no_pods() -> None:
    with pytest.raises(ReplicaError) as err:
        CALC.object_replicas(3, 10000, 50000, [], NOW, DEFAULT)
    assert str(err.value) == (
        "unable to calculate ready pods: "
        "no pods returned by selector while calculating replica count"
    )


def test_replica_calc_scale_up_cm_per_pod_object() -> None:
    assert CALC.object_per_pod_replicas(3, 5000, 20000, DEFAULT) == (4, 6667)


def test_replica_calc_scale_down_per_pod_cm_object() -> None:
    assert CALC.object_per_pod_replicas(5, 2000, 6000, DEFAULT) == (3, 1200)


def test_replica_calc_tolerance_per_pod_cm_object() -> None:
    assert CALC.object_per_pod_replicas(4, 5000, 20166, DEFAULT) == (4, 5042)


def test_replica_calc_configurable_tolerance_per_pod_cm_object() -> None:
    assert CALC.object_per_pod_replicas(4, 5000, 20208, Tolerances(0.1, 0.01)) == (5, 5052)


# --- External metrics -----------------------------------------------------------------------


def test_replica_calc_scale_up_cm_external_ignores_unready_pods() -> None:
    pods = make_pods(3, readiness=["False", "True", "False"])
    assert CALC.external_replicas(3, 4400, [8600], pods, NOW, DEFAULT) == (2, 8600)


def test_replica_calc_scale_down_cm_external() -> None:
    assert CALC.external_replicas(5, 14334, [8600], make_pods(5), NOW, DEFAULT) == (3, 8600)


def test_replica_calc_tolerance_cm_external() -> None:
    assert CALC.external_replicas(3, 8888, [8600], make_pods(3), NOW, DEFAULT) == (3, 8600)


def test_replica_calc_configurable_tolerance_cm_external() -> None:
    got = CALC.external_replicas(3, 8800, [8900], make_pods(3), NOW, Tolerances(0.1, 0.01))
    assert got == (4, 8900)


def test_replica_calc_external_metric_usage_overflow() -> None:
    values = [MAX_INT64 // 2 + 1, MAX_INT64 // 2 + 1]
    got = CALC.external_replicas(3, MAX_INT64, values, make_pods(3), NOW, DEFAULT)
    assert got == (3, MAX_INT64)


def test_external_replicas_sum_values() -> None:
    got = CALC.external_replicas(2, 1000, [1500, 1500, 1000], make_pods(2), NOW, DEFAULT)
    assert got == (8, 4000)


def test_replica_calc_scale_up_per_pod_cm_external() -> None:
    assert CALC.external_per_pod_replicas(3, 2150, [8600], DEFAULT) == (4, 2867)


def test_replica_calc_scale_down_per_pod_cm_external() -> None:
    assert CALC.external_per_pod_replicas(5, 2867, [8600], DEFAULT) == (3, 1720)


def test_replica_calc_tolerance_per_pod_cm_external() -> None:
    assert CALC.external_per_pod_replicas(3, 2900, [8600], DEFAULT) == (3, 2867)


def test_replica_calc_configurable_tolerance_per_pod_cm_external() -> None:
    assert CALC.external_per_pod_replicas(3, 2800, [8600], Tolerances(0.1, 0.01)) == (4, 2867)


def test_external_per_pod_metric_replica_overflow() -> None:
    assert CALC.external_per_pod_replicas(1, 1, [MAX_INT64], DEFAULT) == (MAX_INT32, MAX_INT64)


def test_external_per_pod_metric_usage_overflow() -> None:
    assert CALC.external_per_pod_replicas(1, MAX_INT64, [MAX_INT64], DEFAULT) == (1, MAX_INT64)


# --- groupPods (TestGroupPods) --------------------------------------------------------------


def _pod(
    name: str,
    phase: str = "Succeeded",
    start: datetime | None = None,
    ready: str | None = None,
    transition: datetime | None = None,
    deleted: bool = False,
) -> dict[str, Any]:
    status: dict[str, Any] = {"phase": phase}
    if start is not None:
        status["startTime"] = ts(start)
    if ready is not None:
        condition: dict[str, Any] = {"type": "Ready", "status": ready}
        if transition is not None:
            condition["lastTransitionTime"] = ts(transition)
        status["conditions"] = [condition]
    meta: dict[str, Any] = {"name": name}
    if deleted:
        meta["deletionTimestamp"] = ts(datetime(1970, 1, 1, 0, 0, 1, tzinfo=UTC))
    return {"metadata": meta, "status": status}


def _metric(timestamp: datetime = ZERO, window: timedelta = timedelta(0)) -> PodMetric:
    return PodMetric(timestamp, window, 1)


def _group(
    pods: list[dict[str, Any]], metrics: PodMetrics, resource: str = "cpu"
) -> tuple[int, set[str], set[str], set[str]]:
    g = group_pods(pods, metrics, resource, timedelta(minutes=2), timedelta(seconds=10), NOW)
    return g.ready_count, set(g.unready), set(g.missing), set(g.ignored)


def test_group_pods_void() -> None:
    assert _group([], {}) == (0, set(), set(), set())


def test_group_pods_count_in_a_ready_pod_memory() -> None:
    pods = [_pod("bentham")]
    metrics = {"bentham": _metric(NOW, timedelta(minutes=1))}
    assert _group(pods, metrics, "memory") == (1, set(), set(), set())


def test_group_pods_unready_a_pod_without_ready_condition_cpu() -> None:
    pods = [_pod("lucretius", start=NOW)]
    assert _group(pods, {"lucretius": _metric()}) == (0, {"lucretius"}, set(), set())


def test_group_pods_count_in_a_ready_pod_with_fresh_metrics_during_initialization_period() -> None:
    pods = [
        _pod(
            "bentham",
            start=NOW - timedelta(minutes=1),
            ready="True",
            transition=NOW - timedelta(seconds=30),
        )
    ]
    metrics = {"bentham": _metric(NOW, timedelta(seconds=30))}
    assert _group(pods, metrics) == (1, set(), set(), set())


def test_group_pods_unready_a_ready_pod_without_fresh_metrics_during_initialization() -> None:
    pods = [
        _pod(
            "bentham",
            start=NOW - timedelta(minutes=1),
            ready="True",
            transition=NOW - timedelta(seconds=30),
        )
    ]
    metrics = {"bentham": _metric(NOW, timedelta(seconds=60))}
    assert _group(pods, metrics) == (0, {"bentham"}, set(), set())


def test_group_pods_unready_an_unready_pod_during_initialization_period() -> None:
    pods = [
        _pod(
            "lucretius",
            start=NOW - timedelta(minutes=10),
            ready="False",
            transition=NOW - timedelta(minutes=9, seconds=54),
        )
    ]
    assert _group(pods, {"lucretius": _metric()}) == (0, {"lucretius"}, set(), set())


def test_group_pods_count_in_a_ready_pod_without_fresh_metrics_after_initialization() -> None:
    pods = [
        _pod(
            "bentham",
            start=NOW - timedelta(minutes=3),
            ready="True",
            transition=NOW - timedelta(minutes=3),
        )
    ]
    metrics = {"bentham": _metric(NOW - timedelta(minutes=2), timedelta(minutes=1))}
    assert _group(pods, metrics) == (1, set(), set(), set())


def test_group_pods_count_in_an_unready_pod_that_was_ready_after_initialization() -> None:
    pods = [
        _pod(
            "lucretius",
            start=NOW - timedelta(minutes=10),
            ready="False",
            transition=NOW - timedelta(minutes=9),
        )
    ]
    assert _group(pods, {"lucretius": _metric()}) == (1, set(), set(), set())


def test_group_pods_unready_pod_that_has_never_been_ready_after_initialization() -> None:
    pods = [
        _pod(
            "lucretius",
            start=NOW - timedelta(minutes=10),
            ready="False",
            transition=NOW - timedelta(minutes=9, seconds=50),
        )
    ]
    assert _group(pods, {"lucretius": _metric()}) == (1, set(), set(), set())


def test_group_pods_a_missing_pod() -> None:
    pods = [_pod("epicurus", start=NOW - timedelta(minutes=3))]
    assert _group(pods, {}) == (0, set(), {"epicurus"}, set())


def test_group_pods_several_pods() -> None:
    pods = [
        _pod("lucretius", start=NOW),
        _pod(
            "niccolo",
            start=NOW - timedelta(minutes=3),
            ready="True",
            transition=NOW - timedelta(minutes=3),
        ),
        _pod("epicurus", start=NOW - timedelta(minutes=3)),
    ]
    metrics = {"lucretius": _metric(), "niccolo": _metric()}
    assert _group(pods, metrics) == (1, {"lucretius"}, {"epicurus"}, set())


def test_group_pods_pending_pods_are_unreadied() -> None:
    assert _group([_pod("unscheduled", phase="Pending")], {}) == (0, {"unscheduled"}, set(), set())


def test_group_pods_ignore_pods_with_deletion_timestamps() -> None:
    pods = [_pod("deleted", phase="Pending", deleted=True)]
    assert _group(pods, {"deleted": _metric()}) == (0, set(), set(), {"deleted"})


def test_group_pods_ignore_pods_in_a_failed_state() -> None:
    pods = [_pod("failed", phase="Failed")]
    assert _group(pods, {"failed": _metric()}) == (0, set(), set(), {"failed"})


# --- calculateRequests (TestCalculateRequests) ----------------------------------------------


def _requests_pod(
    containers: list[dict[str, Any]],
    init: list[dict[str, Any]] | None = None,
    pod_requests: dict[str, str] | None = None,
    overhead: dict[str, str] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"containers": containers}
    if init is not None:
        spec["initContainers"] = init
    if pod_requests is not None:
        spec["resources"] = {"requests": pod_requests}
    if overhead is not None:
        spec["overhead"] = overhead
    return {"metadata": {"name": "test-pod"}, "spec": spec}


def _c(name: str, cpu: str | None = None, restart: str | None = None) -> dict[str, Any]:
    c: dict[str, Any] = {"name": name}
    if cpu is not None:
        c["resources"] = {"requests": {"cpu": cpu}}
    if restart is not None:
        c["restartPolicy"] = restart
    return c


TWO = [_c("container1", "100m"), _c("container2", "50m")]


def test_calculate_requests_void() -> None:
    assert calculate_requests([], None, "cpu") == {}


def test_calculate_requests_sum_container_requests() -> None:
    assert calculate_requests([_requests_pod(TWO)], None, "cpu") == {"test-pod": 150}


def test_calculate_requests_pod_level_resources_override_container_requests() -> None:
    pod = _requests_pod(TWO, pod_requests={"cpu": "800m"})
    assert calculate_requests([pod], None, "cpu") == {"test-pod": 800}


def test_calculate_requests_fail_if_a_container_is_missing_requests() -> None:
    pod = _requests_pod([_c("container1"), _c("container2", "50m")])
    with pytest.raises(ReplicaError) as err:
        calculate_requests([pod], None, "cpu")
    assert str(err.value) == "missing request for cpu in container container1 of Pod test-pod"


def test_calculate_requests_pod_level_resources_override_missing_container_requests() -> None:
    pod = _requests_pod([_c("container1"), _c("container2", "50m")], pod_requests={"cpu": "800m"})
    assert calculate_requests([pod], None, "cpu") == {"test-pod": 800}


def test_calculate_requests_container_only_that_container() -> None:
    assert calculate_requests([_requests_pod(TWO)], "container1", "cpu") == {"test-pod": 100}


def test_calculate_requests_container_ignores_pod_level_requests() -> None:
    pod = _requests_pod(TWO, pod_requests={"cpu": "800m"})
    assert calculate_requests([pod], "container1", "cpu") == {"test-pod": 100}


def test_calculate_requests_pod_with_restartable_init_containers() -> None:
    pod = _requests_pod(
        [_c("container1", "100m")],
        init=[_c("init-container1", "20m"), _c("restartable-container1", "50m", "Always")],
    )
    assert calculate_requests([pod], None, "cpu") == {"test-pod": 150}


def test_calculate_pod_requests_from_containers_non_existent_container() -> None:
    pod = _requests_pod([_c("container1", "100m")])
    with pytest.raises(ReplicaError) as err:
        calculate_requests([pod], "non-existent-container", "cpu")
    assert str(err.value) == "container non-existent-container not found in Pod test-pod"


def test_calculate_requests_pod_level_other_resource_uses_containers_and_overhead() -> None:
    pod = _requests_pod(
        [_c("container1", "100m")],
        init=[_c("init", "500m"), _c("sidecar", "50m", "Always")],
        pod_requests={"memory": "1Gi"},
        overhead={"cpu": "10m"},
    )
    assert calculate_requests([pod], None, "cpu") == {"test-pod": 510}


def test_calculate_requests_pod_level_missing_request() -> None:
    pod = _requests_pod([_c("container1")], pod_requests={"memory": "1Gi"})
    with pytest.raises(ReplicaError) as err:
        calculate_requests([pod], None, "cpu")
    assert str(err.value) == "missing pod-level request for cpu in Pod test-pod"


# --- tolerances and quantities --------------------------------------------------------------


def test_tolerances_within_is_inclusive() -> None:
    t = Tolerances(scale_down=0.25, scale_up=0.5)
    assert t.within(0.75)
    assert t.within(1.5)
    assert not t.within(0.74)
    assert not t.within(1.51)


def test_tolerances_of_hpa() -> None:
    hpa = {"spec": {"behavior": {"scaleUp": {"tolerance": "50m"}, "scaleDown": {"tolerance": 0.2}}}}
    assert Tolerances.of(hpa, 0.1) == Tolerances(scale_down=0.2, scale_up=0.05)
    assert Tolerances.of({"spec": {}}, 0.3) == Tolerances(0.3, 0.3)
    assert Tolerances.of({"spec": {"behavior": {"scaleUp": {"tolerance": "0.01"}}}}) == Tolerances(
        0.1, 0.01
    )
    assert CALC.tolerances({"spec": {"behavior": {"scaleDown": {"tolerance": "1"}}}}) == Tolerances(
        1.0, 0.1
    )


@pytest.mark.parametrize(
    ("text", "milli"),
    [
        ("1", 1000),
        ("1.0", 1000),
        ("0.9", 900),
        ("250m", 250),
        ("1.5", 1500),
        (".5", 500),
        ("100u", 1),
        ("1n", 1),
        ("1500n", 1),
        ("2k", 2_000_000),
        ("1M", 10**9),
        ("1G", 10**12),
        ("1T", 10**15),
        ("1P", 10**18),
        ("1E", 10**21),
        ("1Ki", 1024_000),
        ("1.5Mi", 1572864_000),
        ("1Gi", 2**30 * 1000),
        ("1Ti", 2**40 * 1000),
        ("1Pi", 2**50 * 1000),
        ("1Ei", 2**60 * 1000),
        ("1e3", 1_000_000),
        ("1E-3", 1),
        ("12e-1", 1200),
        ("+5", 5000),
        ("-250m", -250),
        (3, 3000),
        (0.25, 250),
    ],
)
def test_parse_quantity_milli(text: str | int | float, milli: int) -> None:
    assert parse_quantity_milli(text) == milli


@pytest.mark.parametrize("text", ["", "abc", "1x", "1 Gi", "1e", "1.2.3", "--1", "Mi"])
def test_parse_quantity_milli_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="not a quantity"):
        parse_quantity_milli(text)
