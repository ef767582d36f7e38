"""Which of a pod's tolerations tolerate a node's NoExecute taints, and for how long: the
decisions of upstream's taint eviction, on the API server's JSON (dicts).

Upstream: ``Toleration.ToleratesTaint`` (k8s.io/api@v0.37.2/core/v1/toleration.go),
``GetMatchingTolerations`` (pkg/apis/core/v1/helper/helpers.go) and
``getNoExecuteTaints`` / ``getMinTolerationTime``
(pkg/controller/tainteviction/taint_eviction.go).

# Matching
A toleration tolerates a taint when its effect is empty or the taint's, its key is empty or
the taint's, and its operator is ``Exists`` (any value) or ``Equal`` / empty (the same
value; an empty value equals an empty value). ``Lt`` and ``Gt`` (numeric comparison) sit
behind the alpha feature gate ``TaintTolerationComparisonOperators``, off by default in
1.37, so they tolerate nothing here, as upstream's with the gate off; so does any other
operator. For each taint, in order, the first toleration (in the pod's order) that
tolerates it is the one used; a taint none tolerates means the pod tolerates the node's
taints not at all.

# How long
Of the tolerations used, the shortest ``tolerationSeconds`` is how long the pod may stay;
one at zero or below means not at all; none of them with seconds means forever.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

NO_EXECUTE = "NoExecute"
"""The taint effect this controller acts on."""

Taint = Mapping[str, Any]
"""A node's taint as the API server's JSON: key, value, effect, timeAdded."""
Toleration = Mapping[str, Any]
"""A pod's toleration as the API server's JSON: key, operator, value, effect,
tolerationSeconds."""


def no_execute_taints(taints: Iterable[Taint] | None) -> list[Taint]:
    """The taints with effect NoExecute, in the node's order."""
    return [t for t in taints or () if t.get("effect") == NO_EXECUTE]


def tolerates(toleration: Toleration, taint: Taint) -> bool:
    """Whether ``toleration`` tolerates ``taint`` (see the module docs)."""
    effect = toleration.get("effect") or ""
    if effect and effect != (taint.get("effect") or ""):
        return False
    key = toleration.get("key") or ""
    if key and key != (taint.get("key") or ""):
        return False
    operator = toleration.get("operator") or ""
    if operator in ("", "Equal"):
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return operator == "Exists"


def matching_tolerations(
    taints: Sequence[Taint], tolerations: Sequence[Toleration] | None
) -> list[Toleration] | None:
    """The toleration used for each of ``taints`` (the first that tolerates it), or None
    when some taint is tolerated by none. No taints: every one is tolerated, by nothing."""
    used: list[Toleration] = []
    for taint in taints:
        found = next((t for t in tolerations or () if tolerates(t, taint)), None)
        if found is None:
            return None
        used.append(found)
    return used


def min_toleration_seconds(used: Sequence[Toleration]) -> float | None:
    """How long the tolerations ``used`` let a pod stay: the shortest
    ``tolerationSeconds`` (0 when one is at zero or below, or when ``used`` is empty),
    None for forever (none has seconds)."""
    if not used:
        return 0.0
    shortest: int | None = None
    for toleration in used:
        seconds = toleration.get("tolerationSeconds")
        if seconds is None:
            continue
        if int(seconds) <= 0:
            return 0.0
        shortest = int(seconds) if shortest is None else min(shortest, int(seconds))
    return None if shortest is None else float(shortest)
