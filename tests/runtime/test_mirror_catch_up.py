"""``Mirror.catch_up``, the read barrier a promoted standby passes before its first
reconcile: it must return only once the mirror holds what the informer held when it was
called, even when the stream the mirror had was stuck, and without sending anything twice.

The mirror's streams to a real informer pass a gate that can hold back the responses of
the streams open at one moment, the way a subscriber lags behind its informer."""

from __future__ import annotations

import asyncio
import contextlib
import time

import grpc
import pytest
from kubernetes import client

from steward.cluster import LocalCluster
from steward.cluster.process import free_port
from steward.informer import InformerOptions, InformerServer
from steward.runtime.mirror import Change, ChangeKind, Mirror, MirrorOptions
from steward.runtime.resources import CONFIGMAPS
from steward.serving.security import DEVELOPMENT
from steward.v1 import informer_pb2 as pb
from steward.v1 import informer_pb2_grpc as pb_grpc
from tests.polling import until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]


class Gate(grpc.aio.UnaryStreamClientInterceptor):
    """Holds back the responses of every stream open when :meth:`freeze` is called (they
    stay unread in gRPC's buffers, as with a subscriber that lags); later streams flow."""

    def __init__(self) -> None:
        self._flowing: list[asyncio.Event] = []

    def freeze(self) -> None:
        for flowing in self._flowing:
            flowing.clear()

    async def intercept_unary_stream(self, continuation, details, request):  # type: ignore[no-untyped-def]
        call = await continuation(details, request)
        flowing = asyncio.Event()
        flowing.set()
        self._flowing.append(flowing)
        ended = asyncio.Event()
        call.add_done_callback(lambda _: ended.set())

        async def responses():  # type: ignore[no-untyped-def]
            while True:
                response = await call.read()
                if response is grpc.aio.EOF:
                    return
                if not flowing.is_set():
                    held = asyncio.create_task(flowing.wait())
                    gone = asyncio.create_task(ended.wait())
                    await asyncio.wait({held, gone}, return_when=asyncio.FIRST_COMPLETED)
                    held.cancel()
                    gone.cancel()
                    if not flowing.is_set():
                        raise asyncio.CancelledError  # what reading a cancelled call raises
                yield response

        return responses()


async def test_catch_up_returns_only_once_the_mirror_holds_what_the_informer_holds(
    cluster: LocalCluster, api_client: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(api_client)
    address = f"127.0.0.1:{free_port()}"
    informer = InformerServer(
        InformerOptions(
            security=DEVELOPMENT,
            listen=address,
            kubeconfig=str(cluster.component_kubeconfig("informer")),
        )
    )
    await informer.start()
    gate = Gate()
    changes: list[Change] = []
    try:
        async with (
            grpc.aio.insecure_channel(address, interceptors=[gate]) as channel,
            grpc.aio.insecure_channel(address) as direct,
        ):
            informer_stub = pb_grpc.InformerServiceStub(direct)

            async def informer_has(name: str) -> bool:
                reply = await informer_stub.List(
                    pb.ListRequest(type=CONFIGMAPS.wire, namespace=namespace)
                )
                return name in {item.metadata.name for item in reply.items}

            def create(name: str) -> None:
                core.create_namespaced_config_map(
                    namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name))
                )

            mirror = Mirror(
                channel,
                [CONFIGMAPS],
                MirrorOptions(namespace=namespace, subscriber="test", max_backoff=1.0),
            )
            mirror.add_handler(changes.append)
            task = asyncio.create_task(mirror.run())
            try:
                create("before")
                await until(
                    lambda: mirror.get(CONFIGMAPS, namespace, "before") is not None, "before"
                )
                gate.freeze()  # the mirror's stream lags from here on
                for name in ("late-1", "late-2"):
                    create(name)
                    deadline = time.monotonic() + 60.0
                    while not await informer_has(name):
                        assert time.monotonic() < deadline, f"the informer never had {name}"
                        await asyncio.sleep(0.05)
                await asyncio.sleep(0.5)
                assert mirror.get(CONFIGMAPS, namespace, "late-1") is None, (
                    "the frozen stream delivered anyway: this test proves nothing"
                )
                await asyncio.wait_for(mirror.catch_up(), timeout=60.0)
                held = {o.name for o in mirror.objects(CONFIGMAPS)}
                assert {"before", "late-1", "late-2"} <= held
                # The stream keeps flowing after the barrier.
                create("after")
                await until(lambda: mirror.get(CONFIGMAPS, namespace, "after") is not None, "after")
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
    finally:
        await informer.stop()
    ours = {"after", "before", "late-1", "late-2"}  # the namespace gets kube-root-ca.crt too
    added = [c.obj.name for c in changes if c.kind is ChangeKind.ADDED and c.obj.name in ours]
    assert sorted(added) == sorted(ours), f"resumed, so each object is added exactly once: {added}"
    assert mirror.reconnects == 1


async def test_catch_up_waits_for_an_informer_that_is_down(
    cluster: LocalCluster, api_client: client.ApiClient, namespace: str
) -> None:
    """A barrier asked for while no informer answers is not answered by the dead stream:
    it waits for a stream that reaches the present."""
    core = client.CoreV1Api(api_client)
    address = f"127.0.0.1:{free_port()}"
    options = InformerOptions(
        security=DEVELOPMENT,
        listen=address,
        kubeconfig=str(cluster.component_kubeconfig("informer")),
    )
    first = InformerServer(options)
    await first.start()
    async with grpc.aio.insecure_channel(address) as channel:
        mirror = Mirror(
            channel,
            [CONFIGMAPS],
            MirrorOptions(
                namespace=namespace, subscriber="test", initial_backoff=0.2, max_backoff=0.5
            ),
        )
        task = asyncio.create_task(mirror.run())
        second: InformerServer | None = None
        try:
            await asyncio.wait_for(mirror.wait_synced(), timeout=60.0)
            await first.stop()
            barrier = asyncio.create_task(mirror.catch_up())
            core.create_namespaced_config_map(
                namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="while-down"))
            )
            await asyncio.sleep(1.5)  # several reconnection attempts fail meanwhile
            assert not barrier.done(), "the barrier passed while no informer was serving"
            second = InformerServer(options)
            await second.start()
            await asyncio.wait_for(barrier, timeout=60.0)
            assert mirror.get(CONFIGMAPS, namespace, "while-down") is not None
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            if second is not None:
                await second.stop()
