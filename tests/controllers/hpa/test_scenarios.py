"""HPA scenarios (upstream's HPA e2e and integration cases: scale up on CPU, tolerance,
scale-down stabilization, behavior policies, scale up to min, scaling disabled at zero
and minReplicas 0 without an Object or External metric refused, ambiguous selectors,
missing requests, an External metric scaling to zero and back, the largest of a Pods and
an Object metric winning), each run under Steward's controller and under upstream's at
once, fed by real metrics.

A scenario is one function of a :class:`~.conftest.Side`: it makes a Deployment whose
pods kwok runs, sets what they use (a total CPU load spread evenly over the pods, as a
load balancer would, through the pod annotations kwok reads), makes an HPA, and waits
for the target's replica count that upstream's HPA arrives at, checking on the way as
upstream's tests do. At each checkpoint both sides wait for each other, then the
differential: their HPAs must settle into the same state, compared field by field —
desired and current replicas, the target's scale, the conditions (type, status, reason,
message, with pod names taken out) and the current metrics. A state is read repeatedly
until the two sides agree or :data:`SETTLE` passes, since each side syncs on its own
clock.

The current values of Pods, Object and External metrics, which the test sets, must be
equal; those of Resource (CPU) metrics only close (:data:`MEASURED_SLACK`): each side's
metrics-server computes CPU rates from its own scrapes, so they differ by a few
millicores.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import json
import re
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from steward.cluster import usage
from steward.cluster.errors import ClusterError
from steward.kube import ApiStatusError, ConflictError, NotFoundError
from tests.controllers.hpa.conftest import Side

pytestmark = [pytest.mark.integration]

WITHIN = 150.0
"""Seconds a scenario's check may take on a side (several 15 s syncs and 10 s scrapes)."""
SETTLE = 60.0
"""Seconds the two sides may take to agree at a checkpoint (four sync periods)."""
MEASURED_SLACK = (Decimal(2), Decimal("0.05"))
"""How far apart the sides' values of a Resource metric may be: 2 (millicores, or
percent of the request) or 5 % of the larger, whichever is more (see :func:`_current`)."""
MEET = WITHIN * 4
"""Seconds a side waits at a checkpoint for the other one."""
CPU_USAGE = "steward.io/cpu-usage"
"""The pod annotation kwok's simulated usage reads (deploy/kwok/metrics.yaml)."""
APP = "app"


def deployment(replicas: int = 1, *, requests: bool = True) -> dict[str, Any]:
    """A Deployment of ``replicas`` pods asking 100m CPU each (or nothing)."""
    container: dict[str, Any] = {"name": "c", "image": "busybox"}
    if requests:
        container["resources"] = {"requests": {"cpu": "100m", "memory": "64Mi"}}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": APP},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"app": APP}},
            "template": {
                "metadata": {"labels": {"app": APP}},
                "spec": {"containers": [container], "terminationGracePeriodSeconds": 0},
            },
        },
    }


def hpa(
    name: str = APP,
    *,
    min_replicas: int | None = 1,
    max_replicas: int = 10,
    utilization: int = 50,
    behavior: dict[str, Any] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "scaleTargetRef": {"apiVersion": "apps/v1", "kind": "Deployment", "name": APP},
        "maxReplicas": max_replicas,
        "metrics": [
            {
                "type": "Resource",
                "resource": {
                    "name": "cpu",
                    "target": {"type": "Utilization", "averageUtilization": utilization},
                },
            }
        ],
    }
    if min_replicas is not None:
        spec["minReplicas"] = min_replicas
    if behavior is not None:
        spec["behavior"] = behavior
    return {
        "apiVersion": "autoscaling/v2",
        "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": name},
        "spec": spec,
    }


