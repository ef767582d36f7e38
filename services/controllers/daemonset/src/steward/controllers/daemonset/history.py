"""A DaemonSet's history: the ControllerRevisions that record each pod template it had,
as upstream's daemon controller writes them.

A revision is named ``<daemonset>-<hash>``, where the hash is the ``pod-template-hash`` of
the template and ``status.collisionCount`` (:func:`steward.runtime.hashing.pod_template_hash`,
equal to upstream's); it carries the template's labels plus ``controller-revision-hash:
<hash>``, the DaemonSet's annotations, the DaemonSet as controlling owner, a revision
number, and as data the patch that restores the template: ``{"spec": {"template": <the
template>, "$patch": "replace"}}`` with ``$patch`` inside the template. A revision is the
current one when its data equals that patch for the DaemonSet's template now.

Upstream compares the data byte for byte after encoding it with Go's JSON encoder (keys
sorted). Here the API server's JSON is compared as parsed values, which is the same
comparison for every template the API server can return; the data is written with its keys
sorted, as upstream writes it.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from steward.runtime.hashing import pod_template_hash

Obj = dict[str, Any]

HASH_LABEL = "controller-revision-hash"
"""The label of a revision and of the pods of its template (apps/v1's
``DefaultDaemonSetUniqueLabelKey``)."""
GENERATION_LABEL = "pod-template-generation"
"""The label of a pod with the DaemonSet's template generation when it was created."""
GENERATION_ANNOTATION = "deprecated.daemonset.template.generation"
"""Where the API server keeps a DaemonSet's template generation."""


def _sorted(value: Any) -> Any:
    """``value`` with every mapping's keys in sorted order (as Go encodes a map)."""
    if isinstance(value, Mapping):
        return {k: _sorted(value[k]) for k in sorted(value)}
    if isinstance(value, list):
        return [_sorted(v) for v in value]
    return value


def template(ds: Mapping[str, Any]) -> Obj:
    return dict((ds.get("spec") or {}).get("template") or {})


def patch(ds: Mapping[str, Any]) -> Obj:
    """The data of the DaemonSet's current revision."""
    data: Obj = _sorted({"spec": {"template": {**template(ds), "$patch": "replace"}}})
    return data


def matches(ds: Mapping[str, Any], revision: Mapping[str, Any]) -> bool:
    """Whether the revision records the DaemonSet's current template."""
    return bool(revision.get("data") == patch(ds))


def collision_count(ds: Mapping[str, Any]) -> int | None:
    value = (ds.get("status") or {}).get("collisionCount")
    return None if value is None else int(value)


def template_hash(ds: Mapping[str, Any]) -> str:
    """The hash of the DaemonSet's template and collision count (upstream's)."""
    return pod_template_hash(template(ds), collision_count(ds))


def revision_number(revision: Mapping[str, Any]) -> int:
    return int(revision.get("revision") or 0)


def max_revision(revisions: Iterable[Mapping[str, Any]]) -> int:
    return max((revision_number(r) for r in revisions), default=0)


def new_revision(ds: Mapping[str, Any], owner_ref: Obj, number: int) -> Obj:
    """The revision of the DaemonSet's current template, numbered ``number``."""
    meta = ds.get("metadata") or {}
    digest = template_hash(ds)
    labels = dict((template(ds).get("metadata") or {}).get("labels") or {})
    labels[HASH_LABEL] = digest
    rmeta: Obj = {
        "name": f"{meta.get('name', '')}-{digest}",
        "namespace": meta.get("namespace", ""),
        "labels": labels,
        "ownerReferences": [owner_ref],
    }
    if meta.get("annotations"):
        rmeta["annotations"] = dict(meta["annotations"])
    return {
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "metadata": rmeta,
        "data": patch(ds),
        "revision": number,
    }


def keep_of_duplicates(current: Sequence[Obj]) -> Obj:
    """Of several revisions that all record the current template, the one kept: the
    highest revision number (the last in the given order among equals, as upstream)."""
    keep = current[0]
    for revision in current:
        if revision_number(revision) >= revision_number(keep):
            keep = revision
    return keep


def to_clean_up(old: Sequence[Obj], limit: int, live_hashes: Iterable[str]) -> list[Obj]:
    """Old revisions to delete so that at most ``limit`` remain: lowest revision first,
    never one whose hash a pod of the DaemonSet still carries."""
    excess = len(old) - limit
    if excess <= 0:
        return []
    live = set(live_hashes)
    doomed: list[Obj] = []
    for revision in sorted(old, key=revision_number):
        if len(doomed) >= excess:
            break
        labels = (revision.get("metadata") or {}).get("labels") or {}
        if labels.get(HASH_LABEL) in live:
            continue
        doomed.append(revision)
    return doomed


def template_generation(ds: Mapping[str, Any]) -> int | None:
    """The DaemonSet's template generation (its annotation); None when absent or not a
    number (pods are then told apart by hash alone)."""
    annotations = (ds.get("metadata") or {}).get("annotations") or {}
    text = annotations.get(GENERATION_ANNOTATION)
    if text is None:
        return None
    try:
        return int(text)
    except ValueError:
        return None


def is_updated(pod: Mapping[str, Any], digest: str, generation: int | None) -> bool:
    """Whether the pod runs the current template: its hash label equals the current
    revision's, or its generation label equals the template generation."""
    labels = (pod.get("metadata") or {}).get("labels") or {}
    if digest and labels.get(HASH_LABEL) == digest:
        return True
    return generation is not None and labels.get(GENERATION_LABEL) == str(generation)
