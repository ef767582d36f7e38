"""Fixtures of the security tests: an in-process informer and manager serving mutual TLS
with RBAC authorization against the session's local control plane, certificates issued
by the cluster's own CA (the one kube-apiserver trusts for client certificates), and
throwaway RBAC objects for the callers' identities.

The servers run as their own identities (``informer`` and ``manager`` kubeconfigs), whose
ClusterRoles in ``deploy/rbac/`` grant ``create`` of TokenReviews and SubjectAccessReviews;
nothing here widens them. Short cache and re-check periods keep the tests quick."""

from __future__ import annotations

import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest
from kubernetes import client

from steward.cluster import LocalCluster
from steward.cluster.pki import CertificateAuthority, KeyPair
from steward.informer import InformerOptions
from steward.manager import ManagerOptions
from steward.security import ClientSecurity
from steward.serving.security import ServerTLS, ServingSecurity
from steward.v1 import informer_pb2 as ipb
from steward.v1 import informer_pb2_grpc as ipb_grpc
from steward.v1 import manager_pb2_grpc as mpb_grpc
from tests.informer.conftest import RunningInformer, informer_kubeconfig
from tests.manager.conftest import FAST, RunningManager

CONFIGMAPS = ipb.ResourceType(group="", version="v1", resource="configmaps")
SECRETS = ipb.ResourceType(group="", version="v1", resource="secrets")

CACHE_TTL = 0.5
"""Seconds the servers reuse a TokenReview's or SubjectAccessReview's answer."""
RECHECK = 1.0
"""Seconds between re-authorizations of an open Watch."""


def rand() -> str:
    return uuid.uuid4().hex[:6]


def serving_security(tls: ServerTLS) -> ServingSecurity:
    return ServingSecurity(
        tls=tls, authorization="RBAC", cache_ttl=CACHE_TTL, recheck_interval=RECHECK
    )


@dataclass
class Pki:
    """The cluster's CA, issuing into a directory of the tests' own."""

    ca: CertificateAuthority
    directory: Path

    @property
    def ca_file(self) -> str:
        return str(self.ca.pair.cert)

    def server(self, name: str, common_name: str, directory: Path | None = None) -> ServerTLS:
        """A serving certificate for 127.0.0.1 and localhost, clients checked by the CA."""
        pair = self.ca.issue(
            name,
            common_name,
            dns=("localhost",),
            ips=("127.0.0.1",),
            server=True,
            directory=directory or self.directory,
        )
        return ServerTLS(str(pair.cert), str(pair.key), self.ca_file)

    def client_pair(self, user: str, orgs: tuple[str, ...] = ()) -> KeyPair:
        name = f"client-{user.replace(':', '-')}-{rand()}"
        return self.ca.issue(name, user, orgs=orgs, client=True, directory=self.directory)

    def client(self, user: str, token_file: str | None = None) -> ClientSecurity:
        """Dial as ``user`` (a client certificate with that common name)."""
        pair = self.client_pair(user)
        return ClientSecurity(
            ca_file=self.ca_file,
            cert_file=str(pair.cert),
            key_file=str(pair.key),
            token_file=token_file,
        )


