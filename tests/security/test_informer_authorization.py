"""The informer never widens access: a caller may Watch, List and Get only what its own
identity may list, watch and get in kube-apiserver, namespace by namespace, and an open
Watch ends PERMISSION_DENIED once the permission is revoked."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from functools import partial

import grpc
import pytest
from kubernetes import client

from steward.v1 import informer_pb2 as pb
from steward.v1 import informer_pb2_grpc as pb_grpc
from tests.informer.conftest import RunningInformer, WatchReader
from tests.security.conftest import (
    CONFIGMAPS,
    RECHECK,
    SECRETS,
    Channels,
    Pki,
    Rbac,
    first_error,
    rand,
    rpc_error,
)

pytestmark = pytest.mark.integration

PERMISSION_DENIED = grpc.StatusCode.PERMISSION_DENIED


@pytest.fixture
def other_namespace(core: client.CoreV1Api) -> Iterator[str]:
    name = f"security-other-{uuid.uuid4().hex[:6]}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        core.delete_namespace(name)


def put_objects(core: client.CoreV1Api, namespace: str) -> None:
    """A Secret ``s`` and a ConfigMap ``cm`` in ``namespace``."""
    meta = client.V1ObjectMeta(name="s")
    core.create_namespaced_secret(namespace, client.V1Secret(metadata=meta, string_data={"k": "v"}))
    meta = client.V1ObjectMeta(name="cm")
    core.create_namespaced_config_map(namespace, client.V1ConfigMap(metadata=meta, data={"k": "v"}))


def watch_request(rtype: pb.ResourceType, namespace: str = "") -> pb.WatchRequest:
    return pb.WatchRequest(targets=[pb.WatchTarget(type=rtype)], namespace=namespace)


def snapshot_names(
    stub: pb_grpc.InformerServiceStub, rtype: pb.ResourceType, namespace: str
) -> set[str]:
    """Names in the initial events of a Watch, which must be allowed."""
    call = stub.Watch(watch_request(rtype, namespace), timeout=60)
    names: set[str] = set()
    try:
        for response in call:
            for event in response.events:
                if event.type == pb.EVENT_TYPE_INITIAL_EVENTS_END:
                    return names
                names.add(event.metadata.name)
    finally:
        call.cancel()
    pytest.fail("the Watch ended before its initial events")


def assert_denied(err: grpc.RpcError, user: str, verbs: str, resource: str) -> None:
    """PERMISSION_DENIED naming the user, the resource and one of ``verbs`` (a Watch
    needs both list and watch; whichever is found missing first is named)."""
    details = err.details() or ""
    assert err.code() == PERMISSION_DENIED, f"{err.code()}: {details}"
    assert user in details, details
    assert any(f"may not {verb} {resource}" in details for verb in verbs.split("|")), details


def test_a_caller_without_list_secrets_is_refused_secrets(
    secure_informer: RunningInformer,
    pki: Pki,
    rbac: Rbac,
    channels: Channels,
    core: client.CoreV1Api,
    namespace: str,
) -> None:
    user = f"test:no-secrets-{rand()}"
    role = rbac.cluster_role(
        [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}]
    )
    rbac.bind(role, user)
    rbac.wait_allowed(user, "watch", "configmaps")
    assert not rbac.allowed(user, "list", "secrets", namespace)
    put_objects(core, namespace)
    stub = channels.informer(pki.client(user), secure_informer.address)

    # The informer itself may list every Secret; the caller may not, so neither here.
    for where in ("", namespace):
        err = first_error(stub.Watch(watch_request(SECRETS, where), timeout=30))
        assert_denied(err, user, "list", "secrets")
        assert (f"in namespace {namespace!r}" if where else "cluster-wide") in (err.details() or "")
    err = rpc_error(
        lambda: stub.List(pb.ListRequest(type=SECRETS, namespace=namespace), timeout=30)
    )
    assert_denied(err, user, "list", "secrets")
    err = rpc_error(lambda: stub.List(pb.ListRequest(type=SECRETS), timeout=30))
    assert_denied(err, user, "list", "secrets")
    err = rpc_error(
        lambda: stub.Get(pb.GetRequest(type=SECRETS, namespace=namespace, name="s"), timeout=30)
    )
    assert_denied(err, user, "get", "secrets")

    # What its role grants is served.
    assert "cm" in snapshot_names(stub, CONFIGMAPS, namespace)
    assert "cm" in snapshot_names(stub, CONFIGMAPS, "")
    listed = stub.List(pb.ListRequest(type=CONFIGMAPS, namespace=namespace), timeout=30)
    assert "cm" in {item.metadata.name for item in listed.items}
    got = stub.Get(pb.GetRequest(type=CONFIGMAPS, namespace=namespace, name="cm"), timeout=30)
    assert got.object.metadata.name == "cm"


def test_a_role_binding_allows_its_namespace_only(
    secure_informer: RunningInformer,
    pki: Pki,
    rbac: Rbac,
    channels: Channels,
    core: client.CoreV1Api,
    namespace: str,
    other_namespace: str,
) -> None:
    user = f"test:ns-secrets-{rand()}"
    role = rbac.cluster_role(
        [{"apiGroups": [""], "resources": ["secrets"], "verbs": ["get", "list", "watch"]}]
    )
    rbac.bind(role, user, namespace)
    rbac.wait_allowed(user, "watch", "secrets", namespace)
    put_objects(core, namespace)
    put_objects(core, other_namespace)
    stub = channels.informer(pki.client(user), secure_informer.address)

    # Allowed in its namespace: all three calls serve the Secret.
    assert snapshot_names(stub, SECRETS, namespace) >= {"s"}
    listed = stub.List(pb.ListRequest(type=SECRETS, namespace=namespace), timeout=30)
    assert {item.metadata.name for item in listed.items} >= {"s"}
    assert all(item.metadata.namespace == namespace for item in listed.items)
    got = stub.Get(pb.GetRequest(type=SECRETS, namespace=namespace, name="s"), timeout=30)
    assert got.object.metadata.namespace == namespace

    # Denied in the other namespace and across all namespaces.
    for where in (other_namespace, ""):
        err = first_error(stub.Watch(watch_request(SECRETS, where), timeout=30))
        assert_denied(err, user, "list", "secrets")
        err = rpc_error(partial(stub.List, pb.ListRequest(type=SECRETS, namespace=where)))
        assert_denied(err, user, "list", "secrets")
    err = rpc_error(
        lambda: stub.Get(pb.GetRequest(type=SECRETS, namespace=other_namespace, name="s"))
    )
    assert_denied(err, user, "get", "secrets")


def test_a_revoked_role_binding_ends_the_watch(
    secure_informer: RunningInformer,
    pki: Pki,
    rbac: Rbac,
    channels: Channels,
    core: client.CoreV1Api,
    namespace: str,
) -> None:
    user = f"test:revoked-{rand()}"
    role = rbac.cluster_role(
        [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list", "watch"]}]
    )
    binding = rbac.bind(role, user, namespace)
    rbac.wait_allowed(user, "watch", "configmaps", namespace)
    stub = channels.informer(pki.client(user), secure_informer.address)
    reader = WatchReader(stub, watch_request(CONFIGMAPS, namespace))
    try:
        reader.snapshot()
        # Still open and served after several re-checks while the binding stands.
        time.sleep(3 * RECHECK)
        meta = client.V1ObjectMeta(name="after")
        core.create_namespaced_config_map(namespace, client.V1ConfigMap(metadata=meta))
        reader.until(lambda e: e.metadata.name == "after")
        assert not reader.ended.is_set(), reader.error

        rbac.unbind(binding, namespace)
        assert reader.ended.wait(60), "the Watch outlived its RoleBinding"
        assert reader.error is not None, "the Watch ended without an error"
        assert_denied(reader.error, user, "list|watch", "configmaps")
    finally:
        reader.cancel()


def test_a_caller_cannot_probe_which_types_exist(
    secure_informer: RunningInformer, pki: Pki, rbac: Rbac, channels: Channels, namespace: str
) -> None:
    """The caller is authorized before the type is looked up (as kube-apiserver does): one
    without access is refused a type that does not exist exactly as one that does, while
    one with access learns that it does not exist."""
    user = f"test:configmaps-only-{rand()}"
    role = rbac.cluster_role(
        [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}]
    )
    rbac.bind(role, user)
    rbac.wait_allowed(user, "watch", "configmaps")
    stub = channels.informer(pki.client(user), secure_informer.address)
    missing = pb.ResourceType(group="no-such.example.com", version="v1", resource="widgets")
    for rtype, resource in ((missing, "widgets.no-such.example.com"), (SECRETS, "secrets")):
        err = first_error(stub.Watch(watch_request(rtype, namespace), timeout=30))
        assert_denied(err, user, "list", resource)
        err = rpc_error(partial(stub.List, pb.ListRequest(type=rtype, namespace=namespace)))
        assert_denied(err, user, "list", resource)
        get = pb.GetRequest(type=rtype, namespace=namespace, name="x")
        err = rpc_error(partial(stub.Get, get))
        assert_denied(err, user, "get", resource)

    widgets = f"test:widgets-{rand()}"
    rbac.bind(
        rbac.cluster_role(
            [{"apiGroups": [missing.group], "resources": ["widgets"], "verbs": ["list", "watch"]}]
        ),
        widgets,
    )
    rbac.wait_allowed(widgets, "watch", "widgets", group=missing.group)
    allowed = channels.informer(pki.client(widgets), secure_informer.address)
    err = first_error(allowed.Watch(watch_request(missing, namespace), timeout=30))
    assert err.code() == grpc.StatusCode.NOT_FOUND, err.details()
    assert "unknown resource type" in (err.details() or "")
