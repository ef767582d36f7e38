"""Per-type subscriptions against a real informer and API server: a projected mirror gets
the changes of what it reads and not the others, its own writes of unread paths do not
leave reads stale, and an owner filter keeps only the objects of the owner kinds asked
for (and orphans when asked)."""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Awaitable
from typing import Any

import grpc
import pytest
import pytest_asyncio

import steward
from steward.cluster import LocalCluster
from steward.kube import KubeClient, load_access
from steward.runtime.mirror import Change, ChangeKind, Mirror, MirrorOptions, guard_reads
from steward.runtime.subscriptions import ProjectionError, subscription
from tests.polling import until

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

CONFIGMAPS = steward.CONFIGMAPS
SECRETS = steward.SECRETS
MERGE = "application/merge-patch+json"


class Kube:
    """The API server, as the test writes to it (not through any mirror)."""

    def __init__(self, api: KubeClient, namespace: str) -> None:
        self.api = api
        self.namespace = namespace

    async def create(self, name: str, data: dict[str, str], **meta: Any) -> dict[str, Any]:
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": name, **meta},
            "data": data,
        }
        answer: dict[str, Any] = await self.api.arequest(
            "POST", CONFIGMAPS.path(self.namespace), body
        )
        return answer

    async def patch(
        self, name: str, patch: dict[str, Any], api: KubeClient | None = None
    ) -> dict[str, Any]:
        answer: dict[str, Any] = await (api or self.api).arequest(
            "PATCH", CONFIGMAPS.path(self.namespace, name), patch, content_type=MERGE
        )
        return answer

    async def get(self, name: str) -> dict[str, Any]:
        answer: dict[str, Any] = await self.api.arequest(
            "GET", CONFIGMAPS.path(self.namespace, name)
        )
        return answer


def rv(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["resourceVersion"])


class Running:
    """Mirrors watching, each with the changes it was handed."""

    def __init__(self) -> None:
        self.tasks: dict[Mirror, asyncio.Task[None]] = {}
        self.changes: dict[Mirror, list[Change]] = {}

    def start(self, mirror: Mirror) -> Mirror:
        if mirror not in self.changes:
            self.changes[mirror] = []
            mirror.add_handler(self.changes[mirror].append)
        self.tasks[mirror] = asyncio.create_task(mirror.run())
        return mirror

    async def stop(self, mirror: Mirror) -> None:
        task = self.tasks.pop(mirror)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    def versions(self, mirror: Mirror, name: str) -> list[str]:
        """The versions of ``name`` the mirror was handed, in order."""
        return [c.obj.resource_version for c in self.changes[mirror] if c.obj.name == name]

    async def handed(self, mirror: Mirror, name: str, version: str) -> None:
        """Wait until ``mirror`` was handed ``name`` at ``version``."""
        await until(lambda: version in self.versions(mirror, name), f"{name}@{version}")

    def names(self, mirror: Mirror) -> set[str]:
        """Every object the mirror was ever handed."""
        return {c.obj.name for c in self.changes[mirror]}

    async def close(self) -> None:
        for mirror in list(self.tasks):
            await self.stop(mirror)


@pytest_asyncio.fixture
async def kube(cluster: LocalCluster, namespace: str) -> AsyncIterator[Kube]:
    api = steward.KubeClient(load_access(str(cluster.kubeconfig)))
    try:
        yield Kube(api, namespace)
    finally:
        api.close()


@pytest_asyncio.fixture
async def channel(dev_informer: str) -> AsyncIterator[grpc.aio.Channel]:
    async with grpc.aio.insecure_channel(dev_informer) as ch:
        yield ch


@pytest_asyncio.fixture
async def running() -> AsyncIterator[Running]:
    mirrors = Running()
    try:
        yield mirrors
    finally:
        await mirrors.close()


def watching(channel: grpc.aio.Channel, namespace: str, name: str, **reads: Any) -> Mirror:
    """A mirror of the namespace's ConfigMaps reading what ``reads`` say (everything by
    default)."""
    subs = {CONFIGMAPS: subscription(**reads)} if reads else None
    options = MirrorOptions(namespace=namespace, subscriber=name, max_backoff=1.0)
    return Mirror(channel, [CONFIGMAPS], options, subscriptions=subs)


