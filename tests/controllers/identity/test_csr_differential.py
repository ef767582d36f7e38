"""The CSR scenarios under upstream's csrapproving and csrsigning (the session's
cluster, whose kube-controller-manager signs with its CA) and under Steward's (on
``id_cluster``, signing with that cluster's CA): the same requests on both sides, the same
conditions and the same certificates but for what must differ (names, serials, the CA's
own identity and expiry). And the cleaner's: the same CSRs on both sides, then upstream's
csrcleaner (a kube-controller-manager of its own on the session's cluster, whose sweep
at its start is the one looked at) and Steward's started: the same CSRs left, the same in
every field but who made them and when."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from steward.cluster import LocalCluster
from steward.kube import KubeClient
from tests.controllers.identity.csr import (
    EXPECTED,
    SCENARIOS,
    CsrControllers,
    after_cleaning,
    ca_certificate,
    cleaner_material,
    csr_controllers,
    expect_cleaned,
    steward_cleaner,
    suffix,
    upstream_cleaner,
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


async def test_cleaner_same_as_upstream(
    suffix: str,
    cluster: LocalCluster,
    upstream_kube: KubeClient,
    id_cluster: LocalCluster,
    id_kube: KubeClient,
    tmp_path: Path,
) -> None:
    """CSRs past and short of each of upstream's rules' deadlines (the conditions' times
    written in the past, certificates valid and expired written as a signer would), then
    each side's cleaner started: the same CSRs go and the same stay, unchanged. A CSR
    pending for more than 24 h cannot be made (its creationTimestamp is the server's);
    the unit tests have that rule."""
    material = cleaner_material(suffix)
    upstream, steward = await asyncio.gather(
        after_cleaning(
            upstream_kube, material, upstream_cleaner(cluster, tmp_path / "csrcleaner.log")
        ),
        after_cleaning(id_kube, material, steward_cleaner(id_cluster)),
    )
    expect_cleaned(upstream)
    assert steward == upstream
