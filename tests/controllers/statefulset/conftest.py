"""Fixtures of the StatefulSet controller's integration tests: a control plane of the
package's own for Steward's side, the session's for upstream's.

- ``steward_plane``: kube-controller-manager without its statefulset controller (3 kwok
  nodes, which make scheduled pods Running and Ready; the garbage collector and the
  PersistentVolume binder are upstream's); Steward's runs in this process (an informer
  and the controller on a loop of their own, as the identities ``informer`` and
  ``steward:controller:statefulset`` with only the RBAC of ``deploy/rbac/``), five
  workers, watching the test's namespace.
- ``upstream_plane``: the session's ``cluster``, where kube-controller-manager runs its
  statefulset controller.

The pods' template gives them no grace period (kwok removes a deleted pod at once), and
a claim template asks for no storage class, so a test that wants claims bound creates
PersistentVolumes bound to them in advance (:meth:`Side.volumes`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest

from steward.cluster import LocalCluster
from steward.controllers.statefulset.controller import CONTROLLER, WORKERS
from steward.kube import NotFoundError
from tests.conftest import local_cluster
from tests.controllers import harness
from tests.controllers.harness import (
    ControllerHost,
    hosted,
    resource_path,
    steward,
    update,
    upstream,
)

__all__ = ["steward", "upstream"]

IDENTITY = "controller-statefulset"
APPS = "/apis/apps/v1"
CORE = "/api/v1"
UNSCHEDULABLE = {"steward.test/nowhere": "true"}
"""A nodeSelector no node has: pods stay Pending."""


@pytest.fixture(scope="package")
def steward_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    yield from local_cluster(tmp_path_factory, "statefulset", controllers="*,-statefulset")


@pytest.fixture(scope="package")
def steward_host(steward_plane: LocalCluster) -> Iterator[ControllerHost]:
    yield from hosted(steward_plane, CONTROLLER, IDENTITY, workers=WORKERS)


@pytest.fixture
def upstream_plane(cluster: LocalCluster) -> LocalCluster:
    return cluster


@pytest.fixture(scope="package")
def side_kind() -> type[Side]:
    """The sides of this package's scenarios (the harness's ``steward`` and ``upstream``)."""
    return Side


def template(image: str, **spec: Any) -> dict[str, Any]:
    return {
        "metadata": {"labels": {"app": "web"}},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "main", "image": image}],
            **spec,
        },
    }


def claim_template(name: str) -> dict[str, Any]:
    return {
        "metadata": {"name": name},
        "spec": {
            "accessModes": ["ReadWriteOnce"],
            "storageClassName": "",
            "resources": {"requests": {"storage": "1Mi"}},
        },
    }


@dataclass
class Side(harness.Side):
    """One side of a scenario (see :class:`tests.controllers.harness.Side`) with the
    StatefulSet, pod, claim, revision and Event reads and writes of these tests."""

    def path(self, plural: str, name: str = "") -> str:
        prefix = APPS if plural in ("statefulsets", "controllerrevisions") else CORE
        return resource_path(prefix, self.ns, plural, name)

    def create(
        self, name: str, replicas: int, image: str = "img:v1", **spec: Any
    ) -> dict[str, Any]:
        """A StatefulSet ``name`` selecting ``app: web`` (``spec`` over the defaults;
        ``pod`` adds to the pod template's spec)."""
        pod = spec.pop("pod", {})
        body = {
            "apiVersion": "apps/v1",
            "kind": "StatefulSet",
            "metadata": {"name": name},
            "spec": {
                "replicas": replicas,
                "serviceName": name,
                "selector": {"matchLabels": {"app": "web"}},
                "template": template(image, **pod),
                **spec,
            },
        }
        created: dict[str, Any] = self.kube.request("POST", self.path("statefulsets"), body)
        return created

    def change(self, name: str, edit: Any) -> dict[str, Any]:
        """Edit the set's spec with ``edit(spec)`` and write it."""
        path = self.path("statefulsets", name)

        def change(obj: dict[str, Any]) -> None:
            edit(obj["spec"])

        return update(self.kube, path, change, f"{path}: change")

    def scale(self, name: str, replicas: int) -> None:
        self.change(name, lambda spec: spec.update(replicas=replicas))

    def set_image(self, name: str, image: str) -> None:
        def edit(spec: dict[str, Any]) -> None:
            spec["template"]["spec"]["containers"][0]["image"] = image

        self.change(name, edit)

    def sts(self, name: str) -> dict[str, Any]:
        found: dict[str, Any] = self.kube.request("GET", self.path("statefulsets", name))
        return found

    def status(self, name: str) -> dict[str, Any]:
        return dict(self.sts(name).get("status") or {})

    def _items(self, plural: str) -> list[dict[str, Any]]:
        found = self.kube.request("GET", self.path(plural))
        return sorted(found.get("items") or [], key=lambda o: o["metadata"]["name"])

    def pods(self) -> list[dict[str, Any]]:
        return self._items("pods")

    def live_pods(self) -> list[dict[str, Any]]:
        return [p for p in self.pods() if not p["metadata"].get("deletionTimestamp")]

    def pod_names(self) -> list[str]:
        return [p["metadata"]["name"] for p in self.live_pods()]

    def claims(self) -> list[dict[str, Any]]:
        return self._items("persistentvolumeclaims")

    def revisions(self) -> list[dict[str, Any]]:
        return self._items("controllerrevisions")

    def events(self) -> list[dict[str, Any]]:
        """The Events on StatefulSets, in the order they were recorded."""
        found = self.kube.request("GET", self.path("events"))
        return sorted(
            (
                e
                for e in found.get("items") or []
                if (e.get("involvedObject") or {}).get("kind") == "StatefulSet"
            ),
            key=lambda e: int(e["metadata"]["resourceVersion"]),
        )

    def delete_pod(self, name: str) -> None:
        with contextlib.suppress(NotFoundError):
            self.kube.request("DELETE", self.path("pods", name))

    def volumes(self, claims: list[str]) -> None:
        """PersistentVolumes bound in advance to these claims of the namespace (KCM's
        binder completes the binding once the claims exist)."""
        for claim in claims:
            body = {
                "apiVersion": "v1",
                "kind": "PersistentVolume",
                "metadata": {"name": f"{self.ns}-{claim}"},
                "spec": {
                    "capacity": {"storage": "1Mi"},
                    "accessModes": ["ReadWriteOnce"],
                    "storageClassName": "",
                    "persistentVolumeReclaimPolicy": "Retain",
                    "hostPath": {"path": f"/tmp/{self.ns}/{claim}"},
                    "claimRef": {"namespace": self.ns, "name": claim},
                },
            }
            self.kube.request("POST", "/api/v1/persistentvolumes", body)
        self._volumes = [*getattr(self, "_volumes", []), *(f"{self.ns}-{c}" for c in claims)]

    def cleanup(self) -> None:
        for name in getattr(self, "_volumes", []):
            with contextlib.suppress(NotFoundError):
                self.kube.request("DELETE", f"/api/v1/persistentvolumes/{name}")


def is_ready(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    return status.get("phase") == "Running" and any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or ()
    )


def revision_of(pod: dict[str, Any]) -> str:
    return str((pod["metadata"].get("labels") or {}).get("controller-revision-hash", ""))


def settled(side: Side, name: str) -> dict[str, Any] | None:
    """The set's status once the controller has acted on its generation, every wanted pod
    exists, is ready and of the update revision, and none is being deleted; else None."""
    sts = side.sts(name)
    status = sts.get("status") or {}
    want = sts["spec"]["replicas"]
    pods = side.pods()
    if (
        status.get("observedGeneration") != sts["metadata"]["generation"]
        or status.get("replicas") != want
        or status.get("readyReplicas", 0) != want
        or status.get("availableReplicas", 0) != want
        or len(pods) != want
        or not all(is_ready(p) and not p["metadata"].get("deletionTimestamp") for p in pods)
    ):
        return None
    return dict(status)
