"""Every Python process of Steward writes JSON lines when asked
(``--logging-format=json``): the informer, the manager and a controller run as processes
against the session's cluster (the Job controller beside upstream's, on a Job naming it in
``spec.managedBy``), traced to the cluster's Jaeger, and every line each writes must be a
JSON object with the fields of :mod:`steward.logs`; with ``-v=4`` the controller's lines
of the Job's reconcile carry the controller, the Job's key and the reconcile's trace and
span IDs."""

from __future__ import annotations

import json
import re
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from steward.cluster import LocalCluster
from steward.kube import KubeClient, load_access
from tests.controllers.harness import drop_namespace
from tests.controllers.job.conftest import job_body
from tests.faults.stack import Stack
from tests.polling import wait_for

pytestmark = pytest.mark.integration

JSON = ("--logging-format=json", "-v=4")


def lines(log: Path) -> list[dict[str, Any]]:
    """Every line of ``log`` decoded; one that is not a JSON object fails the test."""
    decoded = []
    for number, line in enumerate(log.read_text().splitlines(), 1):
        try:
            obj = json.loads(line)
        except json.JSONDecodeError:
            pytest.fail(f"{log.name}:{number} is not JSON: {line!r}")
        assert isinstance(obj, dict), f"{log.name}:{number}: {line!r}"
        decoded.append(obj)
    return decoded


@pytest.fixture
def stack(cluster: LocalCluster, tmp_path: Path) -> Iterator[Stack]:
    running = Stack(cluster, tmp_path / "logs")
    try:
        yield running
    finally:
        running.stop()


def test_every_process_writes_json_lines(
    cluster: LocalCluster, stack: Stack, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Traced (to the cluster's Jaeger), so that a reconcile's lines carry its span's IDs.
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", cluster.otlp_endpoint)
    kube = KubeClient(load_access(str(cluster.kubeconfig)))
    ns = f"logs-{uuid.uuid4().hex[:6]}"
    try:
        kube.request("POST", "/api/v1/namespaces", {"apiVersion": "v1", "metadata": {"name": ns}})
        stack.start_informer(*JSON)
        stack.start_manager(*JSON)
        job = stack.start_controller(
            "job", flags=[*JSON, f"--namespace={ns}", "--no-take-unmanaged"]
        )
        stack.wait_holder("job", job)
        kube.request("POST", f"/apis/batch/v1/namespaces/{ns}/jobs", job_body("logged"))

        def reconciled() -> list[dict[str, Any]]:
            return [
                line
                for line in lines(job.log)
                if line.get("key") == f"{ns}/logged" and "finished syncing" in line["msg"]
            ]

        synced = wait_for(reconciled, "a reconcile of the Job logged", 60)
    finally:
        stack.stop()
        drop_namespace(kube, ns)
        kube.close()
    for service, component in (
        (stack.informer, "steward-informer"),
        (stack.manager, "steward-manager"),
        (job, "steward-controller-job"),
    ):
        assert service is not None
        decoded = lines(service.log)
        assert decoded, f"{service.name} wrote nothing"
        for line in decoded:
            assert {"ts", "level", "logger", "msg", "component"} <= set(line), line
            assert line["component"] == component, line
            assert isinstance(line["ts"], float) and line["level"] in (
                "debug",
                "info",
                "warning",
                "error",
                "critical",
            ), line
    first = synced[0]
    assert first["controller"] == "job" and first["level"] == "debug", first
    assert re.fullmatch(r"[0-9a-f]{32}", first["trace_id"]), first
    assert re.fullmatch(r"[0-9a-f]{16}", first["span_id"]), first