# Load and checks ------------------------------------------------------------------------
def spread_load(side: Side, total_milli: int) -> int:
    """Set each running pod's CPU use to an even share of ``total_milli``; the number of
    pods sharing it."""
    pods = [p for p in side.pods(APP) if (p.get("status") or {}).get("phase") == "Running"]
    if not pods:
        return 0
    share = f"{max(total_milli // len(pods), 1)}m"
    for pod in pods:
        if (pod["metadata"].get("annotations") or {}).get(CPU_USAGE) == share:
            continue
        try:
            side.kube.request(
                "PATCH",
                f"{side.pods_path}/{pod['metadata']['name']}",
                {"metadata": {"annotations": {CPU_USAGE: share}}},
                content_type="application/merge-patch+json",
            )
        except (NotFoundError, ConflictError):
            continue
    return len(pods)


def wait_for(
    side: Side, check: Callable[[], Any], what: str, load: int | None = None, within: float = WITHIN
) -> Any:
    """Poll ``check`` until it holds, spreading ``load`` over the pods meanwhile."""
    deadline = time.monotonic() + within
    last: Any = None
    while True:
        if load is not None:
            spread_load(side, load)
        last = check()
        if last:
            return last
        if time.monotonic() > deadline:
            state = json.dumps(snapshot(side), indent=1, default=str)
            raise AssertionError(f"{side.name}: timed out waiting for {what}; HPA: {state}")
        time.sleep(1.0)


def scaled_to(side: Side, replicas: int, load: int | None = None, within: float = WITHIN) -> None:
    """The target's scale reaches ``replicas`` and that many pods run."""

    def check() -> bool:
        running = [p for p in side.pods(APP) if (p.get("status") or {}).get("phase") == "Running"]
        return side.scale(APP) == replicas and len(running) == replicas

    wait_for(side, check, f"{replicas} replicas running", load, within)


def condition(side: Side, name: str, ctype: str) -> dict[str, Any]:
    conditions = (side.hpa(name).get("status") or {}).get("conditions") or ()
    return next((c for c in conditions if c.get("type") == ctype), {})


def has_condition(
    side: Side, ctype: str, status: str, reason: str, name: str = APP, load: int | None = None
) -> None:
    def check() -> bool:
        found = condition(side, name, ctype)
        return found.get("status") == status and found.get("reason") == reason

    wait_for(side, check, f"{ctype}={status} ({reason}) on HPA {name}", load)


def holds(side: Side, replicas: int, seconds: float, load: int) -> None:
    """The target stays at ``replicas`` for ``seconds`` (upstream's
    ``CheckThatDeploymentHasReplicasFor``)."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        spread_load(side, load)
        got = side.scale(APP)
        assert got == replicas, f"{side.name}: scaled to {got} while it should hold {replicas}"
        time.sleep(1.0)


# The differential ----------------------------------------------------------------------
_POD = re.compile(rf"\b{APP}-[a-z0-9]+-[a-z0-9]+\b")
_EXAMPLES = re.compile(r"\(e\.g\. \[([^]]*)\]\)")


def _message(side: Side, text: str) -> str:
    """A condition's message with what differs between the planes taken out: pod names,
    the namespace, and the order of the HPAs an ambiguous selector names (a Go map's)."""
    text = _POD.sub("<pod>", text.replace(side.ns, "<ns>"))
    return _EXAMPLES.sub(lambda m: f"(e.g. [{' '.join(sorted(m.group(1).split()))}])", text)


_SOURCES = {
    "Resource": "resource",
    "ContainerResource": "containerResource",
    "Pods": "pods",
    "Object": "object",
    "External": "external",
}


@dataclass(frozen=True, eq=False)
class Measured:
    """A value of a Resource metric, in millicores or percent: equal to the other side's
    when within :data:`MEASURED_SLACK` (see :func:`_current`)."""

    value: Decimal

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Measured):
            return NotImplemented
        apart = abs(self.value - other.value)
        return apart <= max(MEASURED_SLACK[0], MEASURED_SLACK[1] * max(self.value, other.value))

    def __str__(self) -> str:
        return f"~{self.value.normalize():f}"


