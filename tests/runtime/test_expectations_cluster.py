"""Expectations against a real informer and API server: a controller that creates children
through ``ctx.expectations.create`` and lowers them in an observer declared on the builder
creates exactly as many as it wants, however its owner's key is re-queued while the
children's events are still on their way; an observer runs before the key of its change
is queued, so no reconcile sees a child's event without its expectation lowered."""

from __future__ import annotations

import asyncio
import contextlib
import time

import grpc
import pytest

import steward
from steward.cluster import LocalCluster
from steward.kube import load_access

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

CONFIGMAPS = steward.CONFIGMAPS
WANT = 12


def _child(obj: steward.MirrorObject) -> bool:
    ref = obj.controller_owner()
    return ref is not None and ref.name == "owner"


class Spawner:
    """Wants WANT children (ConfigMaps it controls) for the ConfigMap named ``owner``."""

    def __init__(self, ctx: steward.Context) -> None:
        self.ctx = ctx
        self.created = 0
        self.unlowered_seen = 0
        """Reconciles that ran after a child's ADDED event while its creation was still
        expected (the observer had not run first): must stay 0."""
        self._added: set[str] = set()

    def observe(self, change: steward.Change) -> None:
        """Runs after the runtime's expectation observer, before the key is queued."""
        if change.kind is steward.ChangeKind.ADDED and _child(change.obj):
            self._added.add(change.obj.name)

    async def reconcile(self, request: steward.Request) -> steward.Result:
        if request.name != "owner":
            return steward.Result()
        ns = request.namespace
        owner = self.ctx.mirror.get(CONFIGMAPS, ns, "owner")
        if owner is None:
            return steward.Result()
        key = (ns, "owner")
        children = [o for o in self.ctx.mirror.objects(CONFIGMAPS, ns) if _child(o)]
        adds, _ = self.ctx.expectations.pending(key)
        if adds > WANT - len(children):
            self.unlowered_seen += 1  # more pending than can still come: an event not lowered
        if not self.ctx.expectations.satisfied(key) or len(children) >= WANT:
            return steward.Result()
        kids = self.ctx.children(CONFIGMAPS)
        ref = kids.ref(owner.object)
        body = {"metadata": {"generateName": "child-", "ownerReferences": [ref]}}
        outcome = await kids.create_all(owner.object, [body] * (WANT - len(children)))
        self.created += outcome.succeeded
        return steward.Result()


async def test_children_are_created_exactly_once_with_the_observer_lowering_first(
    cluster: LocalCluster, namespace: str, dev_informer: str
) -> None:
    definition = (
        steward.ControllerBuilder[Spawner]("spawner")
        .for_(CONFIGMAPS)
        .owns(CONFIGMAPS, expect=True)
        .observe(Spawner.observe)
        .complete(Spawner)
    )
    api = steward.KubeClient(load_access(str(cluster.kubeconfig)))
    async with grpc.aio.insecure_channel(dev_informer) as channel:
        controller = definition.new(
            channel,
            api,
            steward.ControllerOptions(
                namespace=namespace, max_concurrent_reconciles=3, resync_period=0.05
            ),
        )
        task = asyncio.create_task(controller.run())
        try:
            await controller.mirror.wait_synced()
            await api.arequest(
                "POST",
                CONFIGMAPS.path(namespace),
                {"metadata": {"name": "owner"}},
            )
            spawner = controller.reconciler
            deadline = time.monotonic() + 60
            while time.monotonic() < deadline:
                listing = await api.arequest("GET", CONFIGMAPS.path(namespace))
                names = [i["metadata"]["name"] for i in listing["items"]]
                if (
                    sum(n.startswith("child-") for n in names) >= WANT
                    and len(spawner._added) >= WANT
                ):
                    break
                await asyncio.sleep(0.1)
            await asyncio.sleep(1.0)  # resyncs every 50 ms meanwhile: a second creation would show
            listing = await api.arequest("GET", CONFIGMAPS.path(namespace))
            children = [i for i in listing["items"] if i["metadata"]["name"].startswith("child-")]
            assert len(children) == WANT
            assert spawner.created == WANT
            assert spawner.unlowered_seen == 0
            assert controller.context.expectations.satisfied((namespace, "owner"))
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            api.close()
