"""Fixtures and scenarios of the bootstrapsigner's and the tokencleaner's tests.

Steward's controllers run in this process against ``id_cluster`` (where upstream's are
off, as by default) as their own identities, with only the RBAC of
``deploy/rbac/controller-bootstrapsigner.yaml`` and ``controller-tokencleaner.yaml``.
The session's ``cluster`` does not run upstream's either (off by default), so the
reference side, ``bootstrap_up``, is that cluster with a second kube-controller-manager
of the module's own running only ``bootstrapsigner`` and ``tokencleaner``
(:mod:`tests.controllers.identity.kcm`); ``kube-public/cluster-info``, which the
scenarios write there, is removed after the module.

Token ids are random per test and the same on both sides; a scenario removes its
Secrets at the end. ``kube-public/cluster-info`` (one per cluster; no kubeadm here makes
it) is written by the scenario with a kubeconfig of its own.
"""

from __future__ import annotations

import base64
import contextlib
import random
import string
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest
import pytest_asyncio

from steward.cluster import LocalCluster
from steward.controllers.bootstrap import cleaner, signer
from steward.kube import KubeClient, NotFoundError
from tests.controllers.harness import Starter, admin_kube, controllers, eventually, in_loop_informer
from tests.controllers.identity.kcm import controller_manager

WITHIN = 60.0
"""Seconds a side may take to reach a scenario's point (a deadline, not a measurement)."""
SECRETS = "/api/v1/namespaces/kube-system/secrets"
CLUSTER_INFO = "/api/v1/namespaces/kube-public/configmaps/cluster-info"


