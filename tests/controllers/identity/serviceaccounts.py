"""Fixtures and scenarios of the serviceaccount and root-ca-cert-publisher tests.

Steward's two controllers run in this process against ``id_cluster`` (where
kube-controller-manager runs neither), each as its own identity with only its RBAC of
``deploy/rbac/`` (:func:`id_controllers`). The session's ``cluster`` runs upstream's.

# Scenarios
Each scenario takes a side (a cluster's admin client and the CA bundle that cluster's
publisher publishes), makes its namespace itself (the namespace's birth is part of what is
compared) and returns snapshots of what the controller wrote at each point, with what must
differ between two clusters masked (:func:`masked`: names, uids, resourceVersions,
timestamps, managedFields; the bundle itself becomes ``<CA>`` when it is the cluster's).
They assert upstream's semantics on the way, so they run on either side, and the
differential tests compare the two sides' snapshots.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio

from steward.cluster import LocalCluster
from steward.controllers.rootcacertpublisher.controller import CONTROLLER as PUBLISHER
from steward.controllers.serviceaccount.controller import CONTROLLER as ACCOUNTS
from steward.kube import ConflictError, KubeClient, NotFoundError
from tests.controllers.harness import (
    Starter,
    controllers,
    eventually,
    in_loop_informer,
    stays,
    update,
)

__all__ = ["Starter", "eventually", "stays"]

WITHIN = 30.0
"""Seconds a side may take to reach a scenario's point (a deadline, not a measurement)."""
QUIET = 2.0
"""Seconds a scenario watches something that must not change."""
CM = "kube-root-ca.crt"
DESCRIPTION_ANNOTATION = "kubernetes.io/description"
DESCRIPTION = (
    "Contains a CA bundle that can be used to verify the kube-apiserver when using internal "
    "endpoints such as the internal service IP or kubernetes.default.svc. No other usage is "
    "guaranteed across distributions of Kubernetes clusters."
)
"""Upstream's annotation text, spelled out here so that a change on either side shows."""
HOLD = "steward.test/hold"
"""The finalizer that keeps a namespace Terminating (on a ConfigMap of its own)."""
MASKED_META = ("name", "namespace", "uid", "resourceVersion", "creationTimestamp", "managedFields")


@dataclass
class IdControllers:
    """Starters of Steward's two controllers on ``id_cluster`` (one informer)."""

    accounts: Starter
    publisher: Starter


@pytest_asyncio.fixture
async def id_controllers(id_cluster: LocalCluster) -> AsyncIterator[IdControllers]:
    """An informer of ``id_cluster`` and starters of Steward's serviceaccount and
    root-ca-cert-publisher controllers (one worker each, as upstream), each as its own
    identity; whatever was started is stopped at the end."""
    async with (
        in_loop_informer(id_cluster) as informer,
        controllers(
            ACCOUNTS,
            id_cluster.component_kubeconfig("controller-serviceaccount"),
            informer,
            workers=1,
        ) as accounts,
        controllers(
            PUBLISHER,
            id_cluster.component_kubeconfig("controller-root-ca-cert-publisher"),
            informer,
            workers=1,
        ) as publisher,
    ):
        yield IdControllers(accounts, publisher)


def cluster_ca(plane: LocalCluster) -> Path:
    """The cluster's CA certificate (kube-controller-manager's ``--root-ca-file``)."""
    return plane.state.pki_file("ca.crt")


def other_ca(plane: LocalCluster) -> Path:
    """A CA certificate of the cluster that is not its main CA (the front proxy's)."""
    found = sorted((plane.directory / "pki" / "front-proxy").glob("*ca*.crt"))
    assert found, "no front-proxy CA in the cluster's PKI"
    return found[0]


@dataclass
class Side:
    """One side of a scenario: a cluster's admin client and the bundle its publisher
    publishes."""

    name: str
    kube: KubeClient
    ca: str


@pytest.fixture
def namespaces() -> Iterator[list[tuple[KubeClient, str]]]:
    """Namespaces a test made (client, name), dropped at the end with the hold on their
    ConfigMap released."""
    made: list[tuple[KubeClient, str]] = []
    yield made
    for kube, ns in made:
        release(kube, ns)
        with contextlib.suppress(NotFoundError, ConflictError):
            kube.request("DELETE", f"/api/v1/namespaces/{ns}")


def make_namespace(kube: KubeClient, made: list[tuple[KubeClient, str]], prefix: str) -> str:
    """A new namespace (not waiting for anything), noted in ``made`` for the cleanup."""
    ns = f"{prefix}-{uuid.uuid4().hex[:6]}"
    kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": ns}})
    made.append((kube, ns))
    return ns


# Reads and writes ------------------------------------------------------------------------
def sa_path(ns: str, name: str = "default") -> str:
    return f"/api/v1/namespaces/{ns}/serviceaccounts/{name}"


def cm_path(ns: str, name: str = CM) -> str:
    return f"/api/v1/namespaces/{ns}/configmaps/{name}"


def get(kube: KubeClient, path: str) -> dict[str, Any] | None:
    try:
        return kube.request("GET", path)
    except NotFoundError:
        return None


def uid(obj: dict[str, Any] | None) -> str:
    return str(((obj or {}).get("metadata") or {}).get("uid", ""))


def masked(obj: dict[str, Any], ca: str = "") -> dict[str, Any]:
    """``obj`` with what must differ between clusters masked: the metadata of
    :data:`MASKED_META` dropped, and a ``ca.crt`` equal to ``ca`` written ``<CA>``."""
    out = dict(obj)
    out["metadata"] = {k: v for k, v in (obj.get("metadata") or {}).items() if k not in MASKED_META}
    data = obj.get("data")
    if isinstance(data, dict) and ca and data.get("ca.crt") == ca:
        out["data"] = {**data, "ca.crt": "<CA>"}
    return out


