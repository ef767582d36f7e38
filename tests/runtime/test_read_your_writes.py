"""Read your own writes, against a real informer: after the controller's own write, a read
during a reconcile never returns the mirror's older copy (StaleRead), outside a reconcile
it does, and once the write's event arrives the copy is current again. A controller built
by the runtime has its API client fenced and wired to its mirror by construction."""

from __future__ import annotations

import asyncio
import contextlib

import grpc
import pytest

import steward
from steward.cluster import LocalCluster
from steward.kube import load_access
from steward.runtime.mirror import MirrorOptions, guard_reads
from tests.polling import until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

CONFIGMAPS = steward.CONFIGMAPS


async def test_a_reconcile_never_reads_a_copy_older_than_its_own_write(
    cluster: LocalCluster, namespace: str, dev_informer: str
) -> None:
    api = steward.KubeClient(load_access(str(cluster.kubeconfig)))
    path = CONFIGMAPS.path(namespace)
    body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "cm"}}
    await api.arequest("POST", path, body)
    async with grpc.aio.insecure_channel(dev_informer) as channel:
        mirror = steward.Mirror(channel, [CONFIGMAPS], MirrorOptions(namespace=namespace))
        api = api.fenced(lambda: True, mirror.written)
        task = asyncio.create_task(mirror.run())
        try:
            await until(lambda: mirror.get(CONFIGMAPS, namespace, "cm") is not None, "the cm")
            # Stop the stream, so the write's event cannot arrive before we look.
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            old = mirror.get(CONFIGMAPS, namespace, "cm")
            assert old is not None
            written = await api.arequest(
                "PATCH",
                f"{path}/cm",
                {"data": {"k": "v"}},
                content_type="application/merge-patch+json",
            )
            assert mirror.is_stale(old)
            with guard_reads(mirror), pytest.raises(steward.StaleRead) as caught:
                mirror.get(CONFIGMAPS, namespace, "cm")
            assert caught.value.written == written["metadata"]["resourceVersion"]
            with guard_reads(mirror), pytest.raises(steward.StaleRead):
                mirror.objects(CONFIGMAPS, namespace)
            # Outside a reconcile (a mapper, a test) the copy is still readable.
            assert mirror.get(CONFIGMAPS, namespace, "cm") is old
            woken: list[str] = []
            mirror.when_current(old, lambda: woken.append("now"))
            assert woken == []

            task = asyncio.create_task(mirror.run())  # resumes: the write's event comes
            await until(
                lambda: not mirror.is_stale(mirror.get(CONFIGMAPS, namespace, "cm") or old),
                "the write's event",
            )
            assert woken == ["now"]  # once, when the write's event arrived
            mirror.when_current(old, lambda: woken.append("at once"))
            assert woken == ["now", "at once"]  # nothing pending: called at once
            with guard_reads(mirror):
                current = mirror.get(CONFIGMAPS, namespace, "cm")
            assert current is not None
            assert current.resource_version == written["metadata"]["resourceVersion"]
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            api.close()


async def test_the_runtime_fences_and_wires_the_client_it_is_given(
    cluster: LocalCluster, namespace: str, dev_informer: str
) -> None:
    seen: list[str] = []

    async def reconcile(ctx: steward.Context, request: steward.Request) -> steward.Result:
        seen.append(request.name)
        return steward.Result()

    definition = (
        steward.ControllerBuilder("wired")
        .for_(CONFIGMAPS)
        .with_options(steward.ControllerOptions(resync_period=0.3))
        .complete(reconcile)
    )
    api = steward.KubeClient(load_access(str(cluster.kubeconfig)))
    await api.arequest(
        "POST",
        CONFIGMAPS.path(namespace),
        {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "once"}},
    )
    async with grpc.aio.insecure_channel(dev_informer) as channel:
        controller = definition.new(
            channel, api, steward.ControllerOptions(namespace=namespace, resync_period=0.3)
        )
        # The controller derives a client of its own; the one it was given stays as it was.
        assert api.write_fence is None and api.write_observer is None
        own = controller.context.api
        assert own is controller.api and own is not api and own.access is api.access
        assert own.write_fence is not None and own.write_fence() is True  # alone: active
        assert own.write_observer == controller.mirror.written
        assert controller.context.client.api is own
        task = asyncio.create_task(controller.run())
        try:
            # Alone, as under a manager, the resync re-queues the primary objects.
            await until(lambda: seen.count("once") >= 3, "three resyncs of the ConfigMap")
        finally:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
            api.close()