def holds(mirror: Mirror, namespace: str, name: str, version: str) -> bool:
    obj = mirror.get(CONFIGMAPS, namespace, name)
    return obj is not None and obj.resource_version == version


async def arrives(mirror: Mirror, namespace: str, name: str, version: str, what: str) -> None:
    """Wait until ``mirror`` holds ``name`` at ``version``."""
    await until(lambda: holds(mirror, namespace, name, version), what)


def synced(*mirrors: Mirror) -> Awaitable[Any]:
    return until(lambda: all(m.has_synced() for m in mirrors), "the mirrors' snapshots")


# What a projected mirror receives -----------------------------------------------------------
async def test_a_projected_mirror_receives_changes_of_what_it_reads_only(
    kube: Kube, channel: grpc.aio.Channel, running: Running, namespace: str
) -> None:
    ns = namespace
    created = {"listed": await kube.create("listed", {"watched": "1", "other": "1"})}
    projected = running.start(watching(channel, ns, "projected", fields=["data.watched"]))
    whole = running.start(watching(channel, ns, "whole"))  # the control: every change
    await synced(projected, whole)
    # One object from the informer's LIST, one from its watch.
    created["added"] = await kube.create("added", {"watched": "1", "other": "1"})
    for name, first in created.items():
        await arrives(projected, ns, name, rv(first), f"{name} created")
        obj = projected.get(CONFIGMAPS, ns, name)
        assert obj is not None
        assert b'"other"' not in obj.raw  # the informer left the unread path out
        assert obj.object["data"]["watched"] == "1"
        with pytest.raises(ProjectionError, match=r"data\.other"):
            obj.object["data"]["other"]

        other = await kube.patch(name, {"data": {"other": "2"}})
        # The change happened, and an unprojected subscriber of the same informer got it.
        stored = await kube.get(name)
        assert (stored["data"]["other"], rv(stored)) == ("2", rv(other))
        await running.handed(whole, name, rv(other))
        watched = await kube.patch(name, {"data": {"watched": "2"}})
        await arrives(projected, ns, name, rv(watched), "watched's event")
        await arrives(whole, ns, name, rv(watched), "the control")
        # Events of a type come in order: the change of data.other was withheld for good.
        assert running.versions(projected, name) == [rv(first), rv(watched)]
        assert running.versions(whole, name) == [rv(first), rv(other), rv(watched)]
        obj = projected.get(CONFIGMAPS, ns, name)
        assert obj is not None
        assert obj.object["data"]["watched"] == "2"
        assert b'"other"' not in obj.raw
        modified = running.changes[projected][-1]
        assert modified.kind is ChangeKind.MODIFIED and modified.obj is obj
        assert modified.old is not None and modified.old.resource_version == rv(first)


async def test_metadata_only_receives_label_changes_but_not_data_changes(
    kube: Kube, channel: grpc.aio.Channel, running: Running, namespace: str
) -> None:
    ns = namespace
    first = await kube.create("cm", {"k": "1"}, labels={"app": "a"})
    meta = running.start(watching(channel, ns, "meta", metadata_only=True))
    await synced(meta)
    await until(lambda: holds(meta, ns, "cm", rv(first)), "the ConfigMap")
    data = await kube.patch("cm", {"data": {"k": "2"}})
    labelled = await kube.patch("cm", {"metadata": {"labels": {"app": "b"}}})
    await until(lambda: holds(meta, ns, "cm", rv(labelled)), "the label's event")
    assert rv(data) not in running.versions(meta, "cm")
    obj = meta.get(CONFIGMAPS, ns, "cm")
    assert obj is not None
    assert obj.object["metadata"]["labels"] == {"app": "b"}
    assert dict(obj.meta.labels) == {"app": "b"}
    assert b"managedFields" not in obj.raw and b'"data"' not in obj.raw
    with pytest.raises(ProjectionError, match=r"metadata\.managedFields"):
        obj.object["metadata"]["managedFields"]
    with pytest.raises(ProjectionError, match=r"^data "):
        obj.object["data"]


