"""Steward's services for tests: an informer on a loop of its own, and the variables with
which a controller process dials them. A controller beside them in-process is
:mod:`tests.controllers.harness`'s."""

from __future__ import annotations

import asyncio
import contextlib
import threading
import time
import uuid
from collections.abc import Coroutine, Iterator
from typing import Any, TypeVar

import grpc
import pytest

from steward.cluster import LocalCluster
from steward.informer import InformerOptions, InformerServer
from steward.kube import KubeClient, NotFoundError
from steward.security import ClientSecurity
from steward.serving.security import ServingSecurity

_T = TypeVar("_T")


class RunningInformer:
    """An :class:`InformerServer` on its own event loop in a background thread."""

    def __init__(self, kubeconfig: str, security: ServingSecurity) -> None:
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="informer")
        self._thread.start()
        self.server = InformerServer(
            InformerOptions(security=security, listen="127.0.0.1:0", kubeconfig=kubeconfig)
        )
        try:
            self.address = f"127.0.0.1:{self._call(self.server.start())}"
        except BaseException:
            self._close_loop()
            raise

    def _call(self, coro: Coroutine[Any, Any, _T]) -> _T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(60.0)

    def _close_loop(self) -> None:
        # As asyncio.run ends a loop: async generators first (the API clients close their
        # connections there), then stop.
        with contextlib.suppress(Exception):
            asyncio.run_coroutine_threadsafe(self.loop.shutdown_asyncgens(), self.loop).result(30)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._thread.join(timeout=30)
        self.loop.close()

    def stop(self) -> None:
        try:
            self._call(self.server.stop(grace=1.0))
        finally:
            self._close_loop()


def new_namespace(kube: KubeClient, request: pytest.FixtureRequest) -> str:
    """A fresh namespace named after the test, once pods may be made in it (its default
    ServiceAccount exists)."""
    base = request.node.name.lower().replace("_", "-")
    name = "".join(c for c in base if c.isalnum() or c == "-")[:40].strip("-")
    name = f"{name}-{uuid.uuid4().hex[:6]}"
    kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    deadline = time.monotonic() + 120
    while True:  # pods are refused until the default ServiceAccount exists
        try:
            kube.request("GET", f"/api/v1/namespaces/{name}/serviceaccounts/default")
            return name
        except NotFoundError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)


def widget_crd_body(group: str) -> dict[str, Any]:
    """A CustomResourceDefinition of the namespaced type ``widgets.<group>`` (kind Widget,
    version v1, any content), the custom resource the tests make."""
    return {
        "apiVersion": "apiextensions.k8s.io/v1",
        "kind": "CustomResourceDefinition",
        "metadata": {"name": f"widgets.{group}"},
        "spec": {
            "group": group,
            "scope": "Namespaced",
            "names": {
                "plural": "widgets",
                "singular": "widget",
                "kind": "Widget",
                "listKind": "WidgetList",
            },
            "versions": [
                {
                    "name": "v1",
                    "served": True,
                    "storage": True,
                    "schema": {
                        "openAPIV3Schema": {
                            "type": "object",
                            "x-kubernetes-preserve-unknown-fields": True,
                        }
                    },
                }
            ],
        },
    }


def security_env(security: ClientSecurity) -> dict[str, str]:
    """The ``STEWARD_*`` variables with which a controller process dials as ``security``
    does (mutual TLS files)."""
    assert security.ca_file and security.cert_file and security.key_file
    return {
        "STEWARD_TLS_CA_FILE": security.ca_file,
        "STEWARD_TLS_CERT_FILE": security.cert_file,
        "STEWARD_TLS_KEY_FILE": security.key_file,
    }


def running_informer(kubeconfig: str, security: ServingSecurity) -> Iterator[str]:
    """For a fixture to yield from: a :class:`RunningInformer`'s address, stopped after."""
    running = RunningInformer(kubeconfig, security)
    try:
        yield running.address
    finally:
        running.stop()


def host_flags(informer: str, manager: str, kubeconfig: str, namespace: str) -> list[str]:
    """The standard flags with which every runtime's host (Python, Go, TypeScript) runs a
    controller against these services, watching ``namespace``."""
    return [
        "--informer",
        informer,
        "--manager",
        manager,
        "--kubeconfig",
        kubeconfig,
        "--namespace",
        namespace,
    ]


def serving(cluster: LocalCluster, address: str, service: str = "") -> bool:
    """The gRPC health service at ``address`` says SERVING (asked as the cluster's admin)
    for ``service`` (a service's full name; empty for the server as a whole)."""
    from grpc_health.v1 import health_pb2, health_pb2_grpc  # type: ignore[import-untyped]

    with cluster.client_security().sync_channel(address) as channel:
        try:
            reply = health_pb2_grpc.HealthStub(channel).Check(
                health_pb2.HealthCheckRequest(service=service), timeout=1.0
            )
        except grpc.RpcError:
            return False
        return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)