@pytest.fixture(scope="module")
def bootstrap_up(
    cluster: LocalCluster, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[LocalCluster]:
    """The session's cluster with upstream's bootstrapsigner and tokencleaner (off by
    default) running for the module: the reference side."""
    log = tmp_path_factory.mktemp("bootstrap-up") / "kube-controller-manager.log"
    with controller_manager(cluster, "bootstrapsigner,tokencleaner", log):
        try:
            yield cluster
        finally:
            for api in admin_kube(cluster):
                with contextlib.suppress(NotFoundError):
                    api.request("DELETE", CLUSTER_INFO)


@pytest.fixture
def up_kube(bootstrap_up: LocalCluster) -> Iterator[KubeClient]:
    """Admin client of ``bootstrap_up``."""
    yield from admin_kube(bootstrap_up)


@pytest_asyncio.fixture
async def signer_controllers(id_cluster: LocalCluster) -> AsyncIterator[Starter]:
    """Starts Steward's bootstrapsigner against ``id_cluster`` as its own identity."""
    identity = id_cluster.component_kubeconfig("controller-bootstrapsigner")
    async with (
        in_loop_informer(id_cluster) as informer,
        controllers(signer.CONTROLLER, identity, informer, "", workers=1) as starter,
    ):
        yield starter


@pytest_asyncio.fixture
async def cleaner_controllers(id_cluster: LocalCluster) -> AsyncIterator[Starter]:
    """Starts Steward's tokencleaner against ``id_cluster`` (kube-system, its namespace)
    as its own identity."""
    identity = id_cluster.component_kubeconfig("controller-tokencleaner")
    async with (
        in_loop_informer(id_cluster) as informer,
        controllers(cleaner.CONTROLLER, identity, informer, "kube-system", workers=1) as starter,
    ):
        yield starter


@pytest.fixture
def token_ids() -> list[str]:
    """Six fresh token ids, the same on both sides."""
    alphabet = string.ascii_lowercase + string.digits
    return ["".join(random.choices(alphabet, k=6)) for _ in range(6)]


# Objects --------------------------------------------------------------------------------
def rfc3339(offset: float) -> str:
    """The time ``offset`` seconds from now, as a token's ``expiration``."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + offset))


def token_secret(
    token_id: str,
    *,
    expiration: str | None = None,
    signing: str | None = "true",
    secret_type: str = "bootstrap.kubernetes.io/token",
) -> dict[str, Any]:
    data = {"token-id": token_id, "token-secret": f"{token_id}0123456789"[:16]}
    if expiration is not None:
        data["expiration"] = expiration
    if signing is not None:
        data["usage-bootstrap-signing"] = signing
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": f"bootstrap-token-{token_id}"},
        "type": secret_type,
        "stringData": data,
    }


def secret_of(token_id: str) -> str:
    return f"{token_id}0123456789"[:16]


def secret_exists(kube: KubeClient, token_id: str) -> bool:
    try:
        kube.request("GET", f"{SECRETS}/bootstrap-token-{token_id}")
    except NotFoundError:
        return False
    return True


def delete_tokens(kube: KubeClient, *token_ids: str) -> None:
    for token_id in token_ids:
        with contextlib.suppress(NotFoundError):
            kube.request("DELETE", f"{SECRETS}/bootstrap-token-{token_id}")


@contextlib.contextmanager
def tokens_removed(kube: KubeClient, *token_ids: str) -> Iterator[None]:
    try:
        yield
    finally:
        delete_tokens(kube, *token_ids)


def write_cluster_info(kube: KubeClient, kubeconfig: str) -> None:
    """``cluster-info`` holding only ``kubeconfig`` (made if missing)."""
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cluster-info", "namespace": "kube-public"},
        "data": {"kubeconfig": kubeconfig},
    }
    try:
        current = kube.request("GET", CLUSTER_INFO)
    except NotFoundError:
        kube.request("POST", "/api/v1/namespaces/kube-public/configmaps", body)
        return
    body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
    kube.request("PUT", CLUSTER_INFO, body)


def signatures(kube: KubeClient, token_ids: list[str]) -> dict[str, str]:
    """The ``jws-kubeconfig-<id>`` entries of ``cluster-info`` for ``token_ids``."""
    try:
        data = kube.request("GET", CLUSTER_INFO).get("data") or {}
    except NotFoundError:
        return {}
    keys = {f"jws-kubeconfig-{t}" for t in token_ids}
    return {k: v for k, v in data.items() if k in keys}


def kubeconfig_text(server: str) -> str:
    return (
        "apiVersion: v1\nkind: Config\nclusters:\n- name: ''\n  cluster:\n"
        f"    certificate-authority-data: {base64.b64encode(b'ca').decode()}\n"
        f"    server: {server}\n"
    )


# Scenarios ------------------------------------------------------------------------------
Steps = list[tuple[str, dict[str, str]]]


async def signing(kube: KubeClient, ids: list[str]) -> Steps:
    """Tokens that sign and tokens that must not (usage not "true", no usage, expired,
    a Secret of another type, a token id unlike its name); the kubeconfig changed; a
    token deleted. The snapshot is cluster-info's signatures of these ids at each step."""
    good, other, not_usage, no_usage, expired, opaque = ids
    steps: Steps = []
    with tokens_removed(kube, *ids):
        write_cluster_info(kube, kubeconfig_text("https://one.example:6443"))
        kube.request("POST", SECRETS, token_secret(not_usage, signing="false"))
        kube.request("POST", SECRETS, token_secret(no_usage, signing=None))
        kube.request("POST", SECRETS, token_secret(expired, expiration=rfc3339(-3600)))
        kube.request("POST", SECRETS, token_secret(opaque, secret_type="Opaque"))
        mismatched = token_secret(other, expiration=rfc3339(3600))
        mismatched["stringData"]["token-id"] = good
        kube.request("POST", SECRETS, mismatched)
        kube.request("POST", SECRETS, token_secret(good, expiration=rfc3339(3600)))
        steps.append(
            (
                "signed",
                await eventually(lambda: signatures(kube, ids), "a signature", WITHIN),
            )
        )
        write_cluster_info(kube, kubeconfig_text("https://two.example:6443"))
        first = steps[0][1]
        steps.append(
            (
                "kubeconfig changed",
                await eventually(
                    lambda: (s := signatures(kube, ids)) and s != first and s,
                    "a new signature",
                    WITHIN,
                ),
            )
        )
        delete_tokens(kube, good)
        await eventually(
            lambda: not signatures(kube, ids), "the signature of a deleted token gone", WITHIN
        )
        steps.append(("token deleted", signatures(kube, ids)))
    return steps


async def cleaning(kube: KubeClient, ids: list[str]) -> dict[str, bool]:
    """Expired tokens (past, unparseable) deleted; one expiring in a few seconds deleted
    soon after it expires, kept until then; tokens without expiration or expiring later,
    and an expired Secret of another type, kept. The snapshot: which still exist."""
    past, garbled, soon, later, never, opaque = ids
    with tokens_removed(kube, *ids):
        kube.request("POST", SECRETS, token_secret(past, expiration=rfc3339(-60)))
        kube.request("POST", SECRETS, token_secret(garbled, expiration="tomorrow"))
        kube.request("POST", SECRETS, token_secret(soon, expiration=rfc3339(6)))
        kube.request("POST", SECRETS, token_secret(later, expiration=rfc3339(3600)))
        kube.request("POST", SECRETS, token_secret(never))
        kube.request(
            "POST", SECRETS, token_secret(opaque, expiration=rfc3339(-60), secret_type="Opaque")
        )
        expires = time.time() + 5
        await eventually(
            lambda: not secret_exists(kube, past) and not secret_exists(kube, garbled),
            "the expired tokens deleted",
            WITHIN,
        )
        if time.time() < expires:
            assert secret_exists(kube, soon), "a token deleted before it expired"
        await eventually(lambda: not secret_exists(kube, soon), "the token that expired", WITHIN)
        return {t: secret_exists(kube, t) for t in ids}
