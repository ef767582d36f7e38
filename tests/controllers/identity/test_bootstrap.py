"""Steward's bootstrapsigner and tokencleaner against ``id_cluster``, side by side with
upstream's (``bootstrap_up``: the session's cluster with a kube-controller-manager of the
module's own running both)."""

from __future__ import annotations

import asyncio

import pytest

from steward.controllers.bootstrap.tokens import detached_signature
from steward.kube import KubeClient
from tests.controllers.harness import Starter, stays
from tests.controllers.identity.bootstrap import (
    SECRETS,
    bootstrap_up,
    cleaner_controllers,
    cleaning,
    kubeconfig_text,
    rfc3339,
    secret_exists,
    secret_of,
    signatures,
    signer_controllers,
    signing,
    token_ids,
    token_secret,
    tokens_removed,
    up_kube,
    write_cluster_info,
)

__all__ = ["bootstrap_up", "cleaner_controllers", "signer_controllers", "token_ids", "up_kube"]

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]


async def test_signatures_as_upstream(
    up_kube: KubeClient, id_kube: KubeClient, signer_controllers: Starter, token_ids: list[str]
) -> None:
    """Only the token that may sign signs; the signature follows the kubeconfig and goes
    with the token: the same bytes as upstream's at each step, and the JWS of the spec."""
    signer_controllers.start()
    upstream, steward = await asyncio.gather(
        signing(up_kube, token_ids), signing(id_kube, token_ids)
    )
    good = token_ids[0]
    key = f"jws-kubeconfig-{good}"
    assert upstream[0][1] == {
        key: detached_signature(
            kubeconfig_text("https://one.example:6443"), good, secret_of(good).encode()
        )
    }
    assert upstream[1][1] == {
        key: detached_signature(
            kubeconfig_text("https://two.example:6443"), good, secret_of(good).encode()
        )
    }
    assert upstream[2][1] == {}
    assert steward == upstream


async def test_cluster_info_unsigned_without_the_signer(
    id_kube: KubeClient, token_ids: list[str]
) -> None:
    """The control: nothing else signs cluster-info in id_cluster."""
    good = token_ids[0]
    with tokens_removed(id_kube, good):
        write_cluster_info(id_kube, kubeconfig_text("https://three.example:6443"))
        id_kube.request("POST", SECRETS, token_secret(good))
        await stays(lambda: not signatures(id_kube, [good]), "cluster-info unsigned", 3.0)


async def test_expired_tokens_deleted_as_upstream(
    up_kube: KubeClient, id_kube: KubeClient, cleaner_controllers: Starter, token_ids: list[str]
) -> None:
    """Expired and unparseable tokens go at once, a token expiring in seconds soon after
    (not before); later, never-expiring and non-token Secrets stay: as upstream's."""
    cleaner_controllers.start()
    upstream, steward = await asyncio.gather(
        cleaning(up_kube, token_ids), cleaning(id_kube, token_ids)
    )
    past, garbled, soon, later, never, opaque = token_ids
    assert upstream == {
        past: False,
        garbled: False,
        soon: False,
        later: True,
        never: True,
        opaque: True,
    }
    assert steward == upstream


async def test_expired_token_kept_without_the_cleaner(
    id_kube: KubeClient, token_ids: list[str]
) -> None:
    """The control: nothing else deletes expired tokens in id_cluster."""
    past = token_ids[0]
    with tokens_removed(id_kube, past):
        id_kube.request("POST", SECRETS, token_secret(past, expiration=rfc3339(-60)))
        await stays(lambda: secret_exists(id_kube, past), "the expired token kept", 3.0)