def _current(metric: dict[str, Any]) -> dict[str, Any]:
    """A current metric as the sides must agree on it: its type, what it measures and its
    values, each a number (quantities in whatever form a side wrote them).

    The values of Pods, Object and External metrics come from the metrics adapter, which
    serves what the test set: they must be equal. Those of a Resource metric come from
    each plane's metrics-server, whose CPU rates are taken over its own scrapes and so
    differ by a millicore or two (a percent of the request or two) at the same load:
    they must be equal within :data:`MEASURED_SLACK`: an error of the calculation by a
    factor (the requests, the pods counted, the units) shows, one of a few percent not.
    """
    mtype = str(metric.get("type"))
    source = metric.get(_SOURCES.get(mtype, "")) or {}
    current = source.get("current") or {}
    values: dict[str, Any] = {}
    for key, value in current.items():
        if mtype not in ("Resource", "ContainerResource"):
            values[key] = usage.quantity(str(value))
        elif key == "averageUtilization":
            values[key] = Measured(Decimal(value))
        else:
            values[key] = Measured(usage.quantity(str(value)) * 1000)
    return {
        "type": mtype,
        "name": source.get("name"),
        "container": source.get("container"),
        "metric": source.get("metric"),
        "describedObject": source.get("describedObject"),
        "current": values,
    }


def snapshot(side: Side, names: tuple[str, ...] = (APP,)) -> dict[str, Any]:
    """What the two sides must agree on (see the module docs)."""
    out: dict[str, Any] = {}
    with_scale = True
    try:
        scale = side.scale(APP)
    except NotFoundError:
        with_scale, scale = False, 0
    for name in names:
        try:
            found = side.hpa(name)
        except NotFoundError:
            out[name] = None
            continue
        status = found.get("status") or {}
        out[name] = {
            "desiredReplicas": status.get("desiredReplicas"),
            "currentReplicas": status.get("currentReplicas"),
            "scaled": bool(status.get("lastScaleTime")),
            "conditions": sorted(
                (
                    c.get("type"),
                    c.get("status"),
                    c.get("reason"),
                    _message(side, c.get("message", "")),
                )
                for c in status.get("conditions") or ()
            ),
            "metrics": [_current(m) for m in status.get("currentMetrics") or ()],
        }
    if with_scale:
        out["scale"] = scale
    return out


