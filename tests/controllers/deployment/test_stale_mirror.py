"""Steward's Deployment controller given a mirror that is behind the API server, in the
middle of a Recreate rollout: the old ReplicaSet is down, the new one is to be created.
Created from a stale Deployment, the new ReplicaSet would exist while the status write
recording it (``NewReplicaSetCreated``) fails, and the Progressing condition would keep
naming the previous ReplicaSet after the rollout. Once the controller has written the
Deployment, a mirror still behind that write must not be acted on at all: the runtime's
read-your-writes guard ends the reconcile before it writes anything. The controller is
bound as the runtime binds it (its mirror, its expectations, its API client told of its
writes) and reconciles as the runtime's workers run it, inside the guard; its mirror is
fed by hand, so the stale view is exact; everything else is the real API server
(Steward's cluster, upstream's ReplicaSet controller)."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import grpc
import orjson
import pytest
import pytest_asyncio

from steward import (
    DEPLOYMENTS,
    REPLICASETS,
    Controller,
    ControllerOptions,
    KubeClient,
    Mirror,
    Request,
    Resource,
    Result,
    StaleRead,
)
from steward.controllers.deployment.controller import CONTROLLER, rs_name
from steward.informer import wire
from steward.informer.store import EventKind, StoredObject
from steward.kube import load_access
from steward.runtime.hashing import pod_template_hash
from steward.runtime.mirror import guard_reads
from tests.controllers.deployment.conftest import (
    APPS,
    create,
    deployment_body,
    eventually,
    get,
    replica_sets,
)

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]


@pytest.fixture
def controller_api(controller_kubeconfig: Path) -> Iterator[KubeClient]:
    """The Deployment controller's own identity."""
    api = KubeClient(load_access(str(controller_kubeconfig)), user_agent="steward-deployment")
    try:
        yield api
    finally:
        api.close()


@pytest_asyncio.fixture
async def controller(controller_api: KubeClient) -> AsyncIterator[Controller[Any]]:
    """The Deployment controller, bound but not run: no stream feeds its mirror (the test
    applies events itself) and no worker takes its keys (the test reconciles)."""
    channel = grpc.aio.insecure_channel("127.0.0.1:9")  # never dialled
    yield CONTROLLER.new(channel, controller_api, ControllerOptions())
    await channel.close()


async def reconcile(controller: Controller[Any], ns: str, name: str) -> Result:
    """One reconcile of the Deployment as the runtime's workers run it: reads of the
    mirror guarded against copies older than the controller's own writes."""
    with guard_reads(controller.mirror):
        result: Result = await controller.reconciler.reconcile(Request(ns, name))
    return result


def show(mirror: Mirror, rtype: Resource, *objects: dict[str, Any]) -> None:
    """Let the mirror show these versions of the objects."""
    events = []
    for obj in objects:
        stored = StoredObject(orjson.dumps(obj), obj)
        known = mirror.get(rtype, stored.namespace, stored.name) is not None
        kind = EventKind.MODIFIED if known else EventKind.ADDED
        events.append(wire.event(kind, rtype.wire, stored, stored.resource_version))
    mirror._apply(events)


def get_rs(api: KubeClient, ns: str, name: str) -> dict[str, Any]:
    return api.request("GET", f"{APPS}/namespaces/{ns}/replicasets/{name}")


def stamp() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def old_replica_set(d: dict[str, Any]) -> dict[str, Any]:
    """The Deployment's first ReplicaSet, scaled down already (as Recreate leaves it)."""
    template = d["spec"]["template"]
    pod_hash = pod_template_hash(template, None)
    labels = {**template["metadata"]["labels"], "pod-template-hash": pod_hash}
    return {
        "apiVersion": "apps/v1",
        "kind": "ReplicaSet",
        "metadata": {
            "name": rs_name(d["metadata"]["name"], pod_hash),
            "labels": labels,
            "annotations": {
                "deployment.kubernetes.io/revision": "1",
                "deployment.kubernetes.io/desired-replicas": "1",
                "deployment.kubernetes.io/max-replicas": "1",
            },
            "ownerReferences": [
                {
                    "apiVersion": "apps/v1",
                    "kind": "Deployment",
                    "name": d["metadata"]["name"],
                    "uid": d["metadata"]["uid"],
                    "controller": True,
                    "blockOwnerDeletion": True,
                }
            ],
        },
        "spec": {
            "replicas": 0,
            "selector": {"matchLabels": labels},
            "template": {**template, "metadata": {"labels": labels}},
        },
    }


