"""Kubernetes label selectors (``matchLabels`` and ``matchExpressions``) against labels.

One implementation for every controller. The empty selector is the one case where callers
differ: a workload controller (Job, ReplicaSet, Deployment) must never take every pod, so
by default a missing or empty selector matches nothing; pass ``empty_matches_all=True``
where Kubernetes reads it as "everything" (a Service's or a NetworkPolicy's selector).

# Errors
An unknown operator matches nothing (the API server refuses such a selector, so an object
carrying one is malformed; matching nothing never takes objects that are not ours).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def selector_matches(
    selector: Mapping[str, Any] | None,
    labels: Mapping[str, str],
    *,
    empty_matches_all: bool = False,
) -> bool:
    """Whether ``labels`` match the label selector (see the module docs)."""
    match_labels = (selector or {}).get("matchLabels") or {}
    expressions = (selector or {}).get("matchExpressions") or []
    if not match_labels and not expressions:
        return empty_matches_all
    for key, value in match_labels.items():
        if labels.get(key) != value:
            return False
    for expr in expressions:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In":
            ok = key in labels and labels[key] in values
        elif op == "NotIn":
            ok = key not in labels or labels[key] not in values
        elif op == "Exists":
            ok = key in labels
        elif op == "DoesNotExist":
            ok = key not in labels
        else:
            return False
        if not ok:
            return False
    return True