@pytest.fixture(scope="package")
def pki(cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return Pki(
        CertificateAuthority.load(cluster.directory / "pki"),
        tmp_path_factory.mktemp("security-pki"),
    )


class Rbac:
    """RBAC objects created as admin for the tests' identities; all deleted at the end."""

    def __init__(self, api_client: client.ApiClient) -> None:
        self.rbac = client.RbacAuthorizationV1Api(api_client)
        self.authz = client.AuthorizationV1Api(api_client)
        self._undo: list[Callable[[], Any]] = []

    def cluster_role(self, rules: list[dict[str, Any]]) -> str:
        name = f"steward-test:{rand()}"
        self.rbac.create_cluster_role({"metadata": {"name": name}, "rules": rules})  # type: ignore[arg-type]
        self._undo.append(lambda: self.rbac.delete_cluster_role(name))
        return name

    @staticmethod
    def _subject(user: str) -> dict[str, str]:
        if user.startswith("system:serviceaccount:"):
            _, _, namespace, name = user.split(":", 3)
            return {"kind": "ServiceAccount", "name": name, "namespace": namespace}
        return {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": user}

    def bind(self, role: str, user: str, namespace: str = "") -> str:
        """Bind ClusterRole ``role`` to ``user``: a RoleBinding in ``namespace``, else a
        ClusterRoleBinding. Returns the binding's name."""
        name = f"steward-test-{rand()}"
        body = {
            "metadata": {"name": name},
            "roleRef": {
                "apiGroup": "rbac.authorization.k8s.io",
                "kind": "ClusterRole",
                "name": role,
            },
            "subjects": [self._subject(user)],
        }
        if namespace:
            self.rbac.create_namespaced_role_binding(namespace, body)  # type: ignore[arg-type]
            self._undo.append(lambda: self.unbind(name, namespace))
        else:
            self.rbac.create_cluster_role_binding(body)  # type: ignore[arg-type]
            self._undo.append(lambda: self.unbind(name))
        return name

    def unbind(self, name: str, namespace: str = "") -> None:
        try:
            if namespace:
                self.rbac.delete_namespaced_role_binding(name, namespace)
            else:
                self.rbac.delete_cluster_role_binding(name)
        except client.ApiException as err:
            if err.status != 404:
                raise

    def allowed(
        self,
        user: str,
        verb: str,
        resource: str,
        namespace: str = "",
        group: str = "",
        name: str = "",
    ) -> bool:
        """What kube-apiserver itself answers (a SubjectAccessReview as admin)."""
        groups = ["system:authenticated"]
        if user.startswith("system:serviceaccount:"):
            groups += ["system:serviceaccounts", f"system:serviceaccounts:{user.split(':')[2]}"]
        review = self.authz.create_subject_access_review(
            client.V1SubjectAccessReview(
                spec=client.V1SubjectAccessReviewSpec(
                    user=user,
                    groups=groups,
                    resource_attributes=client.V1ResourceAttributes(
                        verb=verb,
                        group=group,
                        resource=resource,
                        namespace=namespace or None,
                        name=name or None,
                    ),
                )
            )
        )
        return bool(review.status.allowed)

    def wait_allowed(
        self,
        user: str,
        verb: str,
        resource: str,
        namespace: str = "",
        group: str = "",
        name: str = "",
        expect: bool = True,
    ) -> None:
        """Until kube-apiserver's authorizer has seen the RBAC change (its cache lags the
        write), then until the servers' cached answers have expired."""
        deadline = time.monotonic() + 30
        while self.allowed(user, verb, resource, namespace, group, name) != expect:
            if time.monotonic() > deadline:
                pytest.fail(f"{user} {verb} {resource}: RBAC never said {expect}")
            time.sleep(0.1)
        time.sleep(CACHE_TTL + 0.2)

    def cleanup(self) -> None:
        for undo in reversed(self._undo):
            try:
                undo()
            except client.ApiException as err:
                if err.status != 404:
                    raise


@pytest.fixture
def rbac(api_client: client.ApiClient) -> Iterator[Rbac]:
    made = Rbac(api_client)
    try:
        yield made
    finally:
        made.cleanup()


@pytest.fixture(scope="package")
def secure_informer(cluster: LocalCluster, pki: Pki) -> Iterator[RunningInformer]:
    """An informer serving mTLS with RBAC authorization, as its own identity."""
    running = RunningInformer(
        InformerOptions(
            listen="127.0.0.1:0",
            kubeconfig=informer_kubeconfig(cluster),
            idle_grace=2.0,
            security=serving_security(pki.server("informer-serving", "steward-informer")),
        )
    )
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="package")
def manager_namespace(api_client: client.ApiClient) -> Iterator[str]:
    """The secure manager's namespace (its Leases)."""
    core = client.CoreV1Api(api_client)
    name = f"security-{rand()}"
    core.create_namespace(client.V1Namespace(metadata=client.V1ObjectMeta(name=name)))
    try:
        yield name
    finally:
        core.delete_namespace(name)


@pytest.fixture(scope="package")
def secure_manager(
    cluster: LocalCluster, pki: Pki, manager_namespace: str
) -> Iterator[RunningManager]:
    """A manager serving mTLS with RBAC authorization, as its own identity, leading."""
    running = RunningManager(
        ManagerOptions(
            listen="127.0.0.1:0",
            kubeconfig=str(cluster.component_kubeconfig("manager")),
            namespace=manager_namespace,
            timing=FAST,
            identity=f"manager-{rand()}",
            security=serving_security(pki.server("manager-serving", "steward-manager")),
        )
    )
    try:
        yield running
    finally:
        running.stop()


class Channels:
    """Secure channels opened by a test; all closed afterwards."""

    def __init__(self) -> None:
        self.opened: list[grpc.Channel] = []

    def open(self, security: ClientSecurity, address: str) -> grpc.Channel:
        channel = security.sync_channel(address)
        self.opened.append(channel)
        return channel

    def informer(self, security: ClientSecurity, address: str) -> ipb_grpc.InformerServiceStub:
        return ipb_grpc.InformerServiceStub(self.open(security, address))

    def manager(self, security: ClientSecurity, address: str) -> mpb_grpc.ManagerServiceStub:
        return mpb_grpc.ManagerServiceStub(self.open(security, address))


@pytest.fixture
def channels() -> Iterator[Channels]:
    made = Channels()
    try:
        yield made
    finally:
        for channel in made.opened:
            channel.close()


def rpc_error(call: Callable[[], object]) -> grpc.RpcError:
    """The error ``call`` ends with (it must not succeed)."""
    with pytest.raises(grpc.RpcError) as raised:
        call()
    return raised.value


def first_error(stream: Any) -> grpc.RpcError:
    """The error a server stream (a Watch) ends with; it must send nothing before."""

    def read() -> None:
        for response in stream:
            pytest.fail(f"served before the refusal: {response}")

    return rpc_error(read)
