"""``--resource-quota-sync-period``: the full recalculation of every quota, the one thing
that mends a ``status.used`` someone overwrote.

A write of a quota's status with ``spec.hard`` unchanged queues nothing (upstream's
update handler, pkg/controller/resourcequota/resource_quota_controller.go, compares
``spec.hard`` alone: the status is the controller's own), and nothing counted changed,
so no replenishment comes either; only ``enqueueAll``, every sync period, looks at the
quota again. Steward's controller runs here as its process does (the host's command
line, :func:`steward.runtime.host.serve`), so the flag is read where a deployment gives
it.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

import pytest

from steward.cluster import LocalCluster
from steward.controllers.resourcequota.controller import CONTROLLER
from steward.kube import KubeClient
from steward.runtime.host import parser_for, serve
from steward.security import client_from_args
from tests.controllers.harness import in_loop_informer, stays
from tests.controllers.quota.quotas import (
    IDENTITY,
    WORKERS,
    patch_status,
    path,
    quota,
    status_of,
    wait_used,
)

pytestmark = pytest.mark.integration

PERIOD = "2s"
"""The short sync period (a Go duration, as kube-controller-manager's flag takes it)."""
HOLD = 4.0
"""Seconds the overwritten status must stay under the default period (5m0s): two short
periods."""
RIGHT = {"configmaps": "1"}
"""What the quota counts: the namespace's kube-root-ca.crt."""
WRONG = {"configmaps": "7"}
"""What the test writes over it."""


@contextlib.asynccontextmanager
async def hosted_controller(
    plane: LocalCluster, informer: str, namespace: str, *flags: str
) -> AsyncIterator[None]:
    """Steward's controller as its process runs it (the host's flags and ``flags``),
    watching ``namespace``, until the block ends; one that died on its own raises then."""
    args = parser_for(CONTROLLER).parse_args(
        [
            f"--kubeconfig={plane.component_kubeconfig(IDENTITY)}",
            f"--informer={informer}",
            "--insecure-plaintext",
            f"--namespace={namespace}",
            f"--workers={WORKERS}",
            *flags,
        ]
    )
    args.security = client_from_args(args)
    task = asyncio.create_task(serve(CONTROLLER, args))
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task


@pytest.mark.asyncio
async def test_sync_period_mends_an_overwritten_status(
    quota_cluster: LocalCluster, quota_kube: KubeClient, quota_namespace: str
) -> None:
    """A quota's status.used overwritten (a status PATCH, spec untouched): under the
    default period it stays wrong for two short periods; under
    ``--resource-quota-sync-period=2s`` the same overwrite, made after the controller's
    first sync, is put right.

    Catches: the flag not reaching the resync (a wrong dest, the periodic re-queue never
    started, a Go duration misread), a sync that leaves a used differing from its count
    in value alone, and, in the first half, a status write that queues the quota (an
    update filter looking past spec.hard) or a default period of seconds."""
    kube, ns = quota_kube, quota_namespace
    url = path(ns, "resourcequotas", "q")
    body = quota("q", {"configmaps": "5"})
    await asyncio.to_thread(kube.request, "POST", path(ns, "resourcequotas"), body)

    def overwritten() -> bool:
        return status_of(kube, ns, "q").get("used") == WRONG

    async def overwrite() -> None:
        await asyncio.to_thread(wait_used, "steward", kube, ns, "q", RIGHT)  # the first sync
        written = await asyncio.to_thread(patch_status, kube, url, {"used": WRONG})
        assert written["status"]["used"] == WRONG

    async with in_loop_informer(quota_cluster) as informer:
        async with hosted_controller(quota_cluster, informer, ns):
            await overwrite()
            await stays(overwritten, "the overwritten used under the default period", HOLD)
        flag = f"--resource-quota-sync-period={PERIOD}"
        async with hosted_controller(quota_cluster, informer, ns, flag):
            await overwrite()
            await asyncio.to_thread(wait_used, "steward", kube, ns, "q", RIGHT)
