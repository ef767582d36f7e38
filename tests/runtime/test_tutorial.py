"""The tutorial controller (examples/namespace_info.py, shown in the docs) does what the
docs say against the real API server: it creates its ConfigMap in a new Namespace with
an Event, adopts an orphan instead of creating a second one, and puts back one deleted."""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from typing import Any

import grpc
import pytest

import steward
from examples.namespace_info import LABELS, NAME, NAMESPACE_INFO
from steward.cluster import LocalCluster
from steward.kube import load_access
from tests.polling import until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

SELECTOR = ",".join(f"{k}={v}" for k, v in LABELS.items())


async def test_the_tutorial_creates_adopts_and_recreates(
    cluster: LocalCluster, dev_informer: str
) -> None:
    api = steward.KubeClient(load_access(str(cluster.kubeconfig)))
    namespaces = steward.ResourceClient(api, steward.NAMESPACES)
    cms = steward.ResourceClient(api, steward.CONFIGMAPS)
    suffix = uuid.uuid4().hex[:6]
    fresh, adopting = f"tutorial-new-{suffix}", f"tutorial-orphan-{suffix}"
    for ns in (fresh, adopting):
        meta = {"name": ns, "labels": LABELS}
        await namespaces.create({"apiVersion": "v1", "kind": "Namespace", "metadata": meta})
    orphan = await cms.create(
        {"metadata": {"name": NAME, "labels": LABELS}, "data": {"made": "by hand"}},
        namespace=adopting,
    )

    async def info(ns: str) -> dict[str, Any] | None:
        with contextlib.suppress(steward.NotFoundError):
            cm = await cms.get(ns, NAME)
            return cm if steward.owner_of(cm, steward.NAMESPACES) is not None else None
        return None

    try:
        async with grpc.aio.insecure_channel(dev_informer) as channel:
            options = steward.ControllerOptions(label_selector=SELECTOR)
            controller = NAMESPACE_INFO.new(channel, api, options)
            task = asyncio.create_task(controller.run())
            try:
                created = await until(lambda: info(fresh), "the new Namespace's ConfigMap")
                owner = await namespaces.get("", fresh)
                assert steward.owner_of(created, steward.NAMESPACES) == steward.ObjectRef(
                    steward.NAMESPACES, "", fresh, owner["metadata"]["uid"]
                )
                assert created["data"] == {"namespace": fresh}

                adopted = await until(lambda: info(adopting), "the orphan adopted")
                assert adopted["metadata"]["uid"] == orphan["metadata"]["uid"]
                assert adopted["data"] == {"made": "by hand"}  # adopted, not replaced

                await cms.delete(fresh, NAME)
                again = await until(
                    lambda: info(fresh), "the deleted ConfigMap created again", within=30
                )
                assert again["metadata"]["uid"] != created["metadata"]["uid"]
                await controller.context.close_events()
            finally:
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        events = await api.arequest(
            "GET",
            steward.EVENTS.path("default")
            + f"?fieldSelector=involvedObject.name%3D{fresh},reason%3DSuccessfulCreate",
        )
        messages = [e["message"] for e in events["items"]]
        assert messages.count(f"Created configmap: {NAME}") == 2, messages
        assert {e["involvedObject"]["kind"] for e in events["items"]} == {"Namespace"}
    finally:
        for ns in (fresh, adopting):
            with contextlib.suppress(steward.NotFoundError):
                await namespaces.delete("", ns)
        api.close()
