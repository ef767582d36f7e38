"""Ownership against the real API server: claim adopts matching orphans (with the finalizer),
releases children that no longer match, leaves others' children alone; adoption needs a
fresh read of the owner under the same UID; the child's UID is the patch's precondition.

ConfigMaps play both the owner and the children: the mechanism is the same for any types
that take strategic merge patches."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

import steward
from steward.cluster import LocalCluster
from steward.kube import load_access
from steward.runtime.ownership import Ownership

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

CONFIGMAPS = steward.CONFIGMAPS
HOLD = "steward.io/test-hold"
SELECTOR = {"matchLabels": {"app": "x"}}


def _body(name: str, labels: dict[str, str], refs: list[dict[str, Any]] | None = None) -> Any:
    meta: dict[str, Any] = {"name": name, "labels": labels}
    if refs:
        meta["ownerReferences"] = refs
        meta["finalizers"] = [HOLD]
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}


def _controller(name: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "name": name, "uid": uid, "controller": True}


async def _cleanup(api: steward.KubeClient, namespace: str) -> None:
    configmaps = steward.ResourceClient(api, CONFIGMAPS)
    listing = await api.arequest("GET", CONFIGMAPS.path(namespace))
    for item in listing.get("items") or ():
        if HOLD in (item["metadata"].get("finalizers") or ()):
            await configmaps.patch(
                namespace,
                item["metadata"]["name"],
                {"metadata": {"$deleteFromPrimitiveList/finalizers": [HOLD]}},
            )


async def test_claim_adopts_releases_and_leaves_others_alone(
    cluster: LocalCluster, namespace: str
) -> None:
    api = steward.KubeClient(load_access(str(cluster.kubeconfig)))
    ownership = Ownership(api, CONFIGMAPS, CONFIGMAPS, finalizers=[HOLD])
    path = CONFIGMAPS.path(namespace)
    try:
        owner = await api.arequest("POST", path, _body("owner", {}))
        uid = owner["metadata"]["uid"]
        foreign = _controller("someone-else", str(uuid.uuid4()))
        children = [
            await api.arequest("POST", path, _body("orphan", {"app": "x"})),
            await api.arequest(
                "POST", path, _body("mismatch", {"app": "y"}, [_controller("owner", uid)])
            ),
            await api.arequest("POST", path, _body("foreign", {"app": "x"}, [foreign])),
            await api.arequest("POST", path, _body("stranger", {"app": "z"})),
            await api.arequest(
                "POST", path, _body("mine", {"app": "x"}, [_controller("owner", uid)])
            ),
        ]
        claimed = await ownership.claim(owner, children, SELECTOR)
        assert sorted(c["metadata"]["name"] for c in claimed) == ["mine", "orphan"]

        adopted = await api.arequest("GET", f"{path}/orphan")
        assert steward.is_controlled_by(adopted, owner)
        ref = steward.controller_of(adopted)
        assert ref is not None and ref["blockOwnerDeletion"] is True and ref["kind"] == "ConfigMap"
        assert adopted["metadata"]["finalizers"] == [HOLD]

        released = await api.arequest("GET", f"{path}/mismatch")
        assert not released["metadata"].get("ownerReferences")
        assert HOLD not in (released["metadata"].get("finalizers") or ())

        # (The cluster's garbage collector may delete it, its owner being unknown; the
        # claim must not have changed whom it belongs to.)
        untouched = await api.arequest("GET", f"{path}/foreign")
        assert [r["uid"] for r in untouched["metadata"]["ownerReferences"]] == [foreign["uid"]]
        assert not (await api.arequest("GET", f"{path}/stranger"))["metadata"].get(
            "ownerReferences"
        )
    finally:
        await _cleanup(api, namespace)
        api.close()


async def test_no_adoption_without_a_fresh_read_of_the_same_owner(
    cluster: LocalCluster, namespace: str
) -> None:
    """The mirror's owner was deleted and created again under the same name: its orphans
    must not be adopted by the copy (upstream's RecheckDeletionTimestamp)."""
    api = steward.KubeClient(load_access(str(cluster.kubeconfig)))
    ownership = Ownership(api, CONFIGMAPS, CONFIGMAPS)
    path = CONFIGMAPS.path(namespace)
    try:
        stale_owner = await api.arequest("POST", path, _body("owner", {}))
        await api.arequest("DELETE", f"{path}/owner")
        await api.arequest("POST", path, _body("owner", {}))
        orphan = await api.arequest("POST", path, _body("orphan", {"app": "x"}))
        with pytest.raises(steward.ApiError, match="is gone"):
            await ownership.claim(stale_owner, [orphan], SELECTOR)
        assert not (await api.arequest("GET", f"{path}/orphan"))["metadata"].get("ownerReferences")
    finally:
        api.close()


async def test_the_childs_uid_is_the_precondition_of_adoption(
    cluster: LocalCluster, namespace: str
) -> None:
    """A child deleted and created again under its name is not adopted from the old copy."""
    api = steward.KubeClient(load_access(str(cluster.kubeconfig)))
    ownership = Ownership(api, CONFIGMAPS, CONFIGMAPS)
    path = CONFIGMAPS.path(namespace)
    try:
        owner = await api.arequest("POST", path, _body("owner", {}))
        old_copy = await api.arequest("POST", path, _body("child", {"app": "x"}))
        await api.arequest("DELETE", f"{path}/child")
        await api.arequest("POST", path, _body("child", {"app": "x"}))
        with pytest.raises(steward.ApiStatusError) as refused:
            await ownership.adopt(owner, old_copy)
        assert refused.value.status in (409, 422)  # a UID that is not the child's is refused
        assert not (await api.arequest("GET", f"{path}/child"))["metadata"].get("ownerReferences")
        gone = {**old_copy, "metadata": {**old_copy["metadata"], "name": "never-was"}}
        assert await ownership.adopt(owner, gone) is None  # a child gone meanwhile is skipped
    finally:
        api.close()


async def test_a_stamped_create_carries_the_trace_context(
    cluster: LocalCluster, namespace: str
) -> None:
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider

    api = steward.KubeClient(load_access(str(cluster.kubeconfig)))
    tracer = TracerProvider().get_tracer("test")
    try:
        with tracer.start_as_current_span("reconcile") as span:
            created = await steward.ResourceClient(api, CONFIGMAPS).create(
                _body("traced", {"app": "x"}), namespace=namespace, stamp_trace=True
            )
            trace_id = format(span.get_span_context().trace_id, "032x")
        annotations = created["metadata"].get("annotations") or {}
        assert trace_id in annotations.get("traceparent", "")
        assert trace.get_current_span() is trace.INVALID_SPAN
    finally:
        api.close()
