"""Steward's resourcequota controller alone on ``quota_cluster``: what admission does
before and after the controller writes a status, and object counts of a custom resource
(a type the controller starts watching when a quota names it)."""

from __future__ import annotations

import uuid

import pytest

from steward.kube import ApiStatusError, KubeClient
from tests.controllers.harness import ControllerHost
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


def test_admission_refuses_until_status_is_written(
    quota_host: ControllerHost, quota_kube: KubeClient, quota_namespace: str
) -> None:
    """A quota without status makes the API server refuse what it counts ("status unknown
    for quota"); once Steward's controller writes the status, creates pass and are
    counted.

    Catches: the controller not writing status.hard/status.used for a new quota, or
    writing them in a shape admission does not accept."""
    kube, ns = quota_kube, quota_namespace
    kube.request("POST", path(ns, "resourcequotas"), quota("secrets", {"secrets": "5"}))
    secret = {"metadata": {"name": "s"}, "stringData": {"k": "v"}}
    with pytest.raises(ApiStatusError, match="status unknown for quota"):
        kube.request("POST", path(ns, "secrets"), secret)
    quota_host.start(ns)
    try:
        wait_used("steward", kube, ns, "secrets", {"secrets": "0"})
        create(kube, path(ns, "secrets"), secret)
        wait_used("steward", kube, ns, "secrets", {"secrets": "1"})
    finally:
        quota_host.stop_controller()


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
