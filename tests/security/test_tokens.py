"""Bearer tokens: a projected-style ServiceAccount token for the audience ``steward`` is
the caller's identity (its ServiceAccount is what gets authorized, not the certificate
that carries it); a forged token, one for another audience and one whose ServiceAccount
is gone are refused UNAUTHENTICATED.

kube-apiserver issues no token shorter than 600 s, so the "expired" case is a token of a
deleted ServiceAccount: a bound token stops being valid when the object it is bound to
goes, which is the same refusal (the TokenReview no longer authenticates it)."""

from __future__ import annotations

import time
from pathlib import Path

import grpc
import pytest
from kubernetes import client

from steward.v1 import informer_pb2 as pb
from tests.informer.conftest import RunningInformer
from tests.security.conftest import (
    CACHE_TTL,
    CONFIGMAPS,
    SECRETS,
    Channels,
    Pki,
    Rbac,
    rand,
    rpc_error,
)

pytestmark = pytest.mark.integration


def service_account(core: client.CoreV1Api, namespace: str, name: str) -> str:
    core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name))
    )
    return f"system:serviceaccount:{namespace}:{name}"


def token(core: client.CoreV1Api, namespace: str, name: str, audience: str = "steward") -> str:
    """A token of ServiceAccount ``name`` from the TokenRequest API (as the kubelet gets a
    projected one), valid for 600 s."""
    request = core.create_namespaced_service_account_token(
        name,
        namespace,
        client.AuthenticationV1TokenRequest(
            spec=client.V1TokenRequestSpec(audiences=[audience], expiration_seconds=600)
        ),
    )
    return str(request.status.token)


def flip_signature(jwt: str) -> str:
    """``jwt`` with one character in the middle of its signature changed."""
    header, payload, signature = jwt.split(".")
    i = len(signature) // 2
    flipped = "A" if signature[i] != "A" else "B"
    return ".".join((header, payload, signature[:i] + flipped + signature[i + 1 :]))


class Caller:
    """Calls the informer with a client certificate of no permissions and a token file."""

    def __init__(
        self, informer: RunningInformer, pki: Pki, channels: Channels, directory: Path
    ) -> None:
        self.informer = informer
        self.pki = pki
        self.channels = channels
        self.directory = directory
        self.carrier = f"test:token-carrier-{rand()}"

    def list(self, token: str | None, rtype: pb.ResourceType, namespace: str) -> pb.ListResponse:
        path = None
        if token is not None:
            path = self.directory / f"token-{rand()}"
            path.write_text(token)
        security = self.pki.client(self.carrier, token_file=str(path) if path else None)
        stub = self.channels.informer(security, self.informer.address)
        return stub.List(pb.ListRequest(type=rtype, namespace=namespace), timeout=30)

    def refused(self, token: str | None, namespace: str) -> grpc.RpcError:
        return rpc_error(lambda: self.list(token, CONFIGMAPS, namespace))


@pytest.fixture
def caller(
    secure_informer: RunningInformer, pki: Pki, channels: Channels, tmp_path: Path
) -> Caller:
    return Caller(secure_informer, pki, channels, tmp_path)


@pytest.fixture
def reader_role(rbac: Rbac) -> str:
    return rbac.cluster_role(
        [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get", "list", "watch"]}]
    )


def test_a_service_account_token_is_the_callers_identity(
    caller: Caller, rbac: Rbac, reader_role: str, core: client.CoreV1Api, namespace: str
) -> None:
    user = service_account(core, namespace, "reader")
    rbac.bind(reader_role, user, namespace)
    rbac.wait_allowed(user, "list", "configmaps", namespace)
    core.create_namespaced_config_map(
        namespace, client.V1ConfigMap(metadata=client.V1ObjectMeta(name="cm"))
    )

    # The certificate alone names a user with no permissions.
    err = caller.refused(None, namespace)
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED, err.details()
    assert caller.carrier in (err.details() or "")

    # With the token, the ServiceAccount is the caller.
    jwt = token(core, namespace, "reader")
    listed = caller.list(jwt, CONFIGMAPS, namespace)
    assert "cm" in {item.metadata.name for item in listed.items}
    err = rpc_error(lambda: caller.list(jwt, SECRETS, namespace))
    details = err.details() or ""
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED, details
    assert f"{user} (token) may not list secrets" in details, details
    assert caller.carrier not in details


def test_forged_and_foreign_tokens_are_refused(
    caller: Caller, rbac: Rbac, reader_role: str, core: client.CoreV1Api, namespace: str
) -> None:
    user = service_account(core, namespace, "reader")
    rbac.bind(reader_role, user, namespace)
    rbac.wait_allowed(user, "list", "configmaps", namespace)
    genuine = token(core, namespace, "reader")
    caller.list(genuine, CONFIGMAPS, namespace)  # the genuine one is accepted

    forged = {
        "garbage": "not-a-token",
        "a flipped signature": flip_signature(genuine),
        "another audience": token(core, namespace, "reader", audience=f"other-{rand()}"),
    }
    for what, jwt in forged.items():
        err = caller.refused(jwt, namespace)
        assert err.code() == grpc.StatusCode.UNAUTHENTICATED, f"{what}: {err.details()}"
        assert "bearer token was not accepted" in (err.details() or ""), what


def test_the_token_of_a_deleted_service_account_is_refused(
    caller: Caller, rbac: Rbac, reader_role: str, core: client.CoreV1Api, namespace: str
) -> None:
    user = service_account(core, namespace, "gone")
    rbac.bind(reader_role, user, namespace)
    rbac.wait_allowed(user, "list", "configmaps", namespace)
    jwt = token(core, namespace, "gone")
    caller.list(jwt, CONFIGMAPS, namespace)  # accepted while the ServiceAccount exists

    core.delete_namespaced_service_account("gone", namespace)
    time.sleep(CACHE_TTL + 0.2)  # past the informer's cached TokenReview

    def refusal() -> grpc.RpcError | None:
        try:
            caller.list(jwt, CONFIGMAPS, namespace)
        except grpc.RpcError as err:
            return err
        return None

    deadline = time.monotonic() + 30
    while (err := refusal()) is None:
        # kube-apiserver looks the ServiceAccount up in its cache, which lags the delete.
        assert time.monotonic() < deadline, "the token outlived its ServiceAccount"
        time.sleep(0.5)
    assert err.code() == grpc.StatusCode.UNAUTHENTICATED, err.details()
    assert "bearer token was not accepted" in (err.details() or "")
