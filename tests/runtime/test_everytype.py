"""Controllers over every type: which types discovery yields, and a mirror that follows
them (retargeted, resuming the types that stay). Discovery documents are aggregated
discovery as kube-apiserver serves it (parsed by :func:`steward.runtime.discovery.parse`);
the integration side, a real API server and informer, is the garbage collector's
scenarios (a custom resource defined after start)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import grpc
import pytest
import pytest_asyncio

from steward.kube import ApiUnavailableError
from steward.runtime.discovery import Discovered, parse
from steward.runtime.everytype import EveryType, TypeFollower
from steward.runtime.mirror import Mirror
from steward.runtime.resources import CONFIGMAPS, PODS, Resource
from steward.v1 import informer_pb2 as pb

pytestmark = [pytest.mark.unit, pytest.mark.asyncio]

WIDGETS = Resource("example.com", "v1", "widgets", "Widget")


def res(name: str, kind: str, *verbs: str, scope: str = "Namespaced") -> dict[str, Any]:
    return {"resource": name, "responseKind": {"kind": kind}, "scope": scope, "verbs": list(verbs)}


ALL = ("list", "watch", "delete", "get")


def documents(*, widgets: bool = True, stale: bool = False) -> list[dict[str, Any]]:
    core = {
        "items": [
            {
                "metadata": {},
                "versions": [
                    {
                        "version": "v1",
                        "resources": [
                            res("pods", "Pod", *ALL),
                            res("configmaps", "ConfigMap", *ALL),
                            res("events", "Event", *ALL),
                            res("bindings", "Binding", "create"),
                            res("namespaces", "Namespace", *ALL, scope="Cluster"),
                        ],
                    }
                ],
            }
        ]
    }
    groups: list[dict[str, Any]] = []
    if widgets:
        version: dict[str, Any] = {"version": "v1", "resources": [res("widgets", "Widget", *ALL)]}
        if stale:
            version["freshness"] = "Stale"
        groups.append({"metadata": {"name": "example.com"}, "versions": [version]})
    return [core, {"items": groups}]


class Readings:
    """Stands in for :class:`~steward.runtime.discovery.Discovery`: the next readings."""

    def __init__(self, *answers: Discovered | Exception) -> None:
        self.answers = list(answers)

    async def read(self, *, fresh: bool = True) -> Discovered:
        answer = self.answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return answer


@pytest_asyncio.fixture
async def mirror() -> AsyncIterator[Mirror]:
    channel = grpc.aio.insecure_channel("127.0.0.1:9")  # never dialled by these tests
    m = Mirror(channel, [])
    yield m
    await channel.close()


SPEC = EveryType(verbs=("list", "watch", "delete"), ignored=frozenset({("", "events")}))


async def test_the_types_serving_every_verb_less_the_ignored() -> None:
    """Breakage caught: ignored types (Events) or types without a verb (bindings) watched;
    cluster-scoped types lost."""
    wanted = SPEC.wanted(parse(documents()))
    assert set(wanted) == {PODS, CONFIGMAPS, WIDGETS, Resource("", "v1", "namespaces")}
    namespaces = next(t for t in wanted if t.plural == "namespaces")
    assert not namespaces.namespaced and namespaces.kind == "Namespace"


async def test_the_mirror_follows_discovery(mirror: Mirror) -> None:
    """Breakage caught: a type that appears never watched, one that goes watched forever,
    or a type that stays losing its objects and its resume point."""
    follower = TypeFollower(
        mirror,
        Readings(parse(documents(widgets=False)), parse(documents())),  # type: ignore[arg-type]
        SPEC,
    )
    assert await follower.sync()
    assert WIDGETS not in mirror.watched_types()
    mirror._apply(
        [
            pb.Event(
                type=pb.EVENT_TYPE_ADDED,
                resource_type=PODS.wire,
                metadata=pb.ObjectMeta(namespace="ns", name="a", uid="u", resource_version="5"),
                object=b"{}",
            ),
            pb.Event(
                type=pb.EVENT_TYPE_INITIAL_EVENTS_END,
                resource_type=PODS.wire,
                resource_version="7",
            ),
        ]
    )
    assert await follower.sync()
    assert WIDGETS in mirror.watched_types()
    assert mirror.get(PODS, "ns", "a") is not None
    assert mirror.resource_version(PODS) == "7"
    # The next request resumes pods and starts widgets with a snapshot.
    targets = {t.type.resource: t.resource_version for t in mirror._request().targets}
    assert targets["pods"] == "7" and targets["widgets"] == ""


async def test_a_stale_group_keeps_its_synced_types(mirror: Mirror) -> None:
    """Breakage caught: an aggregated API server that is down for a moment dropping its
    types (and a relist of all their objects when it is back)."""
    follower = TypeFollower(
        mirror,
        Readings(parse(documents()), parse(documents(stale=True))),  # type: ignore[arg-type]
        SPEC,
    )
    await follower.sync()
    mirror._apply([pb.Event(type=pb.EVENT_TYPE_INITIAL_EVENTS_END, resource_type=WIDGETS.wire)])
    assert not await follower.sync()
    assert WIDGETS in mirror.watched_types()


async def test_a_failed_reading_keeps_the_types_and_is_counted(mirror: Mirror) -> None:
    """Breakage caught: an API server that cannot be reached emptying the controller's
    types, or failures not counted (garbagecollector_controller_resources_sync_error)."""
    failures: list[None] = []
    follower = TypeFollower(
        mirror,
        Readings(parse(documents()), ApiUnavailableError("down")),  # type: ignore[arg-type]
        SPEC,
    )
    follower.on_error = lambda: failures.append(None)
    await follower.sync()
    before = mirror.watched_types()
    assert await follower._refused(None) is True  # type: ignore[arg-type]
    assert mirror.watched_types() == before
    assert follower.errors == 1 and len(failures) == 1
