"""Scenarios of Steward's disruption controller alone, where the controller must be
stopped and started, which upstream's (in kube-controller-manager) cannot be."""

from __future__ import annotations

import pytest

from tests.controllers.disruption.scenarios import Side, wait
from tests.controllers.harness import ControllerHost

pytestmark = pytest.mark.integration


def test_eviction_waits_for_the_observed_generation(
    steward: Side, steward_host: ControllerHost
) -> None:
    """A budget whose spec changed while the controller was away (its generation ahead of
    ``status.observedGeneration``) makes the eviction API refuse, whatever
    ``disruptionsAllowed`` says; once the controller is back and has synced the new
    generation, the eviction goes through. Breaks when the status does not record the
    generation it was computed from."""
    steward.workload("Deployment", "web", 2)
    wait(lambda: steward.ready({"app": "web"}, 2), "web Ready")
    steward.budget("web", {"matchLabels": {"app": "web"}}, minAvailable=2)
    wait(lambda: steward.synced("web", currentHealthy=2, disruptionsAllowed=0), "budget web")
    steward_host.stop_controller()
    steward.kube.request(
        "PATCH",
        f"{steward.policy}/web",
        {"spec": {"minAvailable": 1}},
        content_type="application/merge-patch+json",
    )
    pod = steward.pods({"app": "web"})[0]["metadata"]["name"]
    assert steward.evict(pod) == "blocked"
    steward_host.start(steward.ns)
    status = wait(lambda: steward.synced("web", disruptionsAllowed=1), "budget web at generation 2")
    assert status["observedGeneration"] == 2
    assert status["conditions"][0]["observedGeneration"] == 2
    assert steward.evict(pod) == "evicted"
