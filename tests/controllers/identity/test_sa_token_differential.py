"""The token scenario under upstream's serviceaccount-token controller (the session's
``cluster``) and under Steward's (``id_cluster``): what each wrote must be the same, field
by field (the Secret's type, data keys, labels and annotations; the token's header keys,
algorithm and claims), with names and UIDs masked; each token's signature is checked with
its own cluster's public key, its kid is that key's, and each cluster's TokenReview says
the same user."""

from __future__ import annotations

import pytest

from steward.cluster import LocalCluster
from steward.kube import KubeClient
from tests.controllers.harness import Starter, upstream_kube, upstream_namespace
from tests.controllers.identity.satokens import (
    sa_namespace,
    token_controllers,
    token_flags,
    token_lifecycle,
)

__all__ = ["sa_namespace", "token_controllers", "upstream_kube", "upstream_namespace"]

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]


async def test_token_lifecycle_matches_upstream(
    cluster: LocalCluster,
    upstream_kube: KubeClient,
    upstream_namespace: str,
    id_cluster: LocalCluster,
    id_kube: KubeClient,
    sa_namespace: str,
    token_controllers: Starter,
) -> None:
    token_controllers.start(*token_flags(id_cluster))
    upstream = await token_lifecycle(upstream_kube, upstream_namespace, cluster)
    steward = await token_lifecycle(id_kube, sa_namespace, id_cluster)
    assert steward == upstream
    assert upstream["kid is the public key's"] is True
    assert upstream["ca.crt is the root CA"] is True