def progressing(d: dict[str, Any]) -> dict[str, Any]:
    conds = (d.get("status") or {}).get("conditions") or ()
    return next(c for c in conds if c["type"] == "Progressing")


async def test_new_replica_set_only_from_the_current_deployment(
    skube: KubeClient, sns: str, controller: Controller[Any]
) -> None:
    mirror = controller.mirror
    d = create(skube, sns, deployment_body("rich", 1, strategy={"type": "Recreate"}))
    old = skube.request("POST", f"{APPS}/namespaces/{sns}/replicasets", old_replica_set(d))
    old_name = old["metadata"]["name"]

    def old_observed() -> dict[str, Any] | None:
        rs = skube.request("GET", f"{APPS}/namespaces/{sns}/replicasets/{old_name}")
        return rs if (rs.get("status") or {}).get("observedGeneration") else None

    old = await eventually(old_observed, "the old ReplicaSet's status")
    done = f'ReplicaSet "{old_name}" has successfully progressed.'
    d = get(skube, sns, "rich")
    d["metadata"].setdefault("annotations", {})["deployment.kubernetes.io/revision"] = "1"
    d["status"] = {
        "observedGeneration": 1,
        "conditions": [
            {
                "type": "Progressing",
                "status": "True",
                "reason": "NewReplicaSetAvailable",
                "message": done,
                "lastUpdateTime": stamp(),
                "lastTransitionTime": stamp(),
            }
        ],
    }
    skube.request("PUT", f"{APPS}/namespaces/{sns}/deployments/rich/status", d)
    # A new template, for which Recreate creates a new ReplicaSet.
    skube.request(
        "PATCH",
        f"{APPS}/namespaces/{sns}/deployments/rich",
        {"spec": {"template": {"spec": {"containers": [{"name": "main", "image": "busybox:2"}]}}}},
        content_type="application/merge-patch+json",
    )
    show(mirror, REPLICASETS, old)
    show(mirror, DEPLOYMENTS, get(skube, sns, "rich"))
    # The API server's Deployment moves on; the mirror does not show that yet.
    skube.request(
        "PATCH",
        f"{APPS}/namespaces/{sns}/deployments/rich",
        {"metadata": {"annotations": {"steward.io/test": "moved"}}},
        content_type="application/merge-patch+json",
    )

    result = await reconcile(controller, sns, "rich")

    assert [rs["metadata"]["name"] for rs in replica_sets(skube, sns)] == [old_name]
    assert result == Result()  # the newer Deployment's own event brings it back
    assert progressing(get(skube, sns, "rich"))["message"] == done

    # With the current Deployment in the mirror, the new ReplicaSet is created and its
    # creation is on record: the condition names it, not the previous one.
    shown = get(skube, sns, "rich")
    show(mirror, DEPLOYMENTS, shown)
    await reconcile(controller, sns, "rich")

    names = [rs["metadata"]["name"] for rs in replica_sets(skube, sns)]
    assert len(names) == 2
    (new_name,) = set(names) - {old_name}
    cond = progressing(get(skube, sns, "rich"))
    assert cond["reason"] in ("NewReplicaSetCreated", "ReplicaSetUpdated"), cond
    assert new_name in cond["message"], cond

    # The controller's status writes moved the Deployment on; the mirror still shows the
    # version before them (its new ReplicaSet is shown, so nothing else holds the sync).
    written = get(skube, sns, "rich")
    assert written["metadata"]["resourceVersion"] != shown["metadata"]["resourceVersion"]
    show(mirror, REPLICASETS, get_rs(skube, sns, new_name))
    assert controller.context.expectations.satisfied((sns, "rich"))
    with pytest.raises(StaleRead):
        await reconcile(controller, sns, "rich")
    assert sorted(rs["metadata"]["name"] for rs in replica_sets(skube, sns)) == sorted(names)
    assert (
        get(skube, sns, "rich")["metadata"]["resourceVersion"]
        == (written["metadata"]["resourceVersion"])
    )
    # Once the mirror shows the controller's write, the Deployment is reconciled again.
    show(mirror, DEPLOYMENTS, get(skube, sns, "rich"))
    await reconcile(controller, sns, "rich")