def release(kube: KubeClient, ns: str) -> None:
    """Drop the hold on the namespace's ConfigMap ``held``, if any."""
    with contextlib.suppress(NotFoundError, ConflictError):
        kube.request(
            "PATCH",
            cm_path(ns, "held"),
            {"metadata": {"finalizers": None}},
            content_type="application/merge-patch+json",
        )


def phase(kube: KubeClient, ns: str) -> str:
    return str(((get(kube, f"/api/v1/namespaces/{ns}") or {}).get("status") or {}).get("phase"))


# Scenarios --------------------------------------------------------------------------------
async def lifecycle(side: Side, ns: str) -> dict[str, Any]:
    """A new namespace gets ``default`` and ``kube-root-ca.crt`` (upstream's bundle and
    annotation); the account deleted comes back; the ConfigMap's data edited (and a label
    added) is restored with the label kept; its annotation given other text is left as it
    is, removed is restored; the ConfigMap deleted comes back. The snapshots, masked."""
    kube, ca = side.kube, side.ca
    shots: dict[str, Any] = {}
    sa = await eventually(lambda: get(kube, sa_path(ns)), f"{side.name}: default SA", WITHIN)
    cm = await eventually(lambda: get(kube, cm_path(ns)), f"{side.name}: {CM}", WITHIN)
    assert cm["data"] == {"ca.crt": ca}, f"{side.name}: the bundle is not the cluster's CA"
    assert cm["metadata"].get("annotations") == {DESCRIPTION_ANNOTATION: DESCRIPTION}
    shots["created"] = (masked(sa), masked(cm, ca))

    kube.request("DELETE", sa_path(ns))
    again = await eventually(
        lambda: (got := get(kube, sa_path(ns))) and uid(got) != uid(sa) and got,
        f"{side.name}: default SA recreated",
        WITHIN,
    )
    shots["account recreated"] = masked(again)

    def edit(obj: dict[str, Any]) -> None:
        obj["data"] = {"ca.crt": "edited", "extra": "x"}
        obj["metadata"].setdefault("labels", {})["mine"] = "kept"

    edited = update(kube, cm_path(ns), edit, "edit the ConfigMap")
    restored = await eventually(
        lambda: (got := get(kube, cm_path(ns))) and got["data"] == {"ca.crt": ca} and got,
        f"{side.name}: the data restored",
        WITHIN,
    )
    assert uid(restored) == uid(edited), "replaced rather than updated"
    assert restored["metadata"]["labels"] == {"mine": "kept"}
    shots["data restored"] = masked(restored, ca)

    def reword(obj: dict[str, Any]) -> None:
        obj["metadata"]["annotations"][DESCRIPTION_ANNOTATION] = "other words"

    update(kube, cm_path(ns), reword, "reword the annotation")
    await stays(
        lambda: (
            (get(kube, cm_path(ns)) or {})["metadata"]["annotations"][DESCRIPTION_ANNOTATION]
            == "other words"
        ),
        f"{side.name}: an annotation of other text left as it is",
        QUIET,
    )

    def unannotate(obj: dict[str, Any]) -> None:
        obj["metadata"]["annotations"] = None

    update(kube, cm_path(ns), unannotate, "remove the annotation")
    reannotated = await eventually(
        lambda: (
            (got := get(kube, cm_path(ns)))
            and (got["metadata"].get("annotations") or {}).get(DESCRIPTION_ANNOTATION)
            and got
        ),
        f"{side.name}: the annotation restored",
        WITHIN,
    )
    shots["annotation restored"] = masked(reannotated, ca)

    kube.request("DELETE", cm_path(ns))
    recreated = await eventually(
        lambda: (got := get(kube, cm_path(ns))) and uid(got) != uid(cm) and got,
        f"{side.name}: {CM} recreated",
        WITHIN,
    )
    shots["configmap recreated"] = masked(recreated, ca)
    return shots


async def terminating(side: Side, ns: str) -> dict[str, Any]:
    """A namespace kept Terminating by a ConfigMap with a finalizer: the namespace
    controller deletes ``default`` and ``kube-root-ca.crt`` and neither comes back while it
    terminates. The snapshot: what is left of both (nothing) and the namespace's phase."""
    kube = side.kube
    await eventually(lambda: get(kube, sa_path(ns)), f"{side.name}: default SA", WITHIN)
    await eventually(lambda: get(kube, cm_path(ns)), f"{side.name}: {CM}", WITHIN)
    held = {"metadata": {"name": "held", "finalizers": [HOLD]}, "data": {"k": "v"}}
    kube.request("POST", f"/api/v1/namespaces/{ns}/configmaps", held)
    kube.request("DELETE", f"/api/v1/namespaces/{ns}")
    await eventually(
        lambda: get(kube, sa_path(ns)) is None and get(kube, cm_path(ns)) is None,
        f"{side.name}: the namespace's content deleted",
        WITHIN * 2,
    )
    await stays(
        lambda: get(kube, sa_path(ns)) is None and get(kube, cm_path(ns)) is None,
        f"{side.name}: nothing created in a terminating namespace",
        QUIET,
    )
    snapshot = {
        "phase": phase(kube, ns),
        "account": get(kube, sa_path(ns)),
        "configmap": get(kube, cm_path(ns)),
        "held": get(kube, cm_path(ns, "held")) is not None,
    }
    release(kube, ns)
    return snapshot


async def both(*runs: Any) -> list[Any]:
    """Run the sides' scenarios at once."""
    return list(await asyncio.gather(*runs))
