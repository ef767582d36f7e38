"""Building Kubernetes-shaped JSON objects for the informer's unit tests."""

from __future__ import annotations

from typing import Any

import orjson

from steward.informer.store import StoredObject


def obj(
    name: str,
    rv: int,
    *,
    namespace: str = "default",
    uid: str | None = None,
    labels: dict[str, str] | None = None,
    owner: str | None = None,
    data: str = "",
) -> StoredObject:
    """A ConfigMap-like object at resource version ``rv``."""
    meta: dict[str, Any] = {
        "name": name,
        "namespace": namespace,
        "uid": uid or f"uid-{namespace}-{name}",
        "resourceVersion": str(rv),
    }
    if labels:
        meta["labels"] = labels
    if owner:
        meta["ownerReferences"] = [
            {"apiVersion": "v1", "kind": "Owner", "name": "o", "uid": owner, "controller": True}
        ]
    doc = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {"v": data}}
    return StoredObject(orjson.dumps(doc), doc)
