"""Whose slices Steward's EndpointSlice controller writes: by default upstream's
managed-by value (a drop-in replacement: upstream's conformance spec "should create and
delete EndpointSlices for a Service with a selector that matches no pods" looks for
``endpointslice-controller.k8s.io``), Steward's own value only beside upstream's
controller (the definition's flags for that); slices of any other value are left alone,
even those the Service controls."""

from __future__ import annotations

import argparse
import urllib.parse
from typing import Any

import pytest

from steward.controllers.endpointslice.controller import CONTROLLER
from steward.controllers.endpointslice.sync import (
    MANAGED_BY_LABEL,
    SERVICE_NAME_LABEL,
    STEWARD_MANAGED_BY,
    UPSTREAM_MANAGED_BY,
)
from steward.kube import KubeClient, NotFoundError
from tests.controllers.endpoints.conftest import eventually, service_body, services_path
from tests.controllers.endpointslice.conftest import Starter


def parsed(*argv: str) -> argparse.Namespace:
    """The controller's own flags as ``argv`` sets them."""
    parser = argparse.ArgumentParser()
    for add in CONTROLLER.add_flags:
        add(parser)
    return parser.parse_args(list(argv))


@pytest.mark.unit
def test_the_default_is_upstreams_value_and_beside_upstreams_steward_has_its_own() -> None:
    assert parsed().managed_by == "endpointslice-controller.k8s.io"
    assert UPSTREAM_MANAGED_BY == "endpointslice-controller.k8s.io"
    beside = CONTROLLER.beside_upstream
    assert beside is not None  # it may run beside upstream's ...
    assert parsed(*beside).managed_by == STEWARD_MANAGED_BY  # ... with a value of its own
    assert STEWARD_MANAGED_BY != UPSTREAM_MANAGED_BY
    assert parsed(*CONTROLLER.alone).managed_by == UPSTREAM_MANAGED_BY


def _path(ns: str) -> str:
    return f"/apis/discovery.k8s.io/v1/namespaces/{ns}/endpointslices"


def _slices(kube: KubeClient, ns: str, managed_by: str) -> list[dict[str, Any]]:
    selector = urllib.parse.quote(f"{SERVICE_NAME_LABEL}=svc,{MANAGED_BY_LABEL}={managed_by}")
    return kube.request("GET", f"{_path(ns)}?labelSelector={selector}").get("items") or []


def _get(kube: KubeClient, ns: str, name: str) -> dict[str, Any] | None:
    try:
        return kube.request("GET", f"{_path(ns)}/{name}")
    except NotFoundError:
        return None


@pytest.mark.integration
@pytest.mark.asyncio
async def test_in_upstreams_place_slices_carry_upstreams_value_and_others_are_left_alone(
    alone_kube: KubeClient, alone_namespace: str, alone_controllers: Starter
) -> None:
    """Upstream's conformance scenario with Steward's controller alone, default flags: a
    Service whose selector matches no pods gets a placeholder slice managed by
    ``endpointslice-controller.k8s.io``, relabelled as the Service is, gone with the
    Service. A slice of the Service managed by another value (Steward's own, as left by
    a time beside upstream's), controlled by the Service and with a stale endpoint, is
    never written, through both syncs."""
    kube, ns = alone_kube, alone_namespace
    svc = kube.request("POST", services_path(ns), service_body("svc"))
    owner = {
        "apiVersion": "v1",
        "kind": "Service",
        "name": "svc",
        "uid": svc["metadata"]["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }
    other = {
        "apiVersion": "discovery.k8s.io/v1",
        "kind": "EndpointSlice",
        "metadata": {
            "name": "svc-other",
            "labels": {SERVICE_NAME_LABEL: "svc", MANAGED_BY_LABEL: STEWARD_MANAGED_BY},
            "ownerReferences": [owner],
        },
        "addressType": "IPv4",
        "endpoints": [{"addresses": ["192.0.2.1"]}],
        "ports": [],
    }
    made = kube.request("POST", _path(ns), other)
    alone_controllers.start()

    (placeholder,) = await eventually(
        lambda: _slices(kube, ns, UPSTREAM_MANAGED_BY), "a slice managed by upstream's value"
    )
    assert not placeholder.get("endpoints")
    assert placeholder["metadata"]["ownerReferences"] == [owner]
    assert _get(kube, ns, "svc-other") == made

    # A second sync: the Service relabelled, its slice follows; the other stays as made.
    kube.request(
        "PATCH",
        services_path(ns, "svc"),
        {"metadata": {"labels": {"team": "blue"}}},
        content_type="application/merge-patch+json",
    )
    await eventually(
        lambda: [
            s
            for s in _slices(kube, ns, UPSTREAM_MANAGED_BY)
            if s["metadata"]["labels"].get("team") == "blue"
        ],
        "the placeholder relabelled",
    )
    assert [s["metadata"]["uid"] for s in _slices(kube, ns, UPSTREAM_MANAGED_BY)] == [
        placeholder["metadata"]["uid"]
    ]
    assert _get(kube, ns, "svc-other") == made

    kube.request("DELETE", services_path(ns, "svc"))
    await eventually(
        lambda: not _slices(kube, ns, UPSTREAM_MANAGED_BY), "the slices gone with the Service"
    )
