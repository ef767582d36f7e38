"""The manager's state in the API server: one coordination.k8s.io/v1 Lease per controller.

A controller's Lease is ``controller-<name>`` in Steward's namespace (default
``steward-system``, created if missing). ``spec.holderIdentity`` is the active instance,
``spec.renewTime`` its last persisted renewal, ``spec.leaseTransitions`` the number of
hand-overs; annotations hold what a Lease has no field for: the epoch (fencing token),
the standbys, a run-time enablement override and what the instance registered with.

Requests are raw JSON over HTTP (urllib3, orjson) with the access settings of
:func:`steward.kube.load_access`; no kubernetes client models.

# Errors
Every call raises :class:`~steward.kube.ApiUnavailableError` when the API
server cannot be reached and :class:`~steward.kube.ApiStatusError` for an
error answer; :class:`ConflictError` (HTTP 409) means the Lease changed since it was
read (optimistic concurrency through ``metadata.resourceVersion``).
"""

from __future__ import annotations

import datetime
import math
from dataclasses import dataclass, field
from typing import Any, TypeVar

import orjson

from steward.kube import (
    ConflictError,
    KubeClient,
    NotFoundError,
)

_T = TypeVar("_T")

LEASES = "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases"
PREFIX = "controller-"
"""Controller Leases are named ``controller-<name>``."""
ANNOTATION = "steward.io/"
MANAGED_BY = {"app.kubernetes.io/managed-by": "steward-manager"}
KIND_LABEL = "steward.io/lease-kind"


def format_micro_time(value: datetime.datetime) -> str:
    """A Kubernetes MicroTime: RFC 3339 UTC with microseconds."""
    return value.astimezone(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def parse_micro_time(value: str | None) -> datetime.datetime | None:
    """Parse a MicroTime (or Time); None for empty or malformed values."""
    if not value:
        return None
    try:
        return datetime.datetime.fromisoformat(value.replace("Z", "+00:00"))
    except ValueError:
        return None


@dataclass
class ControllerLease:
    """One controller's Lease, decoded."""

    controller: str
    holder: str = ""
    epoch: int = 0
    renew_time: datetime.datetime | None = None
    acquire_time: datetime.datetime | None = None
    lease_duration: float = 15.0
    transitions: int = 0
    standbys: list[str] = field(default_factory=list)
    enabled_override: bool | None = None
    """True/False after EnableController/DisableController; None to follow the rules."""
    language: str = ""
    runtime_version: str = ""
    watches: list[tuple[str, str, str]] = field(default_factory=list)
    """(group, version, resource) of the watched types, as last registered."""
    resource_version: str = ""
    """The Lease's resourceVersion as read; empty when it does not exist yet."""

    @property
    def object_name(self) -> str:
        """The Lease's name."""
        return PREFIX + self.controller

    def to_json(self, namespace: str) -> dict[str, Any]:
        """The Lease object to write."""
        a = ANNOTATION
        annotations = {
            a + "controller": self.controller,
            a + "epoch": str(self.epoch),
            a + "standbys": orjson.dumps(self.standbys).decode(),
            a + "instance": orjson.dumps(
                {
                    "language": self.language,
                    "runtimeVersion": self.runtime_version,
                    "watches": [list(w) for w in self.watches],
                }
            ).decode(),
        }
        if self.enabled_override is not None:
            annotations[a + "enabled"] = "true" if self.enabled_override else "false"
        spec: dict[str, Any] = {
            "leaseDurationSeconds": max(1, math.ceil(self.lease_duration)),
            "leaseTransitions": self.transitions,
        }
        if self.holder:
            spec["holderIdentity"] = self.holder
        if self.renew_time is not None:
            spec["renewTime"] = format_micro_time(self.renew_time)
        if self.acquire_time is not None:
            spec["acquireTime"] = format_micro_time(self.acquire_time)
        metadata: dict[str, Any] = {
            "name": self.object_name,
            "namespace": namespace,
            "labels": {**MANAGED_BY, KIND_LABEL: "controller"},
            "annotations": annotations,
        }
        if self.resource_version:
            metadata["resourceVersion"] = self.resource_version
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": spec,
        }

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> ControllerLease | None:
        """Decode a Lease; None when it is not a controller Lease of the manager."""
        meta = doc.get("metadata") or {}
        annotations = meta.get("annotations") or {}
        name = annotations.get(ANNOTATION + "controller") or ""
        if not name or meta.get("name") != PREFIX + name:
            return None
        spec = doc.get("spec") or {}
        try:
            epoch = int(annotations.get(ANNOTATION + "epoch") or 0)
        except ValueError:
            epoch = 0
        try:
            raw = annotations.get(ANNOTATION + "standbys", "[]")
            standbys = [str(s) for s in orjson.loads(raw)]
        except (orjson.JSONDecodeError, TypeError):
            standbys = []
        try:
            instance = orjson.loads(annotations.get(ANNOTATION + "instance", "{}"))
            watches = [(str(w[0]), str(w[1]), str(w[2])) for w in instance.get("watches") or ()]
        except (orjson.JSONDecodeError, TypeError, IndexError, AttributeError):
            instance, watches = {}, []
        enabled = annotations.get(ANNOTATION + "enabled")
        return cls(
            controller=name,
            holder=spec.get("holderIdentity") or "",
            epoch=epoch,
            renew_time=parse_micro_time(spec.get("renewTime")),
            acquire_time=parse_micro_time(spec.get("acquireTime")),
            lease_duration=float(spec.get("leaseDurationSeconds") or 15),
            transitions=int(spec.get("leaseTransitions") or 0),
            standbys=standbys,
            enabled_override=None if enabled is None else enabled == "true",
            language=str(instance.get("language") or ""),
            runtime_version=str(instance.get("runtimeVersion") or ""),
            watches=watches,
            resource_version=str(meta.get("resourceVersion") or ""),
        )


