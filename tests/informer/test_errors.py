"""Bad input gets the right status code and a message that says what is wrong; an
unreachable API server is UNAVAILABLE for List and Get while Watch streams recover."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import grpc
import pytest
from kubernetes import client

from steward.cluster import LocalCluster
from steward.v1 import informer_pb2 as pb
from tests.informer.conftest import (
    CONFIGMAPS,
    RunningInformer,
    WatchReader,
    eventually,
    kubeconfig_via,
)
from tests.informer.mirror import ADDED
from tests.informer.proxy import CuttableProxy

pytestmark = pytest.mark.integration

UNKNOWN = pb.ResourceType(group="nothing.example.com", version="v1", resource="gizmos")


def _code_and_message(call: Callable[[], object]) -> tuple[grpc.StatusCode, str]:
    with pytest.raises(grpc.RpcError) as caught:
        call()
    err = caught.value
    assert isinstance(err, grpc.Call)
    return err.code(), err.details() or ""


def _watch_error(
    informer: RunningInformer, request: pb.WatchRequest
) -> tuple[grpc.StatusCode, str]:
    return _code_and_message(lambda: next(iter(informer.stub.Watch(request, timeout=30))))


@pytest.mark.parametrize(
    ("request_fields", "code", "message"),
    [
        ({"targets": []}, grpc.StatusCode.INVALID_ARGUMENT, "targets is empty"),
        (
            {"targets": [pb.WatchTarget(type=UNKNOWN)]},
            grpc.StatusCode.NOT_FOUND,
            "gizmos",
        ),
        (
            {"targets": [pb.WatchTarget(type=pb.ResourceType(resource="pods"))]},
            grpc.StatusCode.INVALID_ARGUMENT,
            "version and resource are required",
        ),
        (
            {"targets": [pb.WatchTarget(type=CONFIGMAPS)], "label_selector": "app in (web"},
            grpc.StatusCode.INVALID_ARGUMENT,
            "unclosed '('",
        ),
        (
            {"targets": [pb.WatchTarget(type=CONFIGMAPS)], "field_selector": "spec.x=1"},
            grpc.StatusCode.INVALID_ARGUMENT,
            "unsupported field 'spec.x'",
        ),
        (
            {"targets": [pb.WatchTarget(type=CONFIGMAPS, resource_version="12abc")]},
            grpc.StatusCode.INVALID_ARGUMENT,
            "malformed targets[0].resource_version '12abc'",
        ),
        (
            {"targets": [pb.WatchTarget(type=CONFIGMAPS), pb.WatchTarget(type=CONFIGMAPS)]},
            grpc.StatusCode.INVALID_ARGUMENT,
            "named twice",
        ),
    ],
)
def test_bad_watch_requests(
    informer: RunningInformer,
    request_fields: dict[str, object],
    code: grpc.StatusCode,
    message: str,
) -> None:
    got_code, details = _watch_error(informer, pb.WatchRequest(**request_fields))  # type: ignore[arg-type]
    assert got_code == code
    assert message in details


def test_bad_list_and_get_requests(informer: RunningInformer, namespace: str) -> None:
    stub = informer.stub
    code, details = _code_and_message(lambda: stub.List(pb.ListRequest(type=UNKNOWN)))
    assert code == grpc.StatusCode.NOT_FOUND
    assert "gizmos" in details and "nothing.example.com" in details

    code, details = _code_and_message(
        lambda: stub.List(pb.ListRequest(type=CONFIGMAPS, label_selector="=x"))
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "missing label key" in details

    code, details = _code_and_message(
        lambda: stub.List(pb.ListRequest(type=CONFIGMAPS, page_token="not-a-token!"))
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "malformed page_token" in details

    first = stub.List(pb.ListRequest(type=CONFIGMAPS, page_size=1))
    assert first.next_page_token
    code, details = _code_and_message(
        lambda: stub.List(
            pb.ListRequest(
                type=CONFIGMAPS, page_size=1, namespace="other", page_token=first.next_page_token
            )
        )
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "different type, namespace" in details

    code, details = _code_and_message(
        lambda: stub.List(pb.ListRequest(type=CONFIGMAPS, page_size=-1))
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "page_size" in details

    code, details = _code_and_message(
        lambda: stub.Get(pb.GetRequest(type=CONFIGMAPS, namespace=namespace, name="missing"))
    )
    assert code == grpc.StatusCode.NOT_FOUND
    assert "'missing' not found" in details and namespace in details

    code, details = _code_and_message(lambda: stub.Get(pb.GetRequest(type=CONFIGMAPS, name="x")))
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "namespace is required" in details

    nodes = pb.ResourceType(version="v1", resource="nodes")
    code, details = _code_and_message(
        lambda: stub.Get(pb.GetRequest(type=nodes, namespace="x", name="kwok-node-0"))
    )
    assert code == grpc.StatusCode.INVALID_ARGUMENT and "cluster-scoped" in details
    assert stub.Get(pb.GetRequest(type=nodes, name="kwok-node-0")).object.metadata.name

    # The process survived every one of them.
    assert stub.List(pb.ListRequest(type=CONFIGMAPS, namespace=namespace)).resource_version


def test_unreachable_api_server(
    cluster: LocalCluster,
    tmp_path: Path,
    proxy: CuttableProxy,
    start_informer: Callable[..., RunningInformer],
    core: client.CoreV1Api,
    namespace: str,
) -> None:
    informer = start_informer(kubeconfig=str(kubeconfig_via(cluster, proxy.port, tmp_path)))
    reader = WatchReader(
        informer.stub,
        pb.WatchRequest(targets=[pb.WatchTarget(type=CONFIGMAPS)], namespace=namespace),
    )
    try:
        reader.snapshot()
        proxy.cut()
        # A type that is not cached yet cannot be served.
        services = pb.ResourceType(version="v1", resource="services")
        code, details = _code_and_message(lambda: informer.stub.List(pb.ListRequest(type=services)))
        assert code == grpc.StatusCode.UNAVAILABLE
        assert "API server" in details
        code, _ = _code_and_message(
            lambda: informer.stub.Get(pb.GetRequest(type=services, namespace="default", name="x"))
        )
        assert code == grpc.StatusCode.UNAVAILABLE
        # A cached type is still served from the cache.
        cached = informer.stub.List(pb.ListRequest(type=CONFIGMAPS, namespace=namespace))
        assert cached.resource_version

        core.create_namespaced_config_map(
            namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="while-away"))
        )
        proxy.heal()
        event = reader.until(lambda e: e.metadata.name == "while-away", timeout=120)[-1]
        assert event.type == ADDED
        assert not reader.ended.is_set()  # the stream stayed open throughout

        def listed() -> bool:
            try:
                return bool(informer.stub.List(pb.ListRequest(type=services)).resource_version)
            except grpc.RpcError as err:
                if not isinstance(err, grpc.Call) or err.code() != grpc.StatusCode.UNAVAILABLE:
                    raise
                return False

        eventually(listed, timeout=120, what="List to work again")
    finally:
        reader.cancel()
