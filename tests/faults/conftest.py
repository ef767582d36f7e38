"""Fixtures of the fault tests: one in-process informer and one in-process manager per
module against the session's local control plane, each with a control client that must
keep being served whatever the other callers send."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass

import grpc
import pytest
from kubernetes import client

from steward.cluster import LocalCluster
from steward.informer import InformerOptions
from steward.manager import ManagerOptions
from steward.serving.security import DEVELOPMENT
from steward.v1 import informer_pb2 as ipb
from steward.v1 import manager_pb2 as mpb
from steward.v1 import manager_pb2_grpc as mpb_grpc
from tests.informer.conftest import RunningInformer, informer_kubeconfig
from tests.manager.conftest import FAST, RunningManager

CONFIGMAPS = ipb.ResourceType(group="", version="v1", resource="configmaps")

ALLOWED = frozenset(
    {
        grpc.StatusCode.INVALID_ARGUMENT,
        grpc.StatusCode.NOT_FOUND,
        grpc.StatusCode.OUT_OF_RANGE,
        grpc.StatusCode.FAILED_PRECONDITION,
        grpc.StatusCode.RESOURCE_EXHAUSTED,
        grpc.StatusCode.PERMISSION_DENIED,
        grpc.StatusCode.ALREADY_EXISTS,
        grpc.StatusCode.UNAVAILABLE,
    }
)
"""Status codes a refused call may end with; never UNKNOWN, INTERNAL or a deadline."""


def assert_clear_refusal(err: grpc.RpcError, allowed: frozenset[grpc.StatusCode] = ALLOWED) -> None:
    """``err`` is a refusal the server chose, with a message: not UNKNOWN or INTERNAL,
    not a deadline (a hang), not a transport failure the client made up (a status
    message or response too large to be received)."""
    code, details = err.code(), err.details() or ""
    assert code in allowed, f"{code}: {details[:500]}"
    assert details.strip(), f"{code} without a message"
    assert not details.startswith("Stream removed"), f"{code}: {details[:500]}"
    assert "CLIENT:" not in details, f"{code}: {details[:500]}"


def namespace_for(api_client: client.ApiClient, prefix: str) -> Iterator[str]:
    core = client.CoreV1Api(api_client)
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        core.delete_namespace(name)


@pytest.fixture(scope="module")
def fault_namespace(api_client: client.ApiClient) -> Iterator[str]:
    """A namespace for the module's objects and Leases."""
    yield from namespace_for(api_client, "faults")


@pytest.fixture(scope="module")
def fault_informer(cluster: LocalCluster) -> Iterator[RunningInformer]:
    """An informer of the module's own, as its own identity, with its default limits."""
    running = RunningInformer(
        InformerOptions(
            security=DEVELOPMENT,
            listen="127.0.0.1:0",
            kubeconfig=informer_kubeconfig(cluster),
            idle_grace=2.0,
        )
    )
    try:
        yield running
    finally:
        running.stop()


@dataclass
class ControlObject:
    """A ConfigMap the control client reads back after every bad call."""

    namespace: str
    name: str
    uid: str


@pytest.fixture(scope="module")
def control_object(api_client: client.ApiClient, fault_namespace: str) -> ControlObject:
    core = client.CoreV1Api(api_client)
    created = core.create_namespaced_config_map(
        fault_namespace,
        client.V1ConfigMap(metadata=client.V1ObjectMeta(name="control"), data={"k": "v"}),
    )
    return ControlObject(fault_namespace, "control", str(created.metadata.uid))


class ControlInstance:
    """A well-behaved controller instance: registered, heart-beating every retry period
    on its own channel; ``acks`` counts the acknowledgements it got."""

    def __init__(self, address: str, controller: str) -> None:
        self.controller = controller
        self.instance_id = f"{controller}-{uuid.uuid4().hex[:6]}"
        self.channel = grpc.insecure_channel(address)
        self.stub = mpb_grpc.ManagerServiceStub(self.channel)
        self.acks = 0
        self.error: grpc.RpcError | None = None
        self._stop = threading.Event()
        self._call = self.stub.Session(self._requests())
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _requests(self) -> Iterator[mpb.SessionRequest]:
        yield mpb.SessionRequest(
            registration=mpb.Registration(
                controller=self.controller, instance_id=self.instance_id, language="python"
            )
        )
        sequence = 0
        while not self._stop.wait(FAST.retry_period):
            sequence += 1
            yield mpb.SessionRequest(heartbeat=mpb.Heartbeat(sequence=sequence))

    def _read(self) -> None:
        try:
            for response in self._call:
                if response.WhichOneof("kind") == "heartbeat_ack":
                    self.acks += 1
        except grpc.RpcError as err:
            if not self._stop.is_set():
                self.error = err

    def wait_acks(self, count: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        start = self.acks
        while self.acks < start + count:
            assert self.error is None, f"control session ended: {self.error}"
            assert time.monotonic() < deadline, "control session got no heartbeat acks"
            time.sleep(0.1)

    def close(self) -> None:
        self._stop.set()
        self._call.cancel()
        self._thread.join(timeout=10)
        self.channel.close()


@pytest.fixture(scope="module")
def fault_manager(cluster: LocalCluster, fault_namespace: str) -> Iterator[RunningManager]:
    """A leading manager of the module's own (Leases in the module's namespace)."""
    running = RunningManager(
        ManagerOptions(
            security=DEVELOPMENT,
            listen="127.0.0.1:0",
            kubeconfig=str(cluster.component_kubeconfig("manager")),
            namespace=fault_namespace,
            timing=FAST,
            identity=f"manager-{uuid.uuid4().hex[:6]}",
        )
    )
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def control_instance(fault_manager: RunningManager) -> Iterator[ControlInstance]:
    """The control controller instance, active before the bad callers arrive."""
    instance = ControlInstance(fault_manager.address, f"control-{uuid.uuid4().hex[:6]}")
    try:
        instance.wait_acks(1)
        yield instance
    finally:
        instance.close()