class LeaseStore:
    """Reads and writes the controller Leases of one namespace."""

    def __init__(self, client: KubeClient, namespace: str) -> None:
        self.client = client
        self.namespace = namespace

    @property
    def path(self) -> str:
        """The Leases collection of the namespace."""
        return LEASES.format(namespace=self.namespace)

    async def ensure_namespace(self) -> None:
        """Create the namespace unless it exists."""
        await self.client.arun(self.client.ensure_namespace, self.namespace)

    async def load_all(self) -> list[ControllerLease]:
        """Every controller Lease of the namespace."""
        query = f"?labelSelector={KIND_LABEL}%3Dcontroller"
        doc = await self.client.arequest("GET", self.path + query)
        found = []
        for item in doc.get("items") or ():
            lease = ControllerLease.from_json(item)
            if lease is not None:
                found.append(lease)
        return found

    async def write(self, lease: ControllerLease) -> None:
        """Create or replace ``lease`` and update its resource version.

        A conflict (someone else changed it) is resolved once by taking the newer
        resource version and writing again: while this manager leads, its state wins.

        Raises:
            ApiUnavailableError, ApiStatusError: the write failed; the Lease is unchanged.
        """
        for attempt in range(2):
            try:
                if lease.resource_version:
                    doc = await self.client.arequest(
                        "PUT", f"{self.path}/{lease.object_name}", lease.to_json(self.namespace)
                    )
                else:
                    doc = await self.client.arequest(
                        "POST", self.path, lease.to_json(self.namespace)
                    )
            except (ConflictError, NotFoundError):
                if attempt:
                    raise
                try:
                    current = await self.client.arequest("GET", f"{self.path}/{lease.object_name}")
                    lease.resource_version = str(current["metadata"]["resourceVersion"])
                except NotFoundError:
                    lease.resource_version = ""
                continue
            lease.resource_version = str(doc["metadata"]["resourceVersion"])
            return