def shows_load(side: Side, names: tuple[str, ...], load: int) -> bool:
    """Each CPU Resource metric of the HPAs ``names`` shows the share of ``load`` that
    :func:`spread_load` gives each running pod (as a :class:`Measured` value).

    Until then the metrics are on their way (a new pod not yet scraped twice, a changed
    share not yet scraped): each side's metrics-server gets there at its own time, and a
    wrong value of one side could meet the other's value in passing.
    """
    running = [p for p in side.pods(APP) if (p.get("status") or {}).get("phase") == "Running"]
    if not running:
        return True
    share = Measured(Decimal(max(load // len(running), 1)))
    for name in names:
        for metric in (side.hpa(name).get("status") or {}).get("currentMetrics") or ():
            found = _current(metric)
            cpu = found["type"] == "Resource" and found["name"] == "cpu"
            if cpu and found["current"].get("averageValue", share) != share:
                return False
    return True


class Pair:
    """Both sides of a run: their checkpoints meet, then the HPAs must settle alike."""

    def __init__(
        self, steward: Side, upstream: Side, names: tuple[str, ...], timeout: float = MEET
    ) -> None:
        self.sides = {"steward": steward, "upstream": upstream}
        self.names = names
        self.barrier = threading.Barrier(2, timeout=timeout)
        self.failure = ""
        self.load: dict[str, int | None] = {"steward": None, "upstream": None}

    def checkpoint(self, side: Side, what: str, load: int | None = None) -> None:
        """Wait until this side's HPAs show ``load`` (:func:`shows_load`) and for the other
        side; then compare (see the module docs)."""
        self.load[side.name] = load
        if load is not None:
            what_shows = f"the CPU metric at a share of {load}m"
            wait_for(side, lambda: shows_load(side, self.names, load), what_shows, load)
        self.barrier.wait()
        if side.name == "upstream":
            self.failure = self._compare(what)
        self.barrier.wait()
        if self.failure:
            raise AssertionError(self.failure)

    def _compare(self, what: str) -> str:
        deadline = time.monotonic() + SETTLE
        while True:
            states = {}
            for name, side in self.sides.items():
                load = self.load[name]
                if load is not None:
                    spread_load(side, load)
                states[name] = snapshot(side, self.names)
            if states["steward"] == states["upstream"]:
                return ""
            if time.monotonic() > deadline:
                return f"at {what!r} the sides differ:\n{json.dumps(states, indent=1, default=str)}"
            time.sleep(1.0)


Scenario = Callable[[Side, Pair], None]


def run_both(
    steward: Side,
    upstream: Side,
    scenario: Scenario,
    names: tuple[str, ...] = (APP,),
    timeout: float = MEET,
) -> None:
    """Run ``scenario`` on both sides at once; fail with the first side's failure.

    A side that fails breaks the barrier, so the other one stops at its next checkpoint
    with a :class:`threading.BrokenBarrierError`: that one is no failure of its own. A
    broken barrier with no real failure on the other side is one, though: the sides did
    not meet within ``timeout`` (one of them stuck, or finished with fewer checkpoints).
    """
    pair = Pair(steward, upstream, names, timeout)

    def run(side: Side) -> None:
        try:
            scenario(side, pair)
        except BaseException:
            pair.barrier.abort()  # the other side stops at its next checkpoint
            raise

    errors: dict[str, BaseException | None] = {}
    with concurrent.futures.ThreadPoolExecutor(2) as pool:
        runs = {s.name: pool.submit(run, s) for s in (upstream, steward)}
        for n, future in runs.items():
            errors[n] = future.exception()
    # Upstream's failure first: it says the scenario's checks are wrong, not Steward.
    for n in ("upstream", "steward"):
        failed = errors[n]
        if failed is not None and not isinstance(failed, threading.BrokenBarrierError):
            raise AssertionError(f"the scenario failed on the {n} side: {failed}") from failed
    stuck = [n for n in ("upstream", "steward") if errors[n] is not None]
    if stuck:
        finished = [n for n in ("upstream", "steward") if errors[n] is None]
        raise AssertionError(
            f"the sides did not meet at a checkpoint within {timeout:g} s: the barrier broke "
            f"on the {' and '.join(stuck)} side"
            + (f" while the {finished[0]} side finished" if finished else "")
            + " and neither side failed otherwise"
        ) from errors[stuck[0]]


REPORTED_BY = {
    "steward": "steward.io/horizontal-pod-autoscaler",
    "upstream": "horizontal-pod-autoscaler",
}
"""Who each side's rescale Events name as their reporting component."""


def shown_as_users_see_it(side: Side, name: str = APP) -> None:
    """What a user looks at: ``kubectl get hpa`` shows the CPU utilization against its
    target (not ``<unknown>``), and the rescale Events name the side's controller."""
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "kubectl"),
            "--kubeconfig",
            str(side.plane.kubeconfig),
            "get",
            "hpa",
            name,
            "-n",
            side.ns,
            "-o",
            "wide",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    table = done.stdout
    assert re.search(r"cpu: \d+%/50%", table) and "<unknown>" not in table, table
    rescales = [e for e in side.events(name) if e.get("reason") == "SuccessfulRescale"]
    assert rescales, f"{side.name}: no SuccessfulRescale Event"
    assert {e.get("reportingComponent") for e in rescales} == {REPORTED_BY[side.name]}, rescales


# Scenarios --------------------------------------------------------------------------------
def test_scales_up_on_cpu_holds_within_tolerance_and_scales_down_after_stabilization(
    steward: Side, upstream: Side
) -> None:
    """One pod at four times its target: up to four (the scale-up limit without behavior
    is max(2 * current, 4)), as ``kubectl get hpa`` and the Events show it; a load 5 % over
    target holds them (tolerance 0.1); the load gone, the recommendation stays up for the
    10 s window, then down to one."""

    def scenario(side: Side, pair: Pair) -> None:
        side.kube.request("POST", side.deployments, deployment(1))
        scaled_to(side, 1)
        behavior = {"scaleDown": {"stabilizationWindowSeconds": 10}}
        side.kube.request("POST", side.hpas, hpa(behavior=behavior))
        scaled_to(side, 4, load=200)
        pair.checkpoint(side, "scaled up to four", load=200)
        shown_as_users_see_it(side)
        holds(side, 4, 10.0, load=210)
        pair.checkpoint(side, "held within tolerance", load=210)
        scaled_to(side, 1, load=20)
        pair.checkpoint(side, "scaled down to one", load=20)

    run_both(steward, upstream, scenario)


def test_behavior_pods_policy_limits_the_scale_up_rate(steward: Side, upstream: Side) -> None:
    """A scale-up policy of one pod per minute: a load asking for eight pods adds one,
    ScalingLimited=True (ScaleUpLimit) while the period lasts."""

    def scenario(side: Side, pair: Pair) -> None:
        side.kube.request("POST", side.deployments, deployment(1))
        scaled_to(side, 1)
        behavior = {
            "scaleUp": {
                "stabilizationWindowSeconds": 0,
                "policies": [{"type": "Pods", "value": 1, "periodSeconds": 60}],
            }
        }
        side.kube.request("POST", side.hpas, hpa(behavior=behavior))
        scaled_to(side, 2, load=400)
        has_condition(side, "ScalingLimited", "True", "ScaleUpLimit", load=400)
        pair.checkpoint(side, "one pod added, then limited", load=400)

    run_both(steward, upstream, scenario)


def test_scales_up_to_min_and_is_disabled_at_zero(steward: Side, upstream: Side) -> None:
    """Below minReplicas the target is raised to it whatever the metrics say; a target
    scaled to zero by hand switches autoscaling off (ScalingActive=False,
    ScalingDisabled); minReplicas 0 over a CPU metric alone is refused by the API server
    (scaling to zero needs an Object or External metric)."""

    def scenario(side: Side, pair: Pair) -> None:
        side.kube.request("POST", side.deployments, deployment(1))
        scaled_to(side, 1)
        with pytest.raises(ApiStatusError) as refused:
            side.kube.request("POST", side.hpas, hpa("zero", min_replicas=0))
        assert refused.value.status == 422, f"{side.name}: minReplicas 0: {refused.value}"
        side.kube.request("POST", side.hpas, hpa(min_replicas=3))
        scaled_to(side, 3, load=30)
        pair.checkpoint(side, "raised to minReplicas", load=30)
        side.set_scale(APP, 0)
        has_condition(side, "ScalingActive", "False", "ScalingDisabled")
        holds(side, 0, 10.0, load=0)
        pair.checkpoint(side, "disabled at zero")

    run_both(steward, upstream, scenario)


def test_two_hpas_over_the_same_pods_are_ambiguous(steward: Side, upstream: Side) -> None:
    """Two HPAs whose targets' selectors take the same pods: neither scales
    (ScalingActive=False, AmbiguousSelector)."""

    def scenario(side: Side, pair: Pair) -> None:
        side.kube.request("POST", side.deployments, deployment(2))
        scaled_to(side, 2)
        side.kube.request("POST", side.hpas, hpa("first", min_replicas=2))
        side.kube.request("POST", side.hpas, hpa("second", min_replicas=2))
        for name in ("first", "second"):
            has_condition(side, "ScalingActive", "False", "AmbiguousSelector", name, load=100)
        holds(side, 2, 10.0, load=100)
        pair.checkpoint(side, "both ambiguous", load=100)

    run_both(steward, upstream, scenario, names=("first", "second"))


def test_pods_without_requests_fail_the_resource_metric(steward: Side, upstream: Side) -> None:
    """Utilization of pods that request no CPU cannot be computed: ScalingActive=False
    (FailedGetResourceMetric), a Warning Event, and the target left alone."""

    def scenario(side: Side, pair: Pair) -> None:
        side.kube.request("POST", side.deployments, deployment(2, requests=False))
        scaled_to(side, 2)
        side.kube.request("POST", side.hpas, hpa())
        has_condition(side, "ScalingActive", "False", "FailedGetResourceMetric", load=300)
        wait_for(
            side,
            lambda: any(e.get("reason") == "FailedGetResourceMetric" for e in side.events(APP)),
            "a FailedGetResourceMetric Event",
        )
        holds(side, 2, 5.0, load=300)
        pair.checkpoint(side, "no requests", load=300)

    run_both(steward, upstream, scenario)


def test_an_external_metric_scales_to_zero_and_back(steward: Side, upstream: Side) -> None:
    """minReplicas 0 over an External metric (a queue's length through the aggregated
    external.metrics.k8s.io adapter, ten items per pod): 30 items take two pods to three;
    an empty queue takes them to zero (ScaledToZero=True); 20 items bring two back, the
    HPA still autoscaling from zero."""

    def scenario(side: Side, pair: Pair) -> None:
        usage.set_external_metric(side.plane, side.ns, "queue", "30")
        side.kube.request("POST", side.deployments, deployment(2))
        scaled_to(side, 2)
        body = hpa(min_replicas=0, max_replicas=5)
        body["spec"]["metrics"] = [
            {
                "type": "External",
                "external": {
                    "metric": {"name": "queue"},
                    "target": {"type": "AverageValue", "averageValue": "10"},
                },
            }
        ]
        body["spec"]["behavior"] = {"scaleDown": {"stabilizationWindowSeconds": 0}}
        side.kube.request("POST", side.hpas, body)
        scaled_to(side, 3)
        pair.checkpoint(side, "three pods for 30 items")
        usage.set_external_metric(side.plane, side.ns, "queue", "0")
        scaled_to(side, 0)
        has_condition(side, "ScaledToZero", "True", "ScaledToZero")
        pair.checkpoint(side, "scaled to zero")
        usage.set_external_metric(side.plane, side.ns, "queue", "20")
        scaled_to(side, 2)
        pair.checkpoint(side, "two pods for 20 items")

    run_both(steward, upstream, scenario)


def test_the_largest_of_several_metrics_wins(steward: Side, upstream: Side) -> None:
    """A Pods metric (requests per second of each pod, target 10 on average) and an Object
    metric (the Deployment's queue, target 40) through the aggregated
    custom.metrics.k8s.io adapter: the larger proposal wins, whichever metric gives it."""

    def scenario(side: Side, pair: Pair) -> None:
        side.kube.request("POST", side.deployments, deployment(2))
        scaled_to(side, 2)
        dep_path = f"{side.deployments}/{APP}"
        usage.set_object_metric(side.plane, dep_path, "queue", "40")

        def per_pod(rate: str) -> None:
            for pod in side.pods(APP):
                with contextlib.suppress(ClusterError):  # a pod gone meanwhile
                    usage.set_pod_metric(side.plane, side.ns, pod["metadata"]["name"], "rps", rate)

        per_pod("20")
        body = hpa(max_replicas=6)
        body["spec"]["metrics"] = [
            {
                "type": "Pods",
                "pods": {
                    "metric": {"name": "rps"},
                    "target": {"type": "AverageValue", "averageValue": "10"},
                },
            },
            {
                "type": "Object",
                "object": {
                    "describedObject": {"apiVersion": "apps/v1", "kind": "Deployment", "name": APP},
                    "metric": {"name": "queue"},
                    "target": {"type": "Value", "value": "40"},
                },
            },
        ]
        side.kube.request("POST", side.hpas, body)
        # rps 20 per pod on two pods asks for four; the queue at target asks for two.
        scaled_to(side, 4)
        per_pod("10")
        pair.checkpoint(side, "the Pods metric's four")
        usage.set_object_metric(side.plane, dep_path, "queue", "100")
        scaled_to(side, 6)
        pair.checkpoint(side, "the Object metric's ten, limited to six")

    run_both(steward, upstream, scenario)
