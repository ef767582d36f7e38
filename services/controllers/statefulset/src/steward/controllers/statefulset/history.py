"""A StatefulSet's history: the ControllerRevisions that record each pod template it had,
named, hashed and compared as kube-controller-manager v1.37 does, as pure functions.

Upstream: ``pkg/controller/history/controller_history.go`` (``HashControllerRevision``,
``ControllerRevisionName``, ``NewControllerRevision``, ``EqualRevision``,
``SortControllerRevisions``) and ``pkg/controller/statefulset/stateful_set_utils.go``
(``getPatch``, ``newRevision``, ``ApplyRevision``, ``nextRevision``),
``stateful_set_control.go`` (``getStatefulSetRevisions``, ``truncateHistory``).

# The data
A revision's ``data`` is the patch that restores the set's pod template,
``{"spec": {"template": <template>}}`` with ``"$patch": "replace"`` inside the template.
Upstream writes it with Go's ``json.Marshal`` of a map: keys sorted, no spaces, ``<``,
``>``, ``&``, U+2028 and U+2029 escaped as ``\\u003c`` …, other non-ASCII text as UTF-8.
:func:`patch_bytes` writes those bytes from the template as the API server returns it
(which is the Go encoding of the same struct, so the bytes are equal). One value differs:
upstream decodes the template into ``interface{}`` before writing it, so an integer
beyond 2**53 goes through a float64 and comes out rounded; :func:`patch_bytes` rounds it
the same way.

# The hash
The revision's name is ``<set>-<hash>`` (the set's name cut to 223 bytes) and its label
``controller.kubernetes.io/hash`` is the hash: FNV-1 (not FNV-1a: upstream calls
``fnv.New32()``), 32 bits, over the data's bytes, then, when the set has a collision count,
over that count written in decimal; the number is spelled with apimachinery's 27-letter
``SafeEncodeString``.

# Equality
Upstream compares the raw bytes of the data (``EqualRevision``) and, when they differ,
whether restoring the newest revision gives the same set (the default-on gate
``StatefulSetSemanticRevisionComparison``, which absorbs serialisation changes between
versions). Here :func:`equal_data` compares the data as parsed JSON values, which is the
semantic comparison for every template the API server returns (defaulting aside: a
revision written before a default was added compares unequal, as it does upstream
without the gate's re-defaulting).
"""

from __future__ import annotations

import decimal
import json
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from steward.runtime.hashing import safe_encode
from steward.runtime.times import parse_time

Obj = dict[str, Any]

HASH_LABEL = "controller.kubernetes.io/hash"
"""The label of a revision that carries its hash (``ControllerRevisionHashLabel``)."""
POD_REVISION_LABEL = "controller-revision-hash"
"""The label of a pod naming the revision it was made from
(``apps/v1.StatefulSetRevisionLabel``)."""

_FNV32_OFFSET = 0x811C9DC5
_FNV32_PRIME = 0x01000193
_MAX_EXACT = 2**53
_NAME_PREFIX_MAX = 223


def fnv1_32(data: bytes) -> int:
    """FNV-1, 32 bits (Go's ``hash/fnv.New32``): multiply, then xor each byte."""
    h = _FNV32_OFFSET
    for b in data:
        h = ((h * _FNV32_PRIME) & 0xFFFFFFFF) ^ b
    return h


def _go_number(value: int | float) -> str:
    """A JSON number as Go writes a float64 decoded from it (integers up to 2**53 exact)."""
    if isinstance(value, int) and abs(value) <= _MAX_EXACT:
        return str(value)
    number = float(value)
    if number.is_integer() and abs(number) < 1e21:
        return format(decimal.Decimal(repr(number)).to_integral_value(), "f")
    # Not reachable from a pod template (it has no floating-point fields).
    return repr(number)


