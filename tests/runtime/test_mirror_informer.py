"""The mirror against a real informer: it survives the informer restarting, resumes, and
turns the fresh snapshot it gets into the deletions it missed."""

from __future__ import annotations

import asyncio
import contextlib

import grpc
import pytest
from kubernetes import client

from steward.cluster import LocalCluster
from steward.cluster.process import free_port
from steward.informer import InformerOptions, InformerServer
from steward.runtime.mirror import Change, ChangeKind, Mirror, MirrorOptions
from steward.runtime.resources import CONFIGMAPS
from steward.serving.security import DEVELOPMENT
from tests.polling import until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]


async def test_mirror_recovers_across_an_informer_restart(
    cluster: LocalCluster, api_client: client.ApiClient, namespace: str
) -> None:
    core = client.CoreV1Api(api_client)

    def create(name: str) -> None:
        core.create_namespaced_config_map(
            namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name=name))
        )

    def server_names() -> set[str]:
        items = core.list_namespaced_config_map(namespace).items
        return {str(cm.metadata.name) for cm in items}

    address = f"127.0.0.1:{free_port()}"
    options = InformerOptions(
        security=DEVELOPMENT,
        listen=address,
        kubeconfig=str(cluster.component_kubeconfig("informer")),
    )
    first = InformerServer(options)
    await first.start()
    changes: list[Change] = []
    async with grpc.aio.insecure_channel(address) as channel:
        mirror = Mirror(
            channel,
            [CONFIGMAPS],
            MirrorOptions(namespace=namespace, subscriber="test", max_backoff=1.0),
        )
        mirror.add_handler(changes.append)
        task = asyncio.create_task(mirror.run())
        try:
            create("a")
            create("b")
            await until(
                lambda: {"a", "b"} <= {o.name for o in mirror.objects(CONFIGMAPS)},
                "the mirror to see a and b",
            )
            await first.stop()
            # While no informer runs: one object goes, one comes.
            core.delete_namespaced_config_map("a", namespace)
            create("c")
            second = InformerServer(options)  # a new process would have no history either
            await second.start()
            try:
                await until(
                    lambda: {o.name for o in mirror.objects(CONFIGMAPS)} == server_names(),
                    "the mirror to equal the API server",
                )
            finally:
                await second.stop()
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
    assert mirror.reconnects >= 1
    deleted = [c.obj.name for c in changes if c.kind is ChangeKind.DELETED]
    assert deleted == ["a"]
    assert "c" in [c.obj.name for c in changes if c.kind is ChangeKind.ADDED]
