"""Resource types: one value per type, used as the mirror's key, on the wire and in owner checks.

A :class:`Resource` names a type the way the API server's paths do (group, version,
plural) and carries what a controller otherwise passes beside it: the ``kind`` its objects
carry (for controller references, Events and owner checks) and whether it is namespaced.
Two resources are equal when group, version and plural are, so a resource built from the
wire (:meth:`Resource.from_wire`) finds the one a controller declared.

The types Kubernetes' own controllers read and write are here as constants
(:data:`PODS`, :data:`JOBS`, ...); any other type is one line::

    WIDGETS = steward.Resource("example.com", "v1", "widgets", "Widget")

:func:`owner_of` answers "which object of this type controls that one": the controlling
owner reference, checked for kind and API group, as a typed :class:`ObjectRef`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any

from steward.v1 import informer_pb2 as pb

if TYPE_CHECKING:
    from steward.runtime.mirror import MirrorObject


@dataclass(frozen=True)
class Resource:
    """A resource type: ``group`` (empty for the core group), ``version``, ``plural`` (the
    path segment), and, not part of its identity, ``kind`` and ``namespaced``."""

    group: str
    version: str
    plural: str
    kind: str = field(default="", compare=False)
    """The ``kind`` its objects carry ("Pod"); needed for owner checks and Events."""
    namespaced: bool = field(default=True, compare=False)
    """Whether its objects live in namespaces (Nodes and Namespaces do not)."""

    @classmethod
    def from_wire(cls, rtype: pb.ResourceType) -> Resource:
        """The resource the informer's :class:`ResourceType` names (no kind)."""
        return cls(rtype.group, rtype.version, rtype.resource)

    @property
    def api_version(self) -> str:
        """``group/version``, or ``version`` for the core group ("apps/v1", "v1")."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @cached_property
    def wire(self) -> pb.ResourceType:
        """The informer's :class:`ResourceType` of this resource (built once)."""
        return pb.ResourceType(group=self.group, version=self.version, resource=self.plural)

    def path(self, namespace: str = "", name: str = "", subresource: str = "") -> str:
        """The API server's path of the collection (no ``name``) or of one object, e.g.
        ``/apis/batch/v1/namespaces/ns/jobs/pi/status``."""
        path = f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"
        if namespace:
            path += f"/namespaces/{namespace}"
        path += f"/{self.plural}"
        if name:
            path += f"/{name}"
            if subresource:
                path += f"/{subresource}"
        return path

    def names(self, kind: str, api_version: str) -> bool:
        """Whether a reference's ``kind`` and ``apiVersion`` name this type (any version
        of its group, as owner references of one object may carry an older version)."""
        group = api_version.rpartition("/")[0]
        return kind == self.kind and group == self.group

    def __str__(self) -> str:
        return f"{self.plural}.{self.group}" if self.group else self.plural


def as_resource(rtype: Resource | pb.ResourceType) -> Resource:
    """``rtype`` as a :class:`Resource` (a wire :class:`ResourceType` has no kind)."""
    return rtype if isinstance(rtype, Resource) else Resource.from_wire(rtype)


@dataclass(frozen=True)
class ObjectRef:
    """A reference to one object of a known type (kube-rs' ``ObjectRef``)."""

    resource: Resource
    namespace: str
    name: str
    uid: str

    @property
    def key(self) -> tuple[str, str]:
        """``(namespace, name)``: the referenced object's key (a work-queue request's)."""
        return (self.namespace, self.name)


def owner_of(obj: MirrorObject | Mapping[str, Any], owner: Resource) -> ObjectRef | None:
    """The object of type ``owner`` that controls ``obj`` (a mirror object or a dict):
    its controller reference when that names ``owner``'s kind and group, else None. The
    reference is not resolved: whether the owner still exists under that UID is the
    caller's to check. A namespaced owner lives in ``obj``'s namespace."""
    if isinstance(obj, Mapping):
        meta = obj.get("metadata") or {}
        namespace = meta.get("namespace", "")
        for ref in meta.get("ownerReferences") or ():
            if ref.get("controller"):
                if not owner.names(ref.get("kind", ""), ref.get("apiVersion", "")):
                    return None
                ns = namespace if owner.namespaced else ""
                return ObjectRef(owner, ns, ref.get("name", ""), ref.get("uid", ""))
        return None
    pref = obj.controller_owner()
    if pref is None or not owner.names(pref.kind, pref.api_version):
        return None
    return ObjectRef(owner, obj.namespace if owner.namespaced else "", pref.name, pref.uid)


# The types of Kubernetes' own controllers -------------------------------------------------
PODS = Resource("", "v1", "pods", "Pod")
SERVICES = Resource("", "v1", "services", "Service")
REPLICATION_CONTROLLERS = Resource("", "v1", "replicationcontrollers", "ReplicationController")
ENDPOINTS = Resource("", "v1", "endpoints", "Endpoints")
CONFIGMAPS = Resource("", "v1", "configmaps", "ConfigMap")
SECRETS = Resource("", "v1", "secrets", "Secret")
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")
EVENTS = Resource("", "v1", "events", "Event")
NODES = Resource("", "v1", "nodes", "Node", namespaced=False)
NAMESPACES = Resource("", "v1", "namespaces", "Namespace", namespaced=False)
JOBS = Resource("batch", "v1", "jobs", "Job")
CRONJOBS = Resource("batch", "v1", "cronjobs", "CronJob")
REPLICASETS = Resource("apps", "v1", "replicasets", "ReplicaSet")
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment")
DAEMONSETS = Resource("apps", "v1", "daemonsets", "DaemonSet")
STATEFULSETS = Resource("apps", "v1", "statefulsets", "StatefulSet")
CONTROLLER_REVISIONS = Resource("apps", "v1", "controllerrevisions", "ControllerRevision")
ENDPOINT_SLICES = Resource("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice")
HORIZONTAL_POD_AUTOSCALERS = Resource(
    "autoscaling", "v2", "horizontalpodautoscalers", "HorizontalPodAutoscaler"
)
LEASES = Resource("coordination.k8s.io", "v1", "leases", "Lease")