def _go_json(value: Any, out: list[str]) -> None:
    if isinstance(value, Mapping):
        out.append("{")
        for i, key in enumerate(sorted(value)):
            if i:
                out.append(",")
            _go_string(str(key), out)
            out.append(":")
            _go_json(value[key], out)
        out.append("}")
    elif isinstance(value, list | tuple):
        out.append("[")
        for i, item in enumerate(value):
            if i:
                out.append(",")
            _go_json(item, out)
        out.append("]")
    elif isinstance(value, str):
        _go_string(value, out)
    elif value is True:
        out.append("true")
    elif value is False:
        out.append("false")
    elif value is None:
        out.append("null")
    elif isinstance(value, int | float):
        out.append(_go_number(value))
    else:
        raise TypeError(f"not a JSON value: {type(value).__name__}")


_GO_ESCAPES = {
    "<": "\\u003c",
    ">": "\\u003e",
    "&": "\\u0026",
    "\u2028": "\\u2028",
    "\u2029": "\\u2029",
}


def _go_string(text: str, out: list[str]) -> None:
    encoded = json.dumps(text, ensure_ascii=False)
    for char, escape in _GO_ESCAPES.items():
        encoded = encoded.replace(char, escape)
    out.append(encoded)


def go_json(value: Any) -> bytes:
    """``value`` as Go's ``json.Marshal`` writes it after decoding into ``interface{}``."""
    out: list[str] = []
    _go_json(value, out)
    return "".join(out).encode()


def template(statefulset: Mapping[str, Any]) -> Obj:
    """The set's pod template (empty when absent)."""
    return dict((statefulset.get("spec") or {}).get("template") or {})


def patch(statefulset: Mapping[str, Any]) -> Obj:
    """The data of the revision that records the set's pod template now (``getPatch``)."""
    return {"spec": {"template": {**template(statefulset), "$patch": "replace"}}}


def patch_bytes(statefulset: Mapping[str, Any]) -> bytes:
    """The bytes upstream writes as that data (and hashes)."""
    return go_json(patch(statefulset))


def hash_revision(data: bytes, collision_count: int | None) -> str:
    """A revision's hash (``HashControllerRevision``) from its data's bytes and the set's
    ``status.collisionCount`` (None: the set has none)."""
    h = _FNV32_OFFSET
    for b in data + (b"" if collision_count is None else str(collision_count).encode()):
        h = ((h * _FNV32_PRIME) & 0xFFFFFFFF) ^ b
    return safe_encode(str(h))


def revision_name(prefix: str, digest: str) -> str:
    """``<prefix>-<hash>``, the prefix cut to 223 bytes (``ControllerRevisionName``)."""
    cut = prefix.encode()[:_NAME_PREFIX_MAX].decode(errors="ignore")
    return f"{cut}-{digest}"


def collision_count(statefulset: Mapping[str, Any]) -> int:
    """The set's collision count (0 when it has none: upstream hashes with a count
    always, starting at 0)."""
    return int((statefulset.get("status") or {}).get("collisionCount") or 0)


def new_revision(
    statefulset: Mapping[str, Any], number: int, owner_ref: Obj, collisions: int
) -> Obj:
    """The revision of the set's current template (``newRevision``): named and labelled
    by its hash, the template's labels, the set's annotations, the set as controller."""
    meta = statefulset.get("metadata") or {}
    data = patch(statefulset)
    digest = hash_revision(go_json(data), collisions)
    labels = dict((template(statefulset).get("metadata") or {}).get("labels") or {})
    labels[HASH_LABEL] = digest
    return {
        "apiVersion": "apps/v1",
        "kind": "ControllerRevision",
        "metadata": {
            "name": revision_name(str(meta.get("name", "")), digest),
            "namespace": meta.get("namespace", ""),
            "labels": labels,
            "annotations": dict(meta.get("annotations") or {}),
            "ownerReferences": [owner_ref],
        },
        "data": data,
        "revision": number,
    }


def apply_revision(statefulset: Mapping[str, Any], revision: Mapping[str, Any]) -> Obj:
    """The set with the pod template the revision records (``ApplyRevision``: the
    revision's strategic merge patch replaces ``spec.template`` whole)."""
    recorded = ((revision.get("data") or {}).get("spec") or {}).get("template")
    spec = dict(statefulset.get("spec") or {})
    if isinstance(recorded, Mapping):
        spec["template"] = {k: v for k, v in recorded.items() if k != "$patch"}
    return {**statefulset, "spec": spec}


