"""Fixtures of the informer's integration tests: an in-process informer against the
session's local control plane, gRPC clients, and a Watch reader.

Informers run as the informer's own identity (the cluster's ``informer`` kubeconfig,
list/watch and discovery only, see ``deploy/rbac/informer.yaml``), as in a deployment;
the tests write their objects with the admin kubeconfig (``api_client``)."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import threading
import time
import uuid
from collections.abc import Callable, Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import grpc
import pytest
import yaml
from kubernetes import client

from steward.cluster import LocalCluster
from steward.informer import InformerOptions, InformerServer
from steward.kube import load_access
from steward.serving.security import DEVELOPMENT
from steward.v1 import informer_pb2 as pb
from steward.v1 import informer_pb2_grpc as pb_grpc
from tests.informer.mirror import INITIAL_EVENTS_END, Mirror
from tests.informer.proxy import CuttableProxy
from tests.services import widget_crd_body

_T = TypeVar("_T")

CONFIGMAPS = pb.ResourceType(group="", version="v1", resource="configmaps")


class RunningInformer:
    """An :class:`InformerServer` on its own event loop in a background thread."""

    def __init__(self, options: InformerOptions) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="informer")
        self._thread.start()
        self.server = InformerServer(options, load_access(options.kubeconfig))
        self.port = self.call(self.server.start())
        self.address = f"127.0.0.1:{self.port}"
        self.channel = grpc.insecure_channel(self.address)
        self.stub = pb_grpc.InformerServiceStub(self.channel)

    def call(self, coro: Coroutine[Any, Any, _T], timeout: float = 60.0) -> _T:
        """Run ``coro`` on the informer's loop and return its result."""
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout)

    def inspect(self, fn: Callable[[], _T]) -> _T:
        """Call ``fn`` on the informer's loop (to read its state safely)."""

        async def run() -> _T:
            return fn()

        return self.call(run())

    def stop(self) -> None:
        self.channel.close()
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


def informer_kubeconfig(cluster: LocalCluster) -> str:
    """The kubeconfig of the informer's own identity."""
    return str(cluster.component_kubeconfig("informer"))


