"""Steward's namespace controller against the real control plane (``ns_cluster``, no
upstream namespace-controller): the scenarios of conftest, with the conditions upstream's
deleter writes at each scenario's point spelled out."""

from __future__ import annotations

import pytest

from steward.controllers.namespace.deletion import OK_MESSAGES, OK_REASONS
from steward.kube import KubeClient
from tests.controllers.namespace.conftest import (
    Snapshot,
    Starter,
    custom_resource_with_finalizer,
    discovery_failure,
    namespace_of,
    plain_content,
    pods_first,
    stays,
)

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]


def ok(*failing: str) -> Snapshot:
    """Every condition in its "ok" form but ``failing`` (filled in by the caller)."""
    return {t: ("False", OK_REASONS[t], OK_MESSAGES[t]) for t in OK_REASONS if t not in failing}


async def test_a_namespace_not_being_deleted_is_left_alone(
    ns_kube: KubeClient, ns_namespace: str, ns_controllers: Starter
) -> None:
    """No deletion mark: no phase change, no conditions, the finalizer stays."""
    ns_controllers.start()
    await stays(
        lambda: (namespace_of(ns_kube, ns_namespace) or {}).get("status") == {"phase": "Active"},
        "an untouched Active namespace",
        6.0,
    )
    spec = (namespace_of(ns_kube, ns_namespace) or {}).get("spec")
    assert spec == {"finalizers": ["kubernetes"]}


async def test_plain_content_goes_then_the_namespace(
    ns_kube: KubeClient, ns_namespace: str, ns_controllers: Starter, suffix: str
) -> None:
    ns_controllers.start()
    assert await plain_content(ns_kube, ns_namespace, suffix) == {}


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


async def test_a_custom_resource_finalizer_holds_the_namespace(
    ns_kube: KubeClient, ns_namespace: str, ns_controllers: Starter, suffix: str
) -> None:
    ns_controllers.start()
    snapshot = await custom_resource_with_finalizer(ns_kube, ns_namespace, suffix)
    assert snapshot == {
        **ok("NamespaceContentRemaining", "NamespaceFinalizersRemaining"),
        "NamespaceContentRemaining": (
            "True",
            "SomeResourcesRemain",
            f"Some resources are remaining: widgets.ns-{suffix}.steward.test has 1 resource"
            " instances",
        ),
        "NamespaceFinalizersRemaining": (
            "True",
            "SomeFinalizersRemain",
            "Some content in the namespace has finalizers remaining: steward.test/hold in 1"
            " resource instances",
        ),
    }


async def test_pods_go_first(
    ns_kube: KubeClient, ns_namespace: str, ns_controllers: Starter, suffix: str
) -> None:
    """While a pod terminates the rest waits; the conditions written meanwhile are
    upstream's: every one "ok" (its early return does not count what remains)."""
    ns_controllers.start()
    assert await pods_first(ns_kube, ns_namespace, suffix) == ok()


async def test_a_stale_aggregated_api_keeps_the_namespace(
    ns_kube: KubeClient, ns_namespace: str, ns_controllers: Starter, suffix: str
) -> None:
    ns_controllers.start()
    gv = f"ns-{suffix}.steward.test/v1alpha1"
    snapshot = await discovery_failure(ns_kube, ns_namespace, suffix)
    assert snapshot == {
        **ok("NamespaceDeletionDiscoveryFailure"),
        "NamespaceDeletionDiscoveryFailure": (
            "True",
            "DiscoveryFailed",
            "Discovery failed for some groups, 1 failing: unable to retrieve the complete list"
            f" of server APIs: {gv}: stale GroupVersion discovery: {gv}",
        ),
    }
