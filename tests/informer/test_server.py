"""The process around the service: reflection, health, metrics, graceful shutdown, CLI."""

from __future__ import annotations

import os
import platform
import signal
import subprocess
import sys
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from grpc_health.v1 import health_pb2, health_pb2_grpc  # type: ignore[import-untyped]
from grpc_reflection.v1alpha import reflection_pb2 as v1alpha_pb2  # type: ignore[import-untyped]
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (  # type: ignore[import-untyped]
    ProtoReflectionDescriptorDatabase,
)

from steward import cli
from steward.cluster import LocalCluster
from steward.v1 import informer_pb2 as pb
from steward.version import platform_label, steward_version
from tests.informer.conftest import CONFIGMAPS, RunningInformer, WatchReader

BIN = Path(sys.executable).parent


@pytest.mark.integration
def test_reflection_lists_and_calls_the_service(informer: RunningInformer, namespace: str) -> None:
    """A generic client finds and calls List knowing nothing but the server's address."""
    with grpc.insecure_channel(informer.address) as channel:
        database = ProtoReflectionDescriptorDatabase(channel)
        services = set(database.get_services())
        assert {"steward.v1.InformerService", "grpc.health.v1.Health"} <= services
        pool = descriptor_pool.DescriptorPool(database)
        service = pool.FindServiceByName("steward.v1.InformerService")
        assert {m.name for m in service.methods} == {"Watch", "List", "Get"}
        method = service.FindMethodByName("List")
        request_class = message_factory.GetMessageClass(method.input_type)
        response_class = message_factory.GetMessageClass(method.output_type)
        request: Any = request_class()
        request.type.version = "v1"
        request.type.resource = "namespaces"
        request.field_selector = f"metadata.name={namespace}"
        call: Any = channel.unary_unary(
            f"/{service.full_name}/{method.name}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=response_class.FromString,
        )
        response: Any = call(request, timeout=30)
        assert [item.metadata.name for item in response.items] == [namespace]


@pytest.mark.integration
def test_reflection_v1_describes_itself_and_the_service(informer: RunningInformer) -> None:
    """A client that speaks only grpc.reflection.v1 (as grpcurl asks first) is answered in
    v1's own messages, built here from the descriptor the server gives for v1 itself."""
    method = "/grpc.reflection.v1.ServerReflection/ServerReflectionInfo"

    def ask(channel: grpc.Channel, request: bytes) -> bytes:
        call: Any = channel.stream_stream(method)
        responses = list(call(iter([request]), timeout=30))
        assert len(responses) == 1
        answer: bytes = responses[0]
        return answer

    with grpc.insecure_channel(informer.address) as channel:
        # Bootstrap: the request's field 4 is file_containing_symbol in every version of
        # the protocol; the reply carries v1's own file descriptor, parsed once with the
        # v1alpha classes (the same wire format).
        symbol = b"grpc.reflection.v1.ServerReflection"
        raw = ask(channel, b"\x22" + bytes([len(symbol)]) + symbol)
        files = v1alpha_pb2.ServerReflectionResponse.FromString(raw).file_descriptor_response
        pool = descriptor_pool.DescriptorPool()
        for blob in files.file_descriptor_proto:
            pool.AddSerializedFile(blob)
        v1 = pool.FindServiceByName("grpc.reflection.v1.ServerReflection")
        assert v1.file.package == "grpc.reflection.v1"
        request_class: Any = message_factory.GetMessageClass(v1.methods[0].input_type)
        response_class: Any = message_factory.GetMessageClass(v1.methods[0].output_type)

        listed = response_class.FromString(
            ask(channel, request_class(list_services="").SerializeToString())
        )
        services = {s.name for s in listed.list_services_response.service}
        assert {
            "steward.v1.InformerService",
            "grpc.health.v1.Health",
            "grpc.reflection.v1.ServerReflection",
            "grpc.reflection.v1alpha.ServerReflection",
        } <= services

        described = response_class.FromString(
            ask(
                channel,
                request_class(
                    file_containing_symbol="steward.v1.InformerService"
                ).SerializeToString(),
            )
        )
        names = set()
        for blob in described.file_descriptor_response.file_descriptor_proto:
            names.add(descriptor_pb2.FileDescriptorProto.FromString(blob).name)
        assert "steward/v1/informer.proto" in names

        missing = response_class.FromString(
            ask(channel, request_class(file_containing_symbol="no.such.Thing").SerializeToString())
        )
        assert missing.error_response.error_code == grpc.StatusCode.NOT_FOUND.value[0]


