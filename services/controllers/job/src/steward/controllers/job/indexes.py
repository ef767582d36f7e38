"""Completion indexes of Indexed Jobs: reading a pod's index and the interval notation."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

INDEX_KEY = "batch.kubernetes.io/job-completion-index"
"""Annotation (and label) carrying a pod's completion index."""

UNKNOWN = -1
"""The index of a pod without a valid completion index."""

FAILURE_COUNT_KEY = "batch.kubernetes.io/job-index-failure-count"
"""Annotation: counted failures of the pod's index before this pod (backoffLimitPerIndex)."""
IGNORED_FAILURE_COUNT_KEY = "batch.kubernetes.io/job-index-ignored-failure-count"
"""Annotation: failures of the pod's index before this pod that a podFailurePolicy Ignore
rule did not count."""

_MAX_INT32 = 2**31 - 1


def pod_index(pod: dict[str, Any]) -> int:
    """The pod's completion index from its annotation, or :data:`UNKNOWN` when it is
    missing, not a decimal integer, or negative."""
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(INDEX_KEY)
    if not isinstance(value, str) or not value.isdigit():
        return UNKNOWN
    return int(value)


def _count_annotation(pod: dict[str, Any], key: str) -> int:
    value = ((pod.get("metadata") or {}).get("annotations") or {}).get(key)
    if not isinstance(value, str):
        return 0
    try:
        count = int(value)
    except ValueError:
        return 0
    return count if 0 <= count <= _MAX_INT32 else 0


def failure_count(pod: dict[str, Any]) -> int:
    """The pod's :data:`FAILURE_COUNT_KEY` annotation; 0 when missing, not an integer,
    negative or beyond int32 (as upstream, a tampered value must not wedge the index)."""
    return _count_annotation(pod, FAILURE_COUNT_KEY)


def ignored_failure_count(pod: dict[str, Any]) -> int:
    """The pod's :data:`IGNORED_FAILURE_COUNT_KEY` annotation; 0 when missing or invalid."""
    return _count_annotation(pod, IGNORED_FAILURE_COUNT_KEY)


Interval = tuple[int, int]
"""An inclusive range of indexes, first to last."""


def parse_intervals(text: str | None, completions: int) -> list[Interval]:
    """Parse ``status.completedIndexes`` ("0-2,4,7-9"), keeping indexes below
    ``completions``. Malformed parts are skipped rather than raised (the field is
    written by controllers, and a bad one must not wedge the Job)."""
    out: list[Interval] = []
    if not text:
        return out
    for part in text.split(","):
        first_s, _, last_s = part.partition("-")
        if not first_s.isdigit() or (last_s and not last_s.isdigit()):
            continue
        first = int(first_s)
        last = int(last_s) if last_s else first
        last = min(last, completions - 1)
        if first > last:
            continue
        out.append((first, last))
    return merge(out, ())


def merge(intervals: Iterable[Interval], indexes: Iterable[int]) -> list[Interval]:
    """The union of ``intervals`` and single ``indexes``, sorted and coalesced (adjacent
    ranges join)."""
    items = sorted([*intervals, *((i, i) for i in indexes)])
    out: list[Interval] = []
    for first, last in items:
        if out and first <= out[-1][1] + 1:
            if last > out[-1][1]:
                out[-1] = (out[-1][0], last)
        else:
            out.append((first, last))
    return out


def total(intervals: Iterable[Interval]) -> int:
    """How many indexes the intervals hold."""
    return sum(last - first + 1 for first, last in intervals)


def contains(intervals: list[Interval], index: int) -> bool:
    """Whether ``index`` is in one of the (sorted) intervals."""
    return any(first <= index <= last for first, last in intervals)


def format_intervals(intervals: Iterable[Interval]) -> str:
    """Interval notation as upstream writes it: "1-3" for ranges of three or more,
    "1,2" for two adjacent indexes, "5" for one."""
    parts: list[str] = []
    for first, last in intervals:
        if last == first:
            parts.append(str(first))
        elif last == first + 1:
            parts.append(f"{first},{last}")
        else:
            parts.append(f"{first}-{last}")
    return ",".join(parts)
