"""gRPC calls between the services are traced: a CLIENT span per call whose context travels
in the metadata, a SERVER span continuing it, one span per stream for a whole Watch or
Session, and the events a stream carries never become children of the stream's spans.

A real in-process informer and manager against the session's cluster, real channels from
``steward.grpc_tracing``, servers traced by ``steward.serving.tracing``; spans go to an
in-memory exporter."""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from typing import Any

import grpc
import pytest
import pytest_asyncio
from kubernetes import client
from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from steward import grpc_tracing
from steward.cluster import LocalCluster
from steward.informer import InformerOptions, InformerServer
from steward.manager import ManagerOptions
from steward.serving.security import DEVELOPMENT
from steward.v1 import informer_pb2 as pb
from steward.v1 import informer_pb2_grpc as pb_grpc
from steward.v1 import manager_pb2 as mpb
from steward.v1 import manager_pb2_grpc as mpb_grpc
from tests.manager.conftest import FAST, RunningManager
from tests.spans import recorded_spans

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

CONFIGMAPS = pb.ResourceType(group="", version="v1", resource="configmaps")
INFORMER = "steward.v1.InformerService"
MANAGER = "steward.v1.ManagerService"

_tracer = trace.get_tracer("tests.grpc_tracing")


@pytest.fixture
def spans() -> Iterator[InMemorySpanExporter]:
    yield from recorded_spans()


@pytest_asyncio.fixture
async def informer(cluster: LocalCluster, spans: InMemorySpanExporter) -> AsyncIterator[str]:
    server = InformerServer(
        InformerOptions(
            security=DEVELOPMENT,
            listen="127.0.0.1:0",
            kubeconfig=str(cluster.component_kubeconfig("informer")),
        )
    )
    await server.start()
    try:
        yield f"127.0.0.1:{server.port}"
    finally:
        await server.stop(grace=1.0)


@pytest.fixture
def manager(
    cluster: LocalCluster, namespace: str, spans: InMemorySpanExporter
) -> Iterator[RunningManager]:
    running = RunningManager(
        ManagerOptions(
            security=DEVELOPMENT,
            listen="127.0.0.1:0",
            kubeconfig=str(cluster.component_kubeconfig("manager")),
            namespace=namespace,
            timing=FAST,
        )
    )
    try:
        yield running
    finally:
        running.stop()


async def _spans_named(
    exporter: InMemorySpanExporter,
    name: str,
    *,
    count: int = 2,
    where: Callable[[ReadableSpan], bool] = lambda _: True,
) -> list[ReadableSpan]:
    """Wait (up to a minute) until ``count`` ended spans named ``name`` are exported."""
    deadline = time.monotonic() + 60.0
    while True:
        found = [s for s in exporter.get_finished_spans() if s.name == name and where(s)]
        if len(found) >= count or time.monotonic() > deadline:
            return found
        await asyncio.sleep(0.05)


def _one(found: Sequence[ReadableSpan], kind: SpanKind) -> ReadableSpan:
    of_kind = [s for s in found if s.kind == kind]
    assert len(of_kind) == 1, [(s.name, s.kind) for s in found]
    return of_kind[0]


def _check_pair(
    found: Sequence[ReadableSpan], service: str, method: str, port: int, code: grpc.StatusCode
) -> tuple[ReadableSpan, ReadableSpan]:
    """The call's CLIENT and SERVER spans, with the server's continuing the client's."""
    client_span = _one(found, SpanKind.CLIENT)
    server_span = _one(found, SpanKind.SERVER)
    assert client_span.context is not None and server_span.context is not None
    assert server_span.parent is not None
    assert server_span.parent.span_id == client_span.context.span_id
    assert server_span.parent.is_remote
    assert server_span.context.trace_id == client_span.context.trace_id
    for span in (client_span, server_span):
        attributes = dict(span.attributes or {})
        assert attributes["rpc.system"] == "grpc"
        assert attributes["rpc.service"] == service
        assert attributes["rpc.method"] == method
        assert attributes["rpc.grpc.status_code"] == code.value[0]
        assert attributes["server.address"] == "127.0.0.1"
        assert attributes["server.port"] == port
    assert (server_span.attributes or {})["network.peer.address"] == "127.0.0.1"
    return client_span, server_span