@pytest.mark.integration
def test_health_and_metrics(informer: RunningInformer, watch: Callable[..., WatchReader]) -> None:
    health = health_pb2_grpc.HealthStub(informer.channel)
    for service in ("steward.v1.InformerService", ""):
        status = health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10).status
        assert status == health_pb2.HealthCheckResponse.SERVING
    watch(subscriber="metrics-test").snapshot()
    url = f"http://127.0.0.1:{informer.server.metrics_port}/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        text = response.read().decode()
    for name in (
        "steward_informer_events_total",
        "steward_informer_watch_requests_total",
        "steward_informer_list_requests_total",
        "steward_informer_relists_total",
        'steward_informer_subscriber_lag{resource="configmaps.v1",subscriber="metrics-test"}',
        'steward_informer_objects{resource="configmaps.v1"}',
        f'steward_build_info{{platform="{platform_label()}",runtime="python",'
        f'runtime_version="{platform.python_version()}",version="{steward_version()}"}} 1.0',
    ):
        assert name in text


@pytest.mark.integration
def test_shutdown_ends_streams_cleanly(
    start_informer: Callable[..., RunningInformer],
) -> None:
    informer = start_informer()
    reader = WatchReader(informer.stub, pb.WatchRequest(targets=[pb.WatchTarget(type=CONFIGMAPS)]))
    reader.snapshot()
    health_channel = grpc.insecure_channel(informer.address)
    statuses = health_pb2_grpc.HealthStub(health_channel).Watch(
        health_pb2.HealthCheckRequest(service="steward.v1.InformerService")
    )
    try:
        assert next(statuses).status == health_pb2.HealthCheckResponse.SERVING
        informer.call(informer.server.stop(grace=1.0))
        assert next(statuses).status == health_pb2.HealthCheckResponse.NOT_SERVING
        assert reader.ended.wait(30)
        assert reader.error is None  # ended with OK, not cancelled or failed
    finally:
        statuses.cancel()
        health_channel.close()


@pytest.mark.unit
def test_cli_help_explains_the_informer(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exited:
        cli.main(["informer", "--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    for text in (
        "List & Watch",
        "--listen",
        "--kubeconfig",
        "--metrics-listen",
        "--history-size",
        "--subscriber-buffer",
        "--idle-grace",
        "--watch-linger",
        "SIGTERM",
        "STEWARD_INFORMER_LISTEN",
    ):
        assert text in out


@pytest.mark.unit
def test_cli_rejects_bad_flags(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["informer", "--subscriber-buffer", "0", "--kubeconfig", "/none"]) == 2
    assert "--subscriber-buffer must be at least 1" in capsys.readouterr().err
    for linger in ("-0.001", "5"):
        assert cli.main(["informer", "--watch-linger", linger, "--kubeconfig", "/none"]) == 2
        assert "--watch-linger must be between 0 and 1 seconds" in capsys.readouterr().err


@pytest.mark.integration
def test_the_process_serves_and_stops_on_sigterm(cluster: LocalCluster, tmp_path: Path) -> None:
    env = dict(os.environ, STEWARD_INFORMER_LISTEN="127.0.0.1:0")
    proc = subprocess.Popen(
        [
            str(BIN / "steward"),
            "informer",
            "--kubeconfig",
            str(cluster.component_kubeconfig("informer")),
            "--insecure-plaintext",
            "--authorization-mode=AlwaysAllow",
        ],
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert proc.stderr is not None
        port = 0
        for line in proc.stderr:
            if "informer serving on" in line:
                port = int(line.split("serving on ")[1].split(" ")[0].rsplit(":", 1)[1])
                break
        assert port, "the informer did not report its address"
        with grpc.insecure_channel(f"127.0.0.1:{port}") as channel:
            health = health_pb2_grpc.HealthStub(channel)
            check = health.Check(health_pb2.HealthCheckRequest(service=""), timeout=10)
            assert check.status == health_pb2.HealthCheckResponse.SERVING
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()
