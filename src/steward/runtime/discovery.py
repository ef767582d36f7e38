"""What the API server serves: its resource types, their verbs and scope, and kinds to types.

Controllers that work over every type (the garbage collector, the namespace controller)
and those that follow a reference to any type (a scale target, an owner) ask the API
server's discovery, as upstream's discovery client and REST mapper do. :class:`Discovery`
reads the aggregated discovery documents (``/api`` and ``/apis`` as
``apidiscovery.k8s.io/v2`` ``APIGroupDiscoveryList``: two requests for the whole server)
and keeps the answer until asked for a fresh one.

- :meth:`Discovery.preferred` is upstream's ``ServerPreferredResources``: every resource
  once, in the first version of its group's preference order that serves it, with its
  verbs. Group versions an aggregated API server cannot serve now (``freshness: Stale``)
  are reported in :attr:`Discovered.failed` and left out, so a caller can go on with the
  rest and say which failed (upstream's ``ErrGroupDiscoveryFailed``).
- :meth:`Discovery.find` and :meth:`Discovery.targets` map a kind to its resource (a REST
  mapping), reading discovery again once when the kind is not known (a custom resource
  defined since).

# Errors
Discovery that cannot be read raises what :meth:`~steward.kube.KubeClient.arequest`
raises (:class:`~steward.kube.ApiUnavailableError`, :class:`~steward.kube.ApiStatusError`).
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from steward.kube import KubeClient
from steward.runtime.resources import Resource

AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"
"""The Accept header of aggregated discovery (GA since Kubernetes 1.30)."""


def split_api_version(api_version: str) -> tuple[str, str]:
    """(group, version) of an ``apiVersion`` ("apps/v1" → ("apps", "v1"), "v1" → ("", "v1")).

    Raises:
        ValueError: malformed, with upstream's text.
    """
    parts = api_version.split("/")
    if len(parts) == 1 and parts[0]:
        return "", parts[0]
    if len(parts) == 2 and all(parts):
        return parts[0], parts[1]
    raise ValueError(f"unexpected GroupVersion string: {api_version}")


@dataclass(frozen=True)
class ApiResource:
    """One served resource type: the :class:`Resource` (with kind and scope) and its verbs."""

    resource: Resource
    verbs: frozenset[str]

    def supports(self, *verbs: str) -> bool:
        """Whether every one of ``verbs`` is served."""
        return all(v in self.verbs for v in verbs)


@dataclass
class Discovered:
    """One reading of discovery."""

    groups: dict[str, list[tuple[str, list[ApiResource]]]] = field(default_factory=dict)
    """Per group ("" for the core group), its versions in preference order, each with its
    resources (no subresources)."""
    failed: dict[str, str] = field(default_factory=dict)
    """Group versions ("metrics.k8s.io/v1beta1") that could not be discovered, and why."""

    def preferred(self) -> list[ApiResource]:
        """Every resource once (group and plural), from the first version of its group
        that serves it, groups in the server's order (upstream's ServerPreferredResources)."""
        seen: set[tuple[str, str]] = set()
        found: list[ApiResource] = []
        for group, versions in self.groups.items():
            for _, resources in versions:
                for res in resources:
                    key = (group, res.resource.plural)
                    if key not in seen:
                        seen.add(key)
                        found.append(res)
        return found


def parse(documents: Iterable[dict[str, Any]]) -> Discovered:
    """A :class:`Discovered` from aggregated discovery documents (``APIGroupDiscoveryList``)."""
    out = Discovered()
    for doc in documents:
        for item in doc.get("items") or ():
            group = (item.get("metadata") or {}).get("name", "")
            versions = out.groups.setdefault(group, [])
            for ver in item.get("versions") or ():
                version = ver.get("version", "")
                gv = f"{group}/{version}" if group else version
                if ver.get("freshness") == "Stale":
                    out.failed[gv] = (
                        f"the API server could not discover {gv} (its aggregated API "
                        "server is not available)"
                    )
                    continue
                resources = []
                for res in ver.get("resources") or ():
                    plural = res.get("resource", "")
                    if not plural:
                        continue
                    kind = (res.get("responseKind") or {}).get("kind", "")
                    resources.append(
                        ApiResource(
                            Resource(group, version, plural, kind, res.get("scope") != "Cluster"),
                            frozenset(res.get("verbs") or ()),
                        )
                    )
                versions.append((version, resources))
    return out


class Discovery:
    """The API server's discovery, read on demand and kept (see the module docs)."""

    def __init__(self, api: KubeClient) -> None:
        self.api = api
        self._last: Discovered | None = None
        self._lock = asyncio.Lock()

    async def read(self, *, fresh: bool = True) -> Discovered:
        """Discovery now (``fresh``), or as last read (read once if never)."""
        async with self._lock:
            if fresh or self._last is None:
                docs = await asyncio.gather(
                    self.api.arequest("GET", "/api", headers={"Accept": AGGREGATED}),
                    self.api.arequest("GET", "/apis", headers={"Accept": AGGREGATED}),
                )
                self._last = parse(docs)
            return self._last

    async def preferred(self, *, fresh: bool = True) -> Discovered:
        """:meth:`read`; its :meth:`Discovered.preferred` lists the resources."""
        return await self.read(fresh=fresh)

    async def find(self, group: str, version: str, kind: str) -> Resource | None:
        """The resource of ``kind`` in ``group/version`` (None when it is not served)."""
        for fresh in (False, True):
            found = self._find((await self.read(fresh=fresh)), group, version, kind)
            if found is not None:
                return found
        return None

    @staticmethod
    def _find(doc: Discovered, group: str, version: str, kind: str) -> Resource | None:
        for ver, resources in doc.groups.get(group, ()):
            if ver == version:
                for res in resources:
                    if res.resource.kind == kind:
                        return res.resource
        return None

    async def targets(self, group: str, kind: str) -> list[Resource]:
        """The resource of ``kind`` in every served version of ``group``, preferred first
        (upstream's REST mappings of a group and kind)."""
        for fresh in (False, True):
            doc = await self.read(fresh=fresh)
            found = [
                res.resource
                for _, resources in doc.groups.get(group, ())
                for res in resources
                if res.resource.kind == kind
            ]
            if found:
                return found
        return []
