"""Runtime tests' wiring: an in-process informer over the session's cluster."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest_asyncio

from steward.cluster import LocalCluster
from steward.informer import InformerOptions, InformerServer
from steward.serving.security import DEVELOPMENT


@pytest_asyncio.fixture
async def informer(cluster: LocalCluster) -> AsyncIterator[str]:
    """The address of a plaintext informer (development security) on the cluster."""
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
        await server.stop()