def kubeconfig_via(cluster: LocalCluster, port: int, directory: Path) -> Path:
    """A copy of the informer's kubeconfig that reaches the API server through ``port``."""
    config = yaml.safe_load(cluster.component_kubeconfig("informer").read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{port}"
    path = directory / f"kubeconfig-{uuid.uuid4().hex[:6]}"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture(scope="module")
def informer(cluster: LocalCluster) -> Iterator[RunningInformer]:
    """An informer against the cluster, listening on a free loopback port."""
    running = RunningInformer(
        InformerOptions(
            security=DEVELOPMENT,
            listen="127.0.0.1:0",
            kubeconfig=informer_kubeconfig(cluster),
            metrics_listen="127.0.0.1:0",
            idle_grace=2.0,
        )
    )
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def start_informer(cluster: LocalCluster) -> Iterator[Callable[..., RunningInformer]]:
    """Start extra informers with custom options; all are stopped after the test."""
    started: list[RunningInformer] = []

    def start(**overrides: Any) -> RunningInformer:
        options = InformerOptions(
            security=DEVELOPMENT,
            listen="127.0.0.1:0",
            kubeconfig=informer_kubeconfig(cluster),
            idle_grace=2.0,
        )
        for key, value in overrides.items():
            setattr(options, key, value)
        running = RunningInformer(options)
        started.append(running)
        return running

    try:
        yield start
    finally:
        for running in started:
            running.stop()


@pytest.fixture
def proxy(cluster: LocalCluster) -> Iterator[CuttableProxy]:
    """A cuttable TCP proxy in front of the cluster's API server."""
    running = CuttableProxy(("127.0.0.1", cluster.state.ports["apiserver"]))
    try:
        yield running
    finally:
        running.close()


class WatchReader:
    """Reads one Watch stream on a thread; events (or the final error) land in a queue."""

    def __init__(self, stub: pb_grpc.InformerServiceStub, request: pb.WatchRequest) -> None:
        self.request = request
        self._call = stub.Watch(request)
        self.events: queue.Queue[pb.Event] = queue.Queue()
        self.batches = 0
        self.error: grpc.RpcError | None = None
        self.ended = threading.Event()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        try:
            for response in self._call:
                self.batches += 1
                for event in response.events:
                    self.events.put(event)
        except grpc.RpcError as err:
            self.error = err
        finally:
            self.ended.set()

    def next(self, timeout: float = 60.0) -> pb.Event:
        try:
            return self.events.get(timeout=timeout)
        except queue.Empty:
            pytest.fail(f"no event within {timeout}s on {self.request}")

    def take(self, count: int, timeout: float = 60.0) -> list[pb.Event]:
        return [self.next(timeout) for _ in range(count)]

    def until(self, predicate: Callable[[pb.Event], bool], timeout: float = 60.0) -> list[pb.Event]:
        """Events up to and including the first that satisfies ``predicate``."""
        deadline = time.monotonic() + timeout
        seen: list[pb.Event] = []
        while True:
            event = self.next(max(0.1, deadline - time.monotonic()))
            seen.append(event)
            if predicate(event):
                return seen

    def snapshot(self, timeout: float = 60.0) -> list[pb.Event]:
        """Events up to the (first) INITIAL_EVENTS_END, inclusive."""
        return self.until(lambda e: e.type == INITIAL_EVENTS_END, timeout)

    def feed(self, mirror: Mirror, until: Callable[[Mirror], bool], timeout: float = 60.0) -> None:
        """Apply events to ``mirror`` until ``until(mirror)`` holds."""
        deadline = time.monotonic() + timeout
        while not until(mirror):
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                pytest.fail(f"mirror did not converge; it holds {mirror.objects}")
            try:
                mirror.apply(self.events.get(timeout=min(remaining, 1.0)))
            except queue.Empty:
                continue

    def cancel(self) -> None:
        self._call.cancel()
        self._thread.join(timeout=10)


@pytest.fixture
def watch(informer: RunningInformer) -> Iterator[Callable[..., WatchReader]]:
    """Open Watch streams on the shared informer; all are cancelled after the test."""
    readers: list[WatchReader] = []

    def open_watch(
        *types: pb.ResourceType,
        stub: pb_grpc.InformerServiceStub | None = None,
        resume: dict[str, str] | None = None,
        **fields: Any,
    ) -> WatchReader:
        targets = [
            pb.WatchTarget(type=t, resource_version=(resume or {}).get(t.resource, ""))
            for t in (types or (CONFIGMAPS,))
        ]
        reader = WatchReader(stub or informer.stub, pb.WatchRequest(targets=targets, **fields))
        readers.append(reader)
        return reader

    try:
        yield open_watch
    finally:
        for reader in readers:
            reader.cancel()


def eventually(check: Callable[[], _T], *, timeout: float = 60.0, what: str) -> _T:
    """Poll ``check`` until it returns a truthy value; fail saying what was awaited."""
    deadline = time.monotonic() + timeout
    last: _T | None = None
    while time.monotonic() < deadline:
        result = check()
        if result:
            return result
        last = result
        time.sleep(0.2)
    pytest.fail(f"timed out waiting for {what}; last seen: {last!r}")


def wait_for_cache(informer: RunningInformer, resource_type: pb.ResourceType, written: Any) -> None:
    """Wait until the informer's cache of ``resource_type`` holds ``written`` (the object a
    write returned): a new subscriber's snapshot comes from the cache, which follows
    kube-apiserver's watch a moment behind."""
    version = int(written.metadata.resource_version)
    request = pb.ListRequest(type=resource_type, page_size=1)
    eventually(
        lambda: int(informer.stub.List(request).resource_version or 0) >= version,
        what=f"the informer's cache of {resource_type.resource} to reach {version}",
    )


def create_widget_crd(api_client: client.ApiClient, group: str) -> pb.ResourceType:
    """Create the namespaced custom resource type widgets.<group> and wait until served."""
    ext = client.ApiextensionsV1Api(api_client)
    body = widget_crd_body(group)
    ext.create_custom_resource_definition(body)  # type: ignore[arg-type]

    def established() -> bool:
        crd = ext.read_custom_resource_definition(f"widgets.{group}")
        conditions = crd.status.conditions or []
        return any(c.type == "Established" and c.status == "True" for c in conditions)

    eventually(established, what="the CRD to be established")
    return pb.ResourceType(group=group, version="v1", resource="widgets")


def delete_widget_crd(api_client: client.ApiClient, group: str) -> None:
    """Delete widgets.<group> (and so every widget) and wait until it is gone."""
    ext = client.ApiextensionsV1Api(api_client)
    ext.delete_custom_resource_definition(f"widgets.{group}")

    def gone() -> bool:
        try:
            ext.read_custom_resource_definition(f"widgets.{group}")
        except client.ApiException as err:
            return bool(err.status == 404)
        return False

    eventually(gone, what="the CRD to be deleted")


@pytest.fixture
def widget_crd(api_client: client.ApiClient) -> Iterator[pb.ResourceType]:
    """A fresh namespaced custom resource type, served and established."""
    group = f"t{uuid.uuid4().hex[:8]}.steward.test"
    rtype = create_widget_crd(api_client, group)
    try:
        yield rtype
    finally:
        delete_widget_crd(api_client, group)
