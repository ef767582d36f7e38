"""End to end, as a user meets it under ``make up``: Steward's HPA controller in its own
process (upstream's off in kube-controller-manager), metrics-server serving kwok's
simulated use through the aggregation layer. A Deployment's pods get busier: Steward's
HPA scales it up, ``kubectl get hpa`` shows the real utilization against the target; the
pods go quiet: after the stabilization window it scales back down."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from steward.cluster import ClusterConfig, LocalCluster, usage
from steward.cluster.progress import Progress
from steward.kube import KubeClient, load_access

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

BIN = Path(sys.executable).parent
NS = "default"
WINDOW = 15
"""The HPA's scale-down stabilization window, seconds."""


@pytest.fixture(scope="module")
def made_up(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    cfg = ClusterConfig(
        name="steward-test-hpa-e2e",
        state_dir=tmp_path_factory.mktemp("hpa-e2e"),
        nodes=2,
        die_with_parent=True,
        steward=True,  # as make up
        metrics=True,
    )
    running = LocalCluster.up(cfg, progress=Progress(quiet=True))
    try:
        yield running
    finally:
        running.down(progress=Progress(quiet=True))


def _kubectl(cluster: LocalCluster, *args: str) -> str:
    done = subprocess.run(
        [str(BIN / "kubectl"), "--kubeconfig", str(cluster.kubeconfig), *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout


def _wait(what: str, check: Any, within: float = 180.0) -> Any:
    deadline = time.monotonic() + within
    while True:
        got = check()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(1.0)


def test_steward_scales_a_busy_deployment_up_and_back_down(made_up: LocalCluster) -> None:
    assert "-horizontalpodautoscaling" in made_up.state.controllers
    kube = KubeClient(load_access(str(made_up.kubeconfig)), user_agent="hpa-e2e")
    try:
        labels = {"app": "busy"}
        kube.request(
            "POST",
            f"/apis/apps/v1/namespaces/{NS}/deployments",
            {
                "metadata": {"name": "busy"},
                "spec": {
                    "replicas": 1,
                    "selector": {"matchLabels": labels},
                    "template": {
                        "metadata": {"labels": labels},
                        "spec": {
                            "containers": [
                                {
                                    "name": "c",
                                    "image": "busybox:1.36",
                                    "resources": {"requests": {"cpu": "100m"}},
                                }
                            ]
                        },
                    },
                },
            },
        )
        kube.request(
            "POST",
            f"/apis/autoscaling/v2/namespaces/{NS}/horizontalpodautoscalers",
            {
                "metadata": {"name": "busy"},
                "spec": {
                    "scaleTargetRef": {
                        "apiVersion": "apps/v1",
                        "kind": "Deployment",
                        "name": "busy",
                    },
                    "minReplicas": 1,
                    "maxReplicas": 4,
                    "metrics": [
                        {
                            "type": "Resource",
                            "resource": {
                                "name": "cpu",
                                "target": {"type": "Utilization", "averageUtilization": 50},
                            },
                        }
                    ],
                    "behavior": {"scaleDown": {"stabilizationWindowSeconds": WINDOW}},
                },
            },
        )

        def scale() -> int:
            found = kube.request("GET", f"/apis/apps/v1/namespaces/{NS}/deployments/busy/scale")
            return int(found["spec"]["replicas"])

        # Busy: 200m of a 100m request, four times the target.
        def busy() -> bool:
            usage.set_usage_by_selector(made_up, NS, "app=busy", cpu="200m")
            return scale() == 4

        _wait("Steward's HPA to scale the busy Deployment to 4", busy)
        hpa = kube.request(
            "GET", f"/apis/autoscaling/v2/namespaces/{NS}/horizontalpodautoscalers/busy"
        )
        current = hpa["status"]["currentMetrics"][0]["resource"]["current"]
        assert current["averageUtilization"] > 50, current
        table = _kubectl(made_up, "get", "hpa", "busy", "-n", NS)
        assert "cpu: " in table and "/50%" in table and "<unknown>" not in table, table

        # The Events say Steward's controller did it.
        events = kube.request(
            "GET",
            f"/api/v1/namespaces/{NS}/events?fieldSelector=involvedObject.name%3Dbusy,"
            "involvedObject.kind%3DHorizontalPodAutoscaler",
        )["items"]
        rescales = [e for e in events if e.get("reason") == "SuccessfulRescale"]
        assert rescales, json.dumps(events, indent=1)
        assert {e.get("reportingComponent") for e in rescales} == {
            "steward.io/horizontal-pod-autoscaler"
        }

        # Quiet: the recommendation stays up for the window, then down to one.
        quiet_since = time.monotonic()

        def quiet() -> bool:
            usage.set_usage_by_selector(made_up, NS, "app=busy", cpu="5m")
            return scale() == 1

        _wait("Steward's HPA to scale the quiet Deployment back to 1", quiet, within=240.0)
        assert time.monotonic() - quiet_since >= WINDOW
        table = _kubectl(made_up, "get", "hpa", "busy", "-n", NS, "-o", "wide")
        assert "<unknown>" not in table, table
    finally:
        kube.close()