# Reading your own writes with a projection --------------------------------------------------
async def test_a_write_of_unread_paths_leaves_reads_live_and_a_read_one_makes_them_wait(
    kube: Kube, channel: grpc.aio.Channel, running: Running, namespace: str
) -> None:
    ns = namespace
    created = {"listed": await kube.create("listed", {"watched": "1", "other": "1"})}
    mirror = running.start(watching(channel, ns, "ryw", fields=["data.watched"]))
    # The runtime's wiring: every write of the controller's client is told to the mirror.
    api = kube.api.fenced(lambda: True, mirror.written)
    await synced(mirror)
    created["added"] = await kube.create("added", {"watched": "1", "other": "1"})
    for name, first in created.items():
        await arrives(mirror, ns, name, rv(first), f"{name} created")
        # Stop the stream: nothing the informer sends can be what makes reads current.
        await running.stop(mirror)
        old = mirror.get(CONFIGMAPS, ns, name)
        assert old is not None

        other = await kube.patch(name, {"data": {"other": "2"}}, api)
        assert int(rv(other)) > int(old.resource_version)
        assert not mirror.is_stale(old)
        with guard_reads(mirror):
            assert mirror.get(CONFIGMAPS, ns, name) is old
            assert old in mirror.objects(CONFIGMAPS, ns)
        woken: list[str] = []
        mirror.when_current(old, functools.partial(woken.append, "at once"))
        assert woken == ["at once"]

        watched = await kube.patch(name, {"data": {"watched": "2"}}, api)
        assert mirror.is_stale(old)  # proof the write was told to the mirror
        with guard_reads(mirror), pytest.raises(steward.StaleRead) as caught:
            mirror.get(CONFIGMAPS, ns, name)
        assert caught.value.written == rv(watched)
        mirror.when_current(old, functools.partial(woken.append, "current"))
        assert woken == ["at once"]

        running.start(mirror)  # resumes: the event of data.watched comes
        await arrives(mirror, ns, name, rv(watched), "watched's event")
        assert woken == ["at once", "current"]
        with guard_reads(mirror):
            current = mirror.get(CONFIGMAPS, ns, name)
        assert current is not None and not mirror.is_stale(current)
        assert current.object["data"]["watched"] == "2"
        assert rv(other) not in running.versions(mirror, name)

    # With the stream running, a write of unread paths never makes a read stale either.
    other = await kube.patch("listed", {"data": {"other": "3"}}, api)
    later = await kube.patch("added", {"data": {"watched": "3"}})  # not the mirror's own
    await until(lambda: holds(mirror, ns, "added", rv(later)), "a later event")
    held = mirror.get(CONFIGMAPS, ns, "listed")
    assert held is not None and held.resource_version != rv(other)
    assert not mirror.is_stale(held)
    with guard_reads(mirror):
        assert mirror.get(CONFIGMAPS, ns, "listed") is held


class StaleForever(AssertionError):
    """The mirror's copy stays stale though every event it will get has arrived."""


async def test_a_write_of_unread_paths_after_an_unseen_one_does_not_stay_stale(
    kube: Kube, channel: grpc.aio.Channel, running: Running, namespace: str
) -> None:
    ns = namespace
    first = await kube.create("cm", {"watched": "1", "other": "1"})
    await kube.create("beacon", {"watched": "1"})
    mirror = running.start(watching(channel, ns, "ryw", fields=["data.watched"]))
    api = kube.api.fenced(lambda: True, mirror.written)
    await until(lambda: holds(mirror, ns, "cm", rv(first)), "the ConfigMap")
    await running.stop(mirror)
    # A reconcile's two writes, the second of a path the controller does not read.
    watched = await kube.patch("cm", {"data": {"watched": "2"}}, api)
    other = await kube.patch("cm", {"data": {"other": "2"}}, api)
    before = mirror.get(CONFIGMAPS, ns, "cm")
    assert before is not None and mirror.is_stale(before)
    running.start(mirror)
    await until(lambda: holds(mirror, ns, "cm", rv(watched)), "the first write's event")
    # Everything up to a later change has been delivered: the second write's event was
    # withheld (it changed nothing the mirror reads), and none will come.
    beacon = await kube.patch("beacon", {"data": {"watched": "2"}})
    await until(lambda: holds(mirror, ns, "beacon", rv(beacon)), "a later event")
    held = mirror.get(CONFIGMAPS, ns, "cm")
    assert held is not None
    assert rv(other) not in running.versions(mirror, "cm")
    assert held.object["data"]["watched"] == "2"  # what the controller would see of `other`
    if mirror.is_stale(held):
        raise StaleForever(
            f"cm@{held.resource_version} is stale against the write {rv(other)}, whose "
            "event the informer withheld"
        )
    with guard_reads(mirror):
        assert mirror.get(CONFIGMAPS, ns, "cm") is held


