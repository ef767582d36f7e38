"""The typed client and children against the real API server: each verb sends what it says
(patch flavours, delete preconditions and grace period), a status write retries a conflict
on a fresh read only when asked, and children record upstream's Events, under
expectations, with a terminating namespace treated by one rule."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import AsyncIterator
from typing import Any

import pytest
import pytest_asyncio

import steward
from steward.cluster import LocalCluster
from steward.kube import load_access

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

CONFIGMAPS = steward.CONFIGMAPS
HOLD = "steward.io/test-hold"


def _cm(name: str, **meta: Any) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name, **meta}}


@pytest_asyncio.fixture
async def api(cluster: LocalCluster) -> AsyncIterator[steward.KubeClient]:
    client = steward.KubeClient(load_access(str(cluster.kubeconfig)))
    try:
        yield client
    finally:
        client.close()


async def test_each_verb_sends_what_it_says(api: steward.KubeClient, namespace: str) -> None:
    cms = steward.Client(api)(CONFIGMAPS)
    created = await cms.create(_cm("a", namespace=namespace))  # namespace from the body
    assert created["metadata"]["namespace"] == namespace
    got = await cms.get(namespace, "a")
    assert got["metadata"]["uid"] == created["metadata"]["uid"]

    updated = await cms.update({**got, "data": {"k": "1"}})
    assert updated["data"] == {"k": "1"}
    with pytest.raises(steward.ConflictError):
        await cms.update({**got, "data": {"k": "stale"}})  # got's resourceVersion is old

    merged = await cms.patch(namespace, "a", {"data": {"m": "2"}}, patch_type="merge")
    assert merged["data"] == {"k": "1", "m": "2"}
    ops = [{"op": "remove", "path": "/data/k"}]
    patched = await cms.patch(namespace, "a", ops, patch_type="json")
    assert patched["data"] == {"m": "2"}
    labelled = await cms.patch(namespace, "a", {"metadata": {"labels": {"s": "3"}}})
    assert labelled["metadata"]["labels"] == {"s": "3"}  # strategic, the default

    with pytest.raises(steward.ConflictError):
        await cms.delete(namespace, "a", uid=str(uuid.uuid4()))  # not that object
    with pytest.raises(steward.ConflictError):
        await cms.delete(namespace, "a", resource_version=got["metadata"]["resourceVersion"])
    await cms.delete(namespace, "a", uid=created["metadata"]["uid"], propagation="Background")
    with pytest.raises(steward.NotFoundError):
        await cms.get(namespace, "a")


async def test_a_delete_sends_its_grace_period(api: steward.KubeClient, namespace: str) -> None:
    """A pod bound to a node (one that does not exist: no kubelet confirms anything) is
    deleted gracefully: with a grace period of 7 it stays, terminating with 7 seconds
    (not its own 30); a grace period of 0 then removes it at once."""
    pods = steward.Client(api)(steward.PODS)
    deadline = asyncio.get_running_loop().time() + 60
    while True:  # pods are refused until the default ServiceAccount exists
        try:
            await api.arequest("GET", f"/api/v1/namespaces/{namespace}/serviceaccounts/default")
            break
        except steward.NotFoundError:
            assert asyncio.get_running_loop().time() < deadline, "no default ServiceAccount"
            await asyncio.sleep(0.1)
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "bound"},
        "spec": {
            "nodeName": f"nowhere-{uuid.uuid4().hex[:6]}",
            "terminationGracePeriodSeconds": 30,
            "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.10"}],
        },
    }
    created = await pods.create(pod, namespace=namespace)
    uid = created["metadata"]["uid"]

    held = await pods.delete(namespace, "bound", uid=uid, grace_period_seconds=7)
    assert held["metadata"].get("deletionTimestamp")
    assert held["metadata"].get("deletionGracePeriodSeconds") == 7
    still = await pods.get(namespace, "bound")
    assert still["metadata"]["uid"] == uid  # a grace period: the pod is still there

    await pods.delete(namespace, "bound", grace_period_seconds=0)
    with pytest.raises(steward.NotFoundError):
        await pods.get(namespace, "bound")


async def test_a_status_write_retries_a_conflict_only_when_asked(
    api: steward.KubeClient,
) -> None:
    """On a stale copy the status write conflicts; with the retry it reads the object
    afresh and asks the status function again, of the fresh object."""
    namespaces = steward.ResourceClient(api, steward.NAMESPACES)
    name = f"status-{uuid.uuid4().hex[:8]}"
    stale = await namespaces.create(
        {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}}
    )
    try:
        await namespaces.patch("", name, {"metadata": {"labels": {"moved": "on"}}})
        asked: list[dict[str, Any]] = []

        def status(obj: dict[str, Any]) -> dict[str, Any]:
            asked.append(obj)
            return {**(obj.get("status") or {}), "phase": "Active"}

        with pytest.raises(steward.ConflictError):
            await namespaces.update_status(stale, status)
        written = await namespaces.update_status(stale, status, retry_on_conflict=True)
        assert written["status"]["phase"] == "Active"
        assert [o["metadata"].get("labels", {}).get("moved") for o in asked] == [None, None, "on"]
    finally:
        await namespaces.delete("", name)


async def _events(api: steward.KubeClient, namespace: str, name: str) -> list[tuple[str, str]]:
    listing = await api.arequest(
        "GET", steward.EVENTS.path(namespace) + f"?fieldSelector=involvedObject.name%3D{name}"
    )
    return sorted((e["reason"], e["message"]) for e in listing.get("items") or ())


async def test_children_record_events_under_expectations(
    api: steward.KubeClient, namespace: str
) -> None:
    cms = steward.ResourceClient(api, CONFIGMAPS)
    expectations = steward.Expectations()
    recorder = steward.EventRecorder(
        api, api_version="v1", kind="ConfigMap", component="test", reporting_component="test"
    )
    children = steward.Children(cms, CONFIGMAPS, expectations, recorder, finalizers=[HOLD])
    owner = await cms.create(_cm("owner"), namespace=namespace)
    bodies = [
        _cm(f"child-{i}", ownerReferences=[children.ref(owner)], finalizers=[HOLD])
        for i in range(3)
    ]
    outcome = await children.create_all(owner, bodies)
    assert outcome.succeeded == 3 and not outcome.errors
    key = (namespace, "owner")
    assert not expectations.satisfied(key)  # the mirror has not shown them
    for _ in range(3):
        expectations.creation_observed(key)
    assert expectations.satisfied(key)

    first = await cms.get(namespace, "child-0")
    assert steward.owner_of(first, CONFIGMAPS) == steward.ObjectRef(
        CONFIGMAPS, namespace, "owner", owner["metadata"]["uid"]
    )
    # A deletion removes the owner's finalizer first, so the child really goes.
    outcome = await children.delete_all(owner, [first], precondition=True)
    assert outcome.succeeded == 1 and not outcome.errors
    assert expectations.pending(key) == (0, 1)  # until the mirror shows it go
    with pytest.raises(steward.NotFoundError):
        await cms.get(namespace, "child-0")
    # One already gone counts as deleted, without an Event, and is lowered at once.
    again = await children.delete_all(owner, [first])
    assert again.succeeded == 1 and not again.errors and expectations.satisfied(key)
    # So does one whose name another child took: the UID precondition spares the new one.
    successor = await cms.create(_cm("child-0"), namespace=namespace)
    spared = await children.delete_all(owner, [first], precondition=True)
    assert spared.succeeded == 1 and not spared.errors and expectations.satisfied(key)
    assert (await cms.get(namespace, "child-0"))["metadata"]["uid"] == successor["metadata"]["uid"]

    refused = _cm("Not A Name", ownerReferences=[children.ref(owner)])
    failed = await children.create_all(owner, [refused])
    assert isinstance(failed.errors[0], steward.ApiStatusError) and expectations.satisfied(key)

    await recorder.drain()
    expected = [
        ("FailedCreate", f"Error creating: {steward.error_message(failed.errors[0])}"),
        *[("SuccessfulCreate", f"Created configmap: child-{i}") for i in range(3)],
        ("SuccessfulDelete", "Deleted configmap: child-0"),
    ]
    assert await _events(api, namespace, "owner") == sorted(expected)
    for i in (1, 2):
        await children.remove_finalizers(await cms.get(namespace, f"child-{i}"))


async def test_a_terminating_namespace_is_no_error(api: steward.KubeClient) -> None:
    """One rule for every controller: a creation refused because the namespace is being
    deleted (cause NamespaceTerminating) returns None and records no Event."""
    namespaces = steward.ResourceClient(api, steward.NAMESPACES)
    cms = steward.ResourceClient(api, CONFIGMAPS)
    ns = f"terminating-{uuid.uuid4().hex[:8]}"
    await namespaces.create({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
    owner = await cms.create(_cm("owner", finalizers=[HOLD]), namespace=ns)  # keeps it
    recorder = steward.EventRecorder(
        api, api_version="v1", kind="ConfigMap", component="test", reporting_component="test"
    )
    children = steward.Children(
        cms, CONFIGMAPS, steward.Expectations(), recorder, finalizers=[HOLD]
    )
    try:
        await namespaces.delete("", ns)
        refusal: list[BaseException] = []
        for attempt in range(100):  # admission may see the deletion a moment later
            try:
                await cms.create(_cm(f"probe-{attempt}"), namespace=ns)
            except steward.ApiStatusError as err:
                refusal.append(err)
                break
            await asyncio.sleep(0.1)
        assert refusal and steward.namespace_terminating(refusal[0]), refusal
        assert (
            await children.create(owner, _cm("child", ownerReferences=[children.ref(owner)]))
            is None
        )
        await recorder.drain()
        assert recorder.dropped == 0 and recorder.discarded == 0
        assert await _events(api, ns, "owner") == []
    finally:
        await cms.patch(ns, "owner", {"metadata": {"$deleteFromPrimitiveList/finalizers": [HOLD]}})
