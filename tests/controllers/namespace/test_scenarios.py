"""Steward's namespace controller against the real control plane (``ns_cluster``, no
upstream namespace-controller): what it must leave alone, and the control that nothing
else finalizes a namespace there. The scenarios of conftest run in test_differential, on
this cluster and under upstream's controller at once, each side held to the conditions
upstream's deleter writes (:data:`~tests.controllers.namespace.conftest.EXPECTED`)."""

from __future__ import annotations

import pytest

from steward.kube import KubeClient
from tests.controllers.namespace.conftest import (
    Starter,
    namespace_of,
    stays,
)

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]


async def test_a_namespace_not_being_deleted_is_left_alone(
    ns_kube: KubeClient, ns_namespace: str, ns_controllers: Starter
) -> None:
    """No deletion mark: no phase change, no conditions, the finalizer stays."""
    ns_controllers.start()
    await stays(
        lambda: (namespace_of(ns_kube, ns_namespace) or {}).get("status") == {"phase": "Active"},
        "an untouched Active namespace",
        3.0,
    )
    spec = (namespace_of(ns_kube, ns_namespace) or {}).get("spec")
    assert spec == {"finalizers": ["kubernetes"]}


async def test_a_namespace_stays_terminating_without_the_controller(
    ns_kube: KubeClient, ns_namespace: str
) -> None:
    """The control: in ns_cluster nothing else finalizes a namespace (upstream's
    namespace-controller is off), so every other test here shows Steward's work."""
    ns_kube.request("DELETE", f"/api/v1/namespaces/{ns_namespace}")
    await stays(lambda: namespace_of(ns_kube, ns_namespace) is not None, "namespace kept", 8.0)
    assert (namespace_of(ns_kube, ns_namespace) or {}).get("status", {}).get("phase") == (
        "Terminating"
    )
