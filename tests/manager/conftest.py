"""Fixtures of the manager's tests: an in-process manager against the session's local
control plane (its Leases in the test's fresh namespace), with small lease numbers.

Managers run as the manager's own identity (the cluster's ``manager`` kubeconfig, see
``deploy/rbac/manager.yaml``; the local cluster grants its Lease role cluster-wide so
that every test's namespace works), as in a deployment."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import uuid
from collections.abc import Callable, Coroutine, Iterator
from typing import Any, TypeVar

import pytest

from steward.cluster import LocalCluster
from steward.kube import load_access
from steward.manager import ManagerOptions, ManagerServer, Timing
from steward.security import PLAINTEXT, ClientSecurity
from steward.serving.security import DEVELOPMENT
from steward.v1 import manager_pb2_grpc as pb_grpc

_T = TypeVar("_T")

FAST = Timing(lease_duration=3.0, renew_deadline=2.0, retry_period=0.5, drain_timeout=5.0)
"""Lease numbers for tests: 3 s lease, 2 s renew deadline, 0.5 s heartbeats."""


class RunningManager:
    """A :class:`ManagerServer` on its own event loop in a background thread, leading."""

    def __init__(
        self,
        options: ManagerOptions,
        wait_leading: bool = True,
        client: ClientSecurity = PLAINTEXT,
    ) -> None:
        """``client`` is how :attr:`stub` dials it (mTLS files for a TLS manager)."""
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="manager")
        self._thread.start()
        self.server = ManagerServer(options, load_access(options.kubeconfig))
        try:
            self.port = self.call(self.server.start())
            if wait_leading:
                self.call(asyncio.wait_for(self.server.wait_leading(), 30.0))
            else:
                self.call(asyncio.sleep(1.0))  # one election attempt
        except BaseException:
            self._shutdown()
            raise
        self.address = f"127.0.0.1:{self.port}"
        self.channel = client.sync_channel(self.address)
        self.stub = pb_grpc.ManagerServiceStub(self.channel)
        self.stopped = False

    def call(self, coro: Coroutine[Any, Any, _T], timeout: float = 60.0) -> _T:
        """Run ``coro`` on the manager's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def _shutdown(self) -> None:
        try:
            self.call(self.server.stop(grace=1.0))
        finally:
            # As asyncio.run ends a loop: async generators first (the API clients close
            # their connections there), then stop.
            with contextlib.suppress(Exception):
                asyncio.run_coroutine_threadsafe(self.loop.shutdown_asyncgens(), self.loop).result(
                    30
                )
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=30)
            self.loop.close()

    def stop(self) -> None:
        if self.stopped:
            return
        self.stopped = True
        self.channel.close()
        self._shutdown()


@pytest.fixture
def start_manager(cluster: LocalCluster, namespace: str) -> Iterator[Callable[..., RunningManager]]:
    """Start managers (Leases in the test's namespace, FAST numbers unless overridden),
    waiting until each leads unless ``wait_leading=False``; all are stopped after the test."""
    started: list[RunningManager] = []

    def start(wait_leading: bool = True, **overrides: Any) -> RunningManager:
        options = ManagerOptions(
            security=DEVELOPMENT,
            listen="127.0.0.1:0",
            kubeconfig=str(cluster.component_kubeconfig("manager")),
            namespace=namespace,
            timing=FAST,
            identity=f"manager-{uuid.uuid4().hex[:6]}",
        )
        for key, value in overrides.items():
            setattr(options, key, value)
        running = RunningManager(options, wait_leading)
        started.append(running)
        return running

    try:
        yield start
    finally:
        for running in started:
            running.stop()


@pytest.fixture
def manager(start_manager: Callable[..., RunningManager]) -> RunningManager:
    """One manager with FAST numbers, every controller enabled."""
    return start_manager()