async def test_get_is_a_client_span_continued_by_the_server(
    informer: str, spans: InMemorySpanExporter, core: client.CoreV1Api, namespace: str
) -> None:
    core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="traced"))
    )
    async with grpc_tracing.insecure_channel(informer) as channel:
        stub = pb_grpc.InformerServiceStub(channel)
        with _tracer.start_as_current_span("caller") as parent:
            response = await stub.Get(
                pb.GetRequest(type=CONFIGMAPS, namespace=namespace, name="traced")
            )
    assert response.object.metadata.name == "traced"

    found = await _spans_named(spans, f"{INFORMER}/Get")
    port = int(informer.rpartition(":")[2])
    client_span, server_span = _check_pair(found, INFORMER, "Get", port, grpc.StatusCode.OK)
    assert client_span.parent is not None
    assert client_span.parent.span_id == parent.get_span_context().span_id
    assert client_span.context is not None
    assert client_span.context.trace_id == parent.get_span_context().trace_id
    assert client_span.status.status_code == StatusCode.UNSET
    assert server_span.status.status_code == StatusCode.UNSET
    # The Get started the type's reflector (in the Get's handler): the spans of the events
    # it receives afterwards are not the Get's children.
    core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="later"))
    )
    (event_span,) = await _spans_named(
        spans,
        "informer ADDED configmaps.v1",
        count=1,
        where=lambda s: (s.attributes or {}).get("steward.object.name") == "later",
    )
    assert client_span.context is not None and server_span.context is not None
    assert event_span.parent is None or event_span.parent.span_id not in {
        client_span.context.span_id,
        server_span.context.span_id,
    }


async def test_a_failed_call_has_an_error_status_and_the_code(
    informer: str, spans: InMemorySpanExporter, namespace: str
) -> None:
    async with grpc_tracing.insecure_channel(informer) as channel:
        stub = pb_grpc.InformerServiceStub(channel)
        unknown = pb.ResourceType(group="example.com", version="v1", resource="nothings")
        with pytest.raises(grpc.aio.AioRpcError) as raised:
            await stub.Get(pb.GetRequest(type=unknown, namespace=namespace, name="x"))
    assert raised.value.code() == grpc.StatusCode.NOT_FOUND

    found = await _spans_named(spans, f"{INFORMER}/Get")
    port = int(informer.rpartition(":")[2])
    client_span, server_span = _check_pair(found, INFORMER, "Get", port, grpc.StatusCode.NOT_FOUND)
    assert client_span.status.status_code == StatusCode.ERROR
    assert client_span.status.description == raised.value.details()
    # On the server a caller's mistake is not an error (semantic conventions for gRPC).
    assert server_span.status.status_code == StatusCode.UNSET


async def test_a_watch_is_one_span_each_side_and_not_the_parent_of_its_events(
    informer: str, spans: InMemorySpanExporter, core: client.CoreV1Api, namespace: str
) -> None:
    request = pb.WatchRequest(targets=[pb.WatchTarget(type=CONFIGMAPS)], namespace=namespace)
    name = f"{INFORMER}/Watch"
    async with grpc_tracing.insecure_channel(informer) as channel:
        stub = pb_grpc.InformerServiceStub(channel)
        with _tracer.start_as_current_span("caller") as parent:
            call = stub.Watch(request)
        events: list[pb.Event] = []
        synced = False
        async for response in call:
            for event in response.events:
                if event.type == pb.EVENT_TYPE_INITIAL_EVENTS_END and not synced:
                    synced = True
                    core.create_namespaced_config_map(
                        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="a"))
                    )
                elif event.type == pb.EVENT_TYPE_ADDED:
                    events.append(event)
            if any(e.metadata.name == "a" for e in events):
                break
        # Several messages went by, and the stream is still open: no span has ended yet.
        assert not [s for s in spans.get_finished_spans() if s.name == name]
        call.cancel()
        found = await _spans_named(spans, name)

    port = int(informer.rpartition(":")[2])
    client_span, server_span = _check_pair(
        found, INFORMER, "Watch", port, grpc.StatusCode.CANCELLED
    )
    assert client_span.parent is not None
    assert client_span.parent.span_id == parent.get_span_context().span_id
    await asyncio.sleep(0.5)  # nothing more comes for this stream
    assert len([s for s in spans.get_finished_spans() if s.name == name]) == 2

    # The event's trace is its own: the context it carries, and the informer's span of it,
    # have nothing to do with the stream's spans.
    event = next(e for e in events if e.metadata.name == "a")
    traceparent = event.trace_context.traceparent
    assert traceparent, "the event carries its trace context"
    _, trace_id, span_id, _ = traceparent.split("-")
    assert client_span.context is not None and server_span.context is not None
    assert int(trace_id, 16) != client_span.context.trace_id
    event_span = next(
        s
        for s in spans.get_finished_spans()
        if s.context is not None and s.context.span_id == int(span_id, 16)
    )
    assert event_span.name.startswith("informer ")
    assert event_span.parent is None or event_span.parent.span_id not in {
        client_span.context.span_id,
        server_span.context.span_id,
    }


