"""Events coalesced into one reconcile: the span continues the first and links to the others.

A standby instance of the Job controller keeps its mirror and its work queue filled while
the active instance reconciles: the events of a Job pile up under one key there. When the
active instance leaves, the standby is promoted and reconciles that key once — a reconcile
span whose parent is the Job's ADDED event and whose links are the later events.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client, config

from steward.cluster import LocalCluster
from steward.v1 import manager_pb2, manager_pb2_grpc
from tests.tracing import jaeger

pytestmark = [pytest.mark.e2e, pytest.mark.slow]

NAME = "coalesced"


@pytest.fixture(scope="module")
def steward_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    state = tmp_path_factory.mktemp("coalesce-cluster")
    with jaeger.steward_cluster("steward-test-coalesce", state) as running:
        yield running


def _instances(cluster: LocalCluster) -> list[manager_pb2.InstanceInfo]:
    with cluster.client_security().sync_channel(cluster.state.manager_address) as channel:
        stub = manager_pb2_grpc.ManagerServiceStub(channel)
        reply = stub.GetController(manager_pb2.GetControllerRequest(name="job"), timeout=5)
    return list(reply.controller.instances)


def _wait(what: str, check: Any, timeout: float = 90, log: Path | None = None) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.5)
    tail = "\n".join(log.read_text().splitlines()[-20:]) if log else ""
    pytest.fail(f"timed out waiting for {what}\n{tail}")


def _event_spans(cluster: LocalCluster, event: str) -> dict[str, dict[str, Any]]:
    """The informer's spans of ``event`` (ADDED, MODIFIED) on the Job, by resourceVersion."""
    tags = json.dumps({"steward.object.name": NAME, "steward.resource": "jobs.v1.batch"})
    found = jaeger.query(
        cluster,
        "/api/traces",
        service="steward-informer",
        operation=f"informer {event} jobs.v1.batch",
        tags=tags,
        lookback="1h",
        limit="100",
    )["data"]
    spans: dict[str, dict[str, Any]] = {}
    for trace in found or []:
        for span in trace["spans"]:
            if span["operationName"] == f"informer {event} jobs.v1.batch":
                rv = str(jaeger.tags(span).get("steward.resource_version", ""))
                spans[rv] = span
    return spans


def test_coalesced_events_become_one_reconcile_with_links(
    steward_cluster: LocalCluster,
) -> None:
    record = next(p for p in steward_cluster.state.processes if p.name == "job-controller")
    env = dict(os.environ)
    env.pop("KUBECONFIG", None)
    env["OTEL_EXPORTER_OTLP_ENDPOINT"] = steward_cluster.state.otlp_endpoint
    log = steward_cluster.state.directory / "job-controller-standby.log"
    with log.open("wb") as out:
        standby = subprocess.Popen(
            [*record.argv, "--standby"], stdout=out, stderr=subprocess.STDOUT, env=env
        )
    api = config.new_client_from_config(config_file=str(steward_cluster.kubeconfig))
    try:
        _wait("the standby to register", lambda: len(_instances(steward_cluster)) == 2, log=log)
        batch = client.BatchV1Api(api)
        job = client.V1Job(
            metadata=client.V1ObjectMeta(name=NAME),
            spec=client.V1JobSpec(
                template=client.V1PodTemplateSpec(
                    spec=client.V1PodSpec(
                        restart_policy="Never",
                        containers=[client.V1Container(name="c", image="busybox:1.36")],
                    )
                )
            ),
        )
        batch.create_namespaced_job("default", job)
        versions = []
        for n in range(2):
            patched = batch.patch_namespaced_job(
                NAME, "default", {"metadata": {"annotations": {"example.com/touch": str(n)}}}
            )
            versions.append(patched.metadata.resource_version)
        # Once the informer's spans of both patches are in Jaeger, the events reached the
        # standby's mirror long ago (the informer sends first and exports in batches).
        modified = _wait(
            "the informer's spans of both patches",
            lambda: (
                spans
                if all(v in (spans := _event_spans(steward_cluster, "MODIFIED")) for v in versions)
                else None
            ),
        )
        patch_spans = {modified[v]["spanID"] for v in versions}
        added = _wait("the informer's ADDED span", lambda: _event_spans(steward_cluster, "ADDED"))
        (added_span,) = added.values()

        # The active instance leaves; the standby takes over at once and reconciles the Job
        # with everything its queue gathered under the Job's key.
        os.kill(record.pid, signal.SIGTERM)

        def promoted_reconcile() -> dict[str, Any] | None:
            trace = jaeger.query(steward_cluster, f"/api/traces/{added_span['traceID']}")["data"][0]
            for span in trace["spans"]:
                refs = span.get("references") or []
                parents = [r["spanID"] for r in refs if r["refType"] == "CHILD_OF"]
                links = {r["spanID"] for r in refs if r["refType"] == "FOLLOWS_FROM"}
                if (
                    span["operationName"] == "reconcile job"
                    and parents == [added_span["spanID"]]
                    and patch_spans <= links
                ):
                    found: dict[str, Any] = span
                    return found
            return None

        reconcile = _wait("the promoted standby's reconcile span", promoted_reconcile, log=log)
        attributes = jaeger.tags(reconcile)
        assert attributes["steward.key"] == f"default/{NAME}"
        # Every event of the key (the two patches, the active instance's own writes) is in
        # the one reconcile: the first as parent, each other one as a link.
        links = [r for r in reconcile["references"] if r["refType"] == "FOLLOWS_FROM"]
        assert attributes["steward.coalesced_events"] == len(links) + 1 >= 3
        assert {e["fields"][0]["value"] for e in reconcile["logs"][:2]} >= {
            "enqueued",
            "dequeued",
        }
    finally:
        api.close()
        standby.terminate()
        try:
            standby.wait(timeout=30)
        except subprocess.TimeoutExpired:
            standby.kill()
            standby.wait()
