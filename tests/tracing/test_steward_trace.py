"""``steward trace``: the waterfall's layout, and a real object's traces from a real Jaeger:
the trace of its creation first, its later ones listed, each printable by ID."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
from kubernetes import client

from steward import cli
from steward.cluster import LocalCluster
from steward.cluster.process import free_port
from steward.traces import Span, waterfall
from steward.v1 import informer_pb2 as pb
from steward.v1 import informer_pb2_grpc as pb_grpc

BIN = Path(sys.executable).parent


@pytest.mark.unit
def test_waterfall_orders_children_under_parents_and_scales_bars() -> None:
    spans = [
        Span("c", "b", "apiserver", "etcd put", 1_500, 500, False),
        Span("a", "", "steward-informer", "event", 0, 4_000, False),
        Span("b", "a", "steward-controller-x", "reconcile", 1_000, 2_000, True),
    ]
    lines = waterfall(spans, width=8)
    assert [line.split(":")[0].strip() for line in lines] == [
        "steward-informer",
        "steward-controller-x",
        "apiserver",
    ]
    assert lines[1].startswith("  steward-controller-x: reconcile")
    assert lines[2].startswith("    apiserver: etcd put")
    assert lines[0].endswith("|████████|")
    assert lines[1].endswith("|  !!!!  |")  # an error span is drawn with '!'
    assert "1.0 ms" in lines[1]


@pytest.mark.integration
def test_steward_trace_prints_the_creation_and_lists_the_later_traces(
    cluster: LocalCluster,
    core: client.CoreV1Api,
    namespace: str,
    capsys: pytest.CaptureFixture[str],
) -> None:
    import grpc

    env = dict(
        os.environ,
        OTEL_EXPORTER_OTLP_ENDPOINT=cluster.otlp_endpoint,
        OTEL_BSP_SCHEDULE_DELAY="200",
    )
    address = f"127.0.0.1:{free_port()}"
    proc = subprocess.Popen(
        [
            str(BIN / "steward"),
            "informer",
            "--kubeconfig",
            str(cluster.kubeconfig),
            "--listen",
            address,
            "--insecure-plaintext",
            "--authorization-mode=AlwaysAllow",
        ],
        env=env,
        stderr=subprocess.DEVNULL,
    )
    try:
        with grpc.insecure_channel(address) as channel:
            grpc.channel_ready_future(channel).result(timeout=60)
            stub = pb_grpc.InformerServiceStub(channel)
            request = pb.WatchRequest(
                targets=[pb.WatchTarget(type=pb.ResourceType(version="v1", resource="configmaps"))],
                namespace=namespace,
            )
            stream = stub.Watch(request)
            next(stream)  # the snapshot: the reflector is running
            core.create_namespaced_config_map(
                namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="traced"))
            )
            for response in stream:
                if any(e.metadata.name == "traced" for e in response.events):
                    break
            core.patch_namespaced_config_map("traced", namespace, {"data": {"k": "v"}})
            for response in stream:
                if any(e.metadata.name == "traced" for e in response.events):
                    break
            stream.cancel()
        deadline = time.monotonic() + 60
        out = subprocess.CompletedProcess(args=[], returncode=1, stdout="", stderr="")
        while time.monotonic() < deadline:
            out = subprocess.run(
                [
                    str(BIN / "steward"),
                    "trace",
                    "configmap/traced",
                    "-n",
                    namespace,
                    "--jaeger",
                    cluster.jaeger_query_url,
                ],
                capture_output=True,
                text=True,
                check=False,
            )
            # Each event of an object without a traceparent annotation starts a trace.
            if out.returncode == 0 and "later traces (1;" in out.stdout:
                break
            time.sleep(1)
        assert out.returncode == 0, out.stderr
        cause, later = out.stdout.split("\n\n")
        assert "steward-informer: informer ADDED configmaps.v1" in cause
        assert "MODIFIED" not in cause
        assert f"Jaeger: {cluster.jaeger_query_url}/trace/" in cause
        heading, line = later.splitlines()
        assert heading == "later traces (1; print one with --trace ID):"
        _, trace_id, spans, _, services, outcome = line.split()
        assert (spans, services, outcome) == ("1", "steward-informer", "ok")
        # The other ways in, run in this process (the command's entry point ran above).
        jaeger = ["-n", namespace, "--jaeger", cluster.jaeger_query_url]
        for choice in (["--trace", trace_id], ["--latest"]):
            code = cli.main(["trace", "configmap/traced", *jaeger, *choice])
            printed = capsys.readouterr().out
            assert code == 0
            assert printed.startswith(f"trace {trace_id}: 1 spans"), choice
            assert "informer MODIFIED configmaps.v1" in printed
        # Only the newest trace asked for: the creation is still found by its ADDED event.
        assert cli.main(["trace", "configmap/traced", *jaeger, "--limit", "1"]) == 0
        printed = capsys.readouterr().out
        assert "informer ADDED configmaps.v1" in printed.split("\n\n")[0]
        assert "only the newest 1 were asked for, see --limit" in printed
        # A trace of something else is printed with a note; unknown and malformed IDs.
        assert cli.main(["trace", "job/traced", *jaeger, "--trace", trace_id]) == 0
        printed, err = capsys.readouterr()
        assert printed.startswith(f"trace {trace_id}")
        assert f"note: trace {trace_id} has no event of job/traced" in err
        assert cli.main(["trace", "configmap/traced", *jaeger, "--trace", "0123abcd"]) == 1
        assert f"no trace 0123abcd in {cluster.jaeger_query_url}" in capsys.readouterr().err
        assert cli.main(["trace", "configmap/traced", *jaeger, "--trace", "not-an-id"]) == 2
        assert "'not-an-id' is not a trace ID" in capsys.readouterr().err
        assert cli.main(["trace", "configmap/none", *jaeger]) == 1
        assert "no trace of configmap/none" in capsys.readouterr().err
    finally:
        proc.terminate()
        proc.wait(timeout=30)
