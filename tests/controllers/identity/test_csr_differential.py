"""The CSR scenarios under upstream's csrapproving and csrsigning (the session's
cluster, whose kube-controller-manager signs with its CA) and under Steward's (on
``id_cluster``, signing with that cluster's CA): the same requests on both sides, the same
conditions and the same certificates but for what must differ (names, serials, the CA's
own identity and expiry)."""

from __future__ import annotations

import asyncio

import pytest

from steward.cluster import LocalCluster
from steward.kube import KubeClient
from tests.controllers.identity.csr import (
    EXPECTED,
    SCENARIOS,
    CsrControllers,
    ca_certificate,
    csr_controllers,
    suffix,
    upstream_kube,
)

__all__ = ["csr_controllers", "suffix", "upstream_kube"]

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
async def test_same_as_upstream(
    scenario: str,
    suffix: str,
    cluster: LocalCluster,
    upstream_kube: KubeClient,
    id_cluster: LocalCluster,
    id_kube: KubeClient,
    csr_controllers: CsrControllers,
) -> None:
    make, run = SCENARIOS[scenario]
    material = make(suffix)
    upstream, steward = await asyncio.gather(
        run(upstream_kube, ca_certificate(cluster), material),
        run(id_kube, ca_certificate(id_cluster), material),
    )
    EXPECTED[scenario](upstream)
    assert steward == upstream
