"""Steward's resourcequota controller alone on ``quota_cluster``: admission enforcing the
status it writes, object counts of a custom resource (a type the controller starts
watching when a quota names it), and the mirror following what quotas count."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from steward import SECRETS
from steward.cluster import LocalCluster
from steward.controllers.resourcequota import controller as controller_module
from steward.controllers.resourcequota.controller import (
    CONTROLLER,
    PODS,
    RESOURCEQUOTAS,
    SERVICES,
)
from steward.kube import ApiStatusError, KubeClient, NotFoundError
from tests.controllers.harness import controllers, eventually, in_loop_informer
from tests.controllers.quota.quotas import (
    IDENTITY,
    create,
    delete,
    path,
    quota,
    quota_host,
    steward_ns,
    wait_for,
    wait_used,
)
from tests.services import widget_crd_body

__all__ = ["quota_host", "steward_ns"]

pytestmark = pytest.mark.integration

CRDS = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"


def test_admission_enforces_the_written_status(quota_kube: KubeClient, steward_ns: str) -> None:
    """Admission counts against the status Steward's controller writes: at the limit a
    create is refused ("exceeded quota"), and once a deletion is replenished it passes
    again. (Admission ignores a quota without status.hard: it matches none of its names.)

    Catches: no status written, a status admission cannot use (hard or used missing a
    name, a malformed amount), or a deletion never replenished (creates refused for good)."""
    kube, ns = quota_kube, steward_ns
    kube.request("POST", path(ns, "resourcequotas"), quota("secrets", {"secrets": "2"}))
    wait_used("steward", kube, ns, "secrets", {"secrets": "0"})
    for name in ("a", "b"):
        create(kube, path(ns, "secrets"), {"metadata": {"name": name}, "stringData": {"k": "v"}})
    third = {"metadata": {"name": "c"}, "stringData": {"k": "v"}}
    with pytest.raises(ApiStatusError, match="exceeded quota: secrets"):
        kube.request("POST", path(ns, "secrets"), third)
    wait_used("steward", kube, ns, "secrets", {"secrets": "2"})
    delete(kube, path(ns, "secrets", "a"))
    wait_used("steward", kube, ns, "secrets", {"secrets": "1"})
    create(kube, path(ns, "secrets"), third)
    wait_used("steward", kube, ns, "secrets", {"secrets": "2"})


def test_custom_resource_count(quota_kube: KubeClient, steward_ns: str) -> None:
    """``count/widgets.<group>`` of a CustomResourceDefinition made for the test: counted
    once the quota names it, and lowered when a widget is deleted; the definition deleted,
    the controller goes on (a new quota gets its status).

    Catches: count/ names of types outside the core registry not resolved through
    discovery, their type not watched, their deletions not replenishing the quota, or the
    controller dying when a watched type goes away."""
    kube, ns = quota_kube, steward_ns
    group = f"q{uuid.uuid4().hex[:8]}.steward.test"
    kube.request("POST", CRDS, widget_crd_body(group))
    try:

        def established() -> bool:
            got = kube.request("GET", f"{CRDS}/widgets.{group}")
            conditions = (got.get("status") or {}).get("conditions") or ()
            return any(c["type"] == "Established" and c["status"] == "True" for c in conditions)

        wait_for("steward", established, "the CRD established")
        name = f"count/widgets.{group}"
        kube.request("POST", path(ns, "resourcequotas"), quota("widgets", {name: "5"}))
        wait_used("steward", kube, ns, "widgets", {name: "0"})
        widgets = path(ns, "widgets", group=group)
        for w in ("a", "b"):
            create(
                kube,
                widgets,
                {"apiVersion": f"{group}/v1", "kind": "Widget", "metadata": {"name": w}},
            )
        wait_used("steward", kube, ns, "widgets", {name: "2"})
        delete(kube, f"{widgets}/a")
        wait_used("steward", kube, ns, "widgets", {name: "1"})
    finally:
        delete(kube, f"{CRDS}/widgets.{group}")
    wait_for("steward", lambda: not _served(kube, group), "the CRD gone from discovery")
    # The type went away under the controller's watch: it goes on with the others.
    kube.request("POST", path(ns, "resourcequotas"), quota("after", {"configmaps": "5"}))
    wait_used("steward", kube, ns, "after", {"configmaps": "1"})  # kube-root-ca.crt


def _served(kube: KubeClient, group: str) -> bool:
    try:
        kube.request("GET", f"/apis/{group}/v1")
    except NotFoundError:
        return False
    return True


@pytest.mark.asyncio
async def test_watches_only_counted_types(
    quota_cluster: LocalCluster,
    quota_kube: KubeClient,
    quota_namespace: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The mirror holds ResourceQuotas alone until a quota counts something; then the
    counted types join it (secrets by name only), and leave it once no quota counts them.

    Catches: types mirrored that no quota counts (every pod or Secret of the cluster
    held for nothing), Secret bodies mirrored, or a type kept after its last quota."""
    monkeypatch.setattr(controller_module, "PRUNE_PERIOD", 0.0)
    kube, ns = quota_kube, quota_namespace
    kubeconfig = quota_cluster.component_kubeconfig(IDENTITY)
    async with (
        in_loop_informer(quota_cluster) as informer,
        controllers(CONTROLLER, kubeconfig, informer, ns) as starter,
    ):
        mirror = starter.start().controller.mirror
        await eventually(mirror.has_synced, "the mirror's first snapshot")
        assert mirror.watched_types() == [RESOURCEQUOTAS]
        body = quota("q", {"pods": "5", "secrets": "5"})
        await asyncio.to_thread(kube.request, "POST", path(ns, "resourcequotas"), body)
        await asyncio.to_thread(wait_used, "steward", kube, ns, "q", {"pods": "0", "secrets": "0"})
        assert set(mirror.watched_types()) == {RESOURCEQUOTAS, PODS, SECRETS}
        assert mirror.subscription(SECRETS).fields == ("metadata.name",)
        await asyncio.to_thread(delete, kube, path(ns, "resourcequotas", "q"))
        other = quota("other", {"services": "1"})
        await asyncio.to_thread(kube.request, "POST", path(ns, "resourcequotas"), other)
        await asyncio.to_thread(wait_used, "steward", kube, ns, "other", {"services": "0"})
        await eventually(
            lambda: set(mirror.watched_types()) == {RESOURCEQUOTAS, SERVICES},
            "pods and secrets dropped",
        )
