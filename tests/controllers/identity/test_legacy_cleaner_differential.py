"""The legacy token cleaner against upstream's: the same service accounts, token Secrets
(their last-used and invalid-since labels, annotations, types) and pod in two
namespaces of ``id_cluster``, where no tokens controller or cleaner runs; then
Steward's cleaner over one namespace and upstream's (a kube-controller-manager of the
test's own running only ``legacy-service-account-token-cleaner``) started, each with a
one-second clean-up period, each after the objects are more than a period old: the same
Secrets deleted, the same labelled, the same left as they were, field by field.

Both cleaners evaluate at their start (then every 24 hours), so they run one after the
other: Steward's first, watching its namespace only, then upstream's, which looks at
every namespace (Steward's too, once its snapshot is taken). Masked: the date a cleaner
writes in ``kubernetes.io/legacy-token-invalid-since`` (its clock's day; the same but
across midnight) and the service account UID in the annotations (each namespace's
account has its own)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Iterator
from pathlib import Path

import pytest

from steward.cluster import LocalCluster
from steward.kube import KubeClient
from tests.controllers.identity.satokens import (
    legacy_cases,
    legacy_outcomes,
    legacy_settled,
    make_legacy_cases,
    plain_namespace,
    release_held,
    steward_legacy_cleaner,
    today,
    tracked_long_ago,
    upstream_legacy_cleaner,
)

__all__ = ["tracked_long_ago"]

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

PERIOD = "--legacy-service-account-token-clean-up-period=1s"


@pytest.fixture
def two_namespaces(
    id_kube: KubeClient, request: pytest.FixtureRequest
) -> Iterator[tuple[str, str]]:
    """Two fresh namespaces of ``id_cluster``: Steward's side's and upstream's."""
    with (
        contextlib.contextmanager(plain_namespace)(id_kube, request) as steward,
        contextlib.contextmanager(plain_namespace)(id_kube, request) as upstream,
    ):
        yield steward, upstream


async def test_same_as_upstream(
    id_cluster: LocalCluster,
    id_kube: KubeClient,
    two_namespaces: tuple[str, str],
    tracked_long_ago: None,
    tmp_path: Path,
) -> None:
    steward_ns, upstream_ns = two_namespaces
    days = {today()}
    cases = legacy_cases(today())
    try:
        await asyncio.gather(
            asyncio.to_thread(make_legacy_cases, id_kube, steward_ns, cases),
            asyncio.to_thread(make_legacy_cases, id_kube, upstream_ns, cases),
        )
        # Every Secret created more than a period ago (creationTimestamp is in seconds).
        await asyncio.sleep(1.5)
        async with steward_legacy_cleaner(id_cluster, steward_ns, PERIOD):
            steward = await legacy_settled(id_kube, steward_ns, cases, days)
        log = tmp_path / "legacy-cleaner.log"
        async with upstream_legacy_cleaner(id_cluster, log, PERIOD):
            upstream = await legacy_settled(id_kube, upstream_ns, cases, days)
        assert legacy_outcomes(upstream, cases, days) == {n: c.outcome for n, c in cases.items()}
        for part in ("secrets", "accounts", "pods", "events"):  # one part at a time: a short diff
            assert steward[part] == upstream[part], part
    finally:
        release_held(id_kube, steward_ns, cases)
        release_held(id_kube, upstream_ns, cases)