# Owner filters ------------------------------------------------------------------------------
async def test_an_owner_filtered_mirror_holds_only_the_owner_kinds_children(
    kube: Kube, channel: grpc.aio.Channel, running: Running, namespace: str
) -> None:
    ns = namespace
    secret = await kube.api.arequest(
        "POST",
        SECRETS.path(ns),
        {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "owner"}},
    )
    owner_cm = await kube.create("cm-owner", {})

    def ref(owner: dict[str, Any], controller: bool = True) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": owner["kind"],
            "name": owner["metadata"]["name"],
            "uid": owner["metadata"]["uid"],
            "controller": controller,
        }

    await kube.create("by-secret", {}, ownerReferences=[ref(secret)])
    await kube.create("by-configmap", {}, ownerReferences=[ref(owner_cm)])
    await kube.create("secret-not-controller", {}, ownerReferences=[ref(secret, False)])
    await kube.create("orphan", {})

    whole = running.start(watching(channel, ns, "whole"))
    owned = running.start(watching(channel, ns, "owned", owned_by=[SECRETS]))
    adopting = running.start(
        watching(channel, ns, "adopting", owned_by=[SECRETS], orphans=True, fields=["data"])
    )

    async def reconcile(ctx: steward.Context, request: steward.Request) -> steward.Result:
        return steward.Result()

    controller = (
        steward.ControllerBuilder("secret-children")
        .for_(SECRETS)
        .owns(CONFIGMAPS)
        .complete(reconcile)
        .new(channel, None, steward.ControllerOptions(namespace=ns))
    )
    built = running.start(controller.mirror)
    await synced(whole, owned, adopting, built)

    def names(mirror: Mirror) -> set[str]:
        return {o.name for o in mirror.objects(CONFIGMAPS, ns)}

    everything = {"cm-owner", "by-secret", "by-configmap", "secret-not-controller", "orphan"}
    await until(lambda: everything <= names(whole), "the control to hold every ConfigMap")
    controlled = {o.name for o in whole.objects(CONFIGMAPS, ns) if o.controller_owner()}
    assert controlled == {"by-secret", "by-configmap"}
    assert names(owned) == {"by-secret"}
    assert names(built) == {"by-secret"}
    await until(
        lambda: names(adopting) == names(whole) - {"by-configmap"},
        "the adopting mirror to hold the Secret's children and the orphans",
    )
    assert {"by-secret", "orphan", "secret-not-controller", "cm-owner"} <= names(adopting)
    assert {o.name for o in built.objects(SECRETS, ns)} >= {"owner"}  # the primary: all

    # The owner changes: a child comes into the filter, another leaves it.
    moved = await kube.patch("by-configmap", {"metadata": {"ownerReferences": [ref(secret)]}})
    freed = await kube.patch("by-secret", {"metadata": {"ownerReferences": None}})
    await until(lambda: holds(whole, ns, "by-secret", rv(freed)), "the control to see both")
    await until(lambda: names(owned) == {"by-configmap"}, "the owned mirror to follow")
    await until(lambda: names(built) == {"by-configmap"}, "the controller's mirror to follow")
    await until(lambda: holds(adopting, ns, "by-secret", rv(freed)), "the orphan's change")
    assert holds(owned, ns, "by-configmap", rv(moved))
    kinds = [(c.kind, c.obj.name) for c in running.changes[owned]]
    assert kinds == [
        (ChangeKind.ADDED, "by-secret"),
        (ChangeKind.ADDED, "by-configmap"),
        (ChangeKind.DELETED, "by-secret"),
    ]
    # Objects outside the filter were never handed to it, not even for a moment.
    assert running.names(owned) == {"by-secret", "by-configmap"}
    assert running.names(built) >= {"by-secret", "by-configmap"}
    assert "orphan" not in running.names(built)
    assert "by-configmap" in names(adopting)