def equal_data(left: Mapping[str, Any] | None, right: Mapping[str, Any] | None) -> bool:
    """Whether two revisions record the same template (``EqualRevision``; both absent
    counts as equal)."""
    if left is None or right is None:
        return left is right
    return bool(left.get("data") == right.get("data"))


def number(revision: Mapping[str, Any]) -> int:
    return int(revision.get("revision") or 0)


def _sort_key(revision: Mapping[str, Any]) -> tuple[int, float, str]:
    meta = revision.get("metadata") or {}
    created = parse_time(meta.get("creationTimestamp"))
    return (
        number(revision),
        created.timestamp() if created is not None else float("-inf"),
        str(meta.get("name", "")),
    )


def sorted_revisions(revisions: Iterable[Obj]) -> list[Obj]:
    """By revision number, then creation time (none first), then name
    (``SortControllerRevisions``)."""
    return sorted(revisions, key=_sort_key)


def next_number(revisions: Sequence[Obj]) -> int:
    """The number of a new revision: one above the last of the sorted revisions, 1 first
    (``nextRevision``)."""
    return number(revisions[-1]) + 1 if revisions else 1


@dataclass(frozen=True)
class RevisionChoice:
    """What a sync does with the history before it looks at pods
    (``getStatefulSetRevisions``).

    Exactly one of ``create`` / ``renumber`` / neither is set: neither when the newest
    revision already records the template (``update`` is that revision).
    """

    update: Obj
    """The update revision (the set's template now), as it will be once written."""
    current: Obj
    """The current revision: the one named by ``status.currentRevision``, else ``update``."""
    create: bool = False
    """``update`` is new and must be created (a name conflict with different data bumps
    the collision count and is retried by the caller)."""
    renumber: bool = False
    """``update`` is an older revision with the same template (a rollback): its
    ``revision`` must be raised to ``update["revision"]``."""


def choose_revisions(
    statefulset: Mapping[str, Any], revisions: Iterable[Obj], owner_ref: Obj
) -> RevisionChoice:
    """The current and update revisions of the set among its revisions."""
    history = sorted_revisions(revisions)
    proposed = new_revision(
        statefulset, next_number(history), owner_ref, collision_count(statefulset)
    )
    equal = [r for r in history if equal_data(r, proposed)]
    status_current = (statefulset.get("status") or {}).get("currentRevision")
    if equal and history and equal_data(history[-1], equal[-1]):
        update, create, renumber = history[-1], False, False
    elif equal:
        update = {**equal[-1], "revision": number(proposed)}
        create, renumber = False, True
    else:
        update, create, renumber = proposed, True, False
    current = next(
        (r for r in history if (r.get("metadata") or {}).get("name") == status_current), update
    )
    return RevisionChoice(update=update, current=current, create=create, renumber=renumber)


def to_truncate(
    revisions: Iterable[Obj],
    live_names: Iterable[str],
    history_limit: int,
) -> list[Obj]:
    """The revisions to delete (``truncateHistory``): of those not live (the current and
    update revisions, any revision a pod's ``controller-revision-hash`` names), the
    oldest beyond ``revisionHistoryLimit``; none when the limit is negative."""
    live = set(live_names)
    old = [
        r for r in sorted_revisions(revisions) if (r.get("metadata") or {}).get("name") not in live
    ]
    if history_limit < 0 or len(old) <= history_limit:
        return []
    return old[: len(old) - history_limit]


def reuse_on_conflict(existing: Mapping[str, Any], proposed: Mapping[str, Any]) -> bool:
    """When creating ``proposed`` finds a revision of its name: True to take ``existing``
    (it records the same template), False to raise the collision count and create under
    the new hash (``CreateControllerRevision``; the count is then written to the set's
    status)."""
    return equal_data(existing, proposed)
