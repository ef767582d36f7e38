"""Steward's resourcequota controller alone on ``quota_cluster``: admission enforcing the
status it writes, and object counts of a custom resource (a type the controller starts
watching when a quota names it)."""

from __future__ import annotations

import uuid

import pytest

from steward.kube import ApiStatusError, KubeClient
from tests.controllers.quota.quotas import (
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
    once the quota names it, and lowered when a widget is deleted.

    Catches: count/ names of types outside the core registry not resolved through
    discovery, their type not watched, or their deletions not replenishing the quota."""
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
