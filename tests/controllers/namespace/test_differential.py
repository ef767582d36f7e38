"""The same scenarios under upstream's namespace-controller (the session ``cluster``) and
under Steward's (``ns_cluster``), side by side: at each scenario's point the namespace's
conditions (type, status, reason, message; the namespace's name masked) must be what
upstream's deleter writes there (``EXPECTED``) and the same on both sides, and at the end
the namespace must be gone on both. The scenarios assert upstream's ordering (pods first,
nothing finalized while discovery fails) on each side themselves. These are the
controller's scenario tests: Steward's side is held to everything they check.

Both sides run at once; the suffix of the cluster-wide objects (a CRD's group, an
APIService) is shared, so messages that name them match."""

from __future__ import annotations

import asyncio

import pytest

from steward.kube import KubeClient
from tests.controllers.namespace.conftest import EXPECTED, SCENARIOS, Starter

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]


@pytest.mark.parametrize("scenario", sorted(SCENARIOS))
async def test_same_conditions_as_upstream(
    scenario: str,
    upstream_kube: KubeClient,
    upstream_namespace: str,
    ns_kube: KubeClient,
    ns_namespace: str,
    ns_controllers: Starter,
    suffix: str,
) -> None:
    run = SCENARIOS[scenario]
    ns_controllers.start()
    upstream, steward = await asyncio.gather(
        run(upstream_kube, upstream_namespace, suffix), run(ns_kube, ns_namespace, suffix)
    )
    assert upstream == EXPECTED[scenario](suffix)
    assert steward == upstream