async def _registered(stub: Any, instance: str) -> Any:
    """A Session of the controller ``traced`` as ``instance`` (``stub``: an aio
    ``ManagerServiceStub``), its registration answered."""
    session = stub.Session()
    await session.write(
        mpb.SessionRequest(registration=mpb.Registration(controller="traced", instance_id=instance))
    )
    first = await asyncio.wait_for(session.read(), 30)
    assert isinstance(first, mpb.SessionResponse)
    assert first.HasField("registration_result")
    return session


async def test_manager_calls_are_traced_unary_and_session(
    manager: RunningManager, spans: InMemorySpanExporter
) -> None:
    async with grpc_tracing.insecure_channel(manager.address) as channel:
        stub = mpb_grpc.ManagerServiceStub(channel)
        with _tracer.start_as_current_span("caller") as parent:
            await stub.ListControllers(mpb.ListControllersRequest())
        found = await _spans_named(spans, f"{MANAGER}/ListControllers")
        client_span, _ = _check_pair(
            found, MANAGER, "ListControllers", manager.port, grpc.StatusCode.OK
        )
        assert client_span.parent is not None
        assert client_span.parent.span_id == parent.get_span_context().span_id

        session = await _registered(stub, "traced-1")
        assert not [s for s in spans.get_finished_spans() if s.name == f"{MANAGER}/Session"]
        session.cancel()
        found = await _spans_named(spans, f"{MANAGER}/Session")
    # gRPC Python ends a cancelled request stream for the handler as a half-close would,
    # and says "cancelled" separately, at times only after the handler returned: the
    # server's span must still end CANCELLED (it waits for that word), as the client's.
    _check_pair(found, MANAGER, "Session", manager.port, grpc.StatusCode.CANCELLED)


async def test_a_half_closed_session_ends_ok_on_both_sides(
    manager: RunningManager, spans: InMemorySpanExporter
) -> None:
    # The other half of the wait above: a client that half-closes is not cancelling.
    async with grpc_tracing.insecure_channel(manager.address) as channel:
        session = await _registered(mpb_grpc.ManagerServiceStub(channel), "traced-2")
        await session.done_writing()
        while await asyncio.wait_for(session.read(), 30) is not grpc.aio.EOF:
            pass
        assert await session.code() == grpc.StatusCode.OK
        found = await _spans_named(spans, f"{MANAGER}/Session")
    _check_pair(found, MANAGER, "Session", manager.port, grpc.StatusCode.OK)


async def test_health_checks_are_not_traced(informer: str, spans: InMemorySpanExporter) -> None:
    from grpc_health.v1 import health_pb2, health_pb2_grpc  # type: ignore[import-untyped]

    async with grpc_tracing.insecure_channel(informer) as channel:
        health = health_pb2_grpc.HealthStub(channel)
        await health.Check(health_pb2.HealthCheckRequest(service=""))
        # A traced call after it: once its server span is in, the check's would be too.
        stub = pb_grpc.InformerServiceStub(channel)
        with pytest.raises(grpc.aio.AioRpcError):
            await stub.Get(pb.GetRequest(type=CONFIGMAPS, name=""))
    await _spans_named(spans, f"{INFORMER}/Get")
    found = [s for s in spans.get_finished_spans() if s.name == "grpc.health.v1.Health/Check"]
    assert [s.kind for s in found] == [SpanKind.CLIENT]  # the server made none


_UNTRACED_CHECK = """
import asyncio, grpc
from steward import grpc_tracing
from steward.serving.security import DEVELOPMENT
from steward.serving.tracing import ServerTracing

async def main():
    assert not grpc_tracing.tracing_enabled()
    channel = grpc_tracing.insecure_channel("127.0.0.1:9")
    assert not channel._unary_unary_interceptors and not channel._unary_stream_interceptors
    await channel.close()
    handler = grpc.unary_unary_rpc_method_handler(lambda request, context: request)

    async def continuation(details):
        return handler

    class Details:
        method = "/steward.v1.InformerService/Get"
        invocation_metadata = ()

    assert await ServerTracing().intercept_service(continuation, Details()) is handler
    print("untouched")

asyncio.run(main())
"""


async def test_without_an_sdk_nothing_is_wrapped() -> None:
    # A fresh process: this one has an SDK provider installed by the tests above.
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        _UNTRACED_CHECK,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    output, _ = await process.communicate()
    assert process.returncode == 0, output.decode()
    assert output.decode().strip() == "untouched"
