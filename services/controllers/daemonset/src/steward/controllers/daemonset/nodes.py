"""Which nodes a DaemonSet's pod belongs on: the template's nodeName, nodeSelector and
required node affinity against the node, and its tolerations (with the daemon defaults)
against the node's taints — as upstream's ``NodeShouldRunDaemonPod`` with
``k8s.io/component-helpers``' node affinity and taint matching.

A pod of the DaemonSet is bound by the scheduler, never by the controller: the pod for a
node carries the required node affinity ``matchFields metadata.name In [<node>]`` in place
of the template's required terms (:func:`pin_to_node`), which the controller has already
matched against that node.

# Malformed terms
A node selector term that the API server would not accept (an ``In`` without values, a
``Gt`` whose value is not an integer, a field other than ``metadata.name``) matches no
node, as upstream ignores such terms; a term with neither expressions nor fields matches
no node either.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

Obj = dict[str, Any]

NOT_READY = "node.kubernetes.io/not-ready"
UNREACHABLE = "node.kubernetes.io/unreachable"
DISK_PRESSURE = "node.kubernetes.io/disk-pressure"
MEMORY_PRESSURE = "node.kubernetes.io/memory-pressure"
PID_PRESSURE = "node.kubernetes.io/pid-pressure"
UNSCHEDULABLE = "node.kubernetes.io/unschedulable"
NETWORK_UNAVAILABLE = "node.kubernetes.io/network-unavailable"
NO_SCHEDULE = "NoSchedule"
NO_EXECUTE = "NoExecute"
NAME_FIELD = "metadata.name"


def daemon_tolerations(spec: Mapping[str, Any]) -> list[Obj]:
    """The tolerations every daemon pod gets, in upstream's order: not-ready and
    unreachable (NoExecute, no time limit), disk, memory and PID pressure and
    unschedulable (NoSchedule), and network-unavailable for host-network pods."""
    defaults = [(NOT_READY, NO_EXECUTE), (UNREACHABLE, NO_EXECUTE)]
    defaults += [
        (DISK_PRESSURE, NO_SCHEDULE),
        (MEMORY_PRESSURE, NO_SCHEDULE),
        (PID_PRESSURE, NO_SCHEDULE),
        (UNSCHEDULABLE, NO_SCHEDULE),
    ]
    if spec.get("hostNetwork"):
        defaults.append((NETWORK_UNAVAILABLE, NO_SCHEDULE))
    return [{"key": k, "operator": "Exists", "effect": e} for k, e in defaults]


def _same_toleration(a: Mapping[str, Any], b: Mapping[str, Any]) -> bool:
    """Upstream's ``MatchToleration``: the same key, operator, value and effect."""
    return all((a.get(f) or "") == (b.get(f) or "") for f in ("key", "operator", "value", "effect"))


def with_daemon_tolerations(spec: Mapping[str, Any]) -> list[Obj]:
    """The spec's tolerations with the daemon defaults: one equal to a default (same key,
    operator, value and effect) is replaced by the default in place, the others appended
    (upstream's ``AddOrUpdateTolerationInPodSpec``)."""
    tolerations = [dict(t) for t in spec.get("tolerations") or ()]
    for default in daemon_tolerations(spec):
        for i, existing in enumerate(tolerations):
            if _same_toleration(existing, default):
                tolerations[i] = default
                break
        else:
            tolerations.append(default)
    return tolerations


def tolerates(toleration: Mapping[str, Any], taint: Mapping[str, Any]) -> bool:
    """Whether one toleration tolerates one taint (an empty effect or key matches any;
    ``Exists`` any value, ``Equal`` or no operator the same value)."""
    effect, key = toleration.get("effect") or "", toleration.get("key") or ""
    if effect and effect != taint.get("effect"):
        return False
    if key and key != taint.get("key"):
        return False
    op = toleration.get("operator") or "Equal"
    if op == "Exists":
        return True
    if op == "Equal":
        return (toleration.get("value") or "") == (taint.get("value") or "")
    return False


def untolerated(
    taints: Iterable[Mapping[str, Any]],
    tolerations: Sequence[Mapping[str, Any]],
    effects: Iterable[str],
) -> Mapping[str, Any] | None:
    """The first taint with one of ``effects`` that no toleration tolerates."""
    wanted = set(effects)
    for taint in taints:
        if taint.get("effect") not in wanted:
            continue
        if not any(tolerates(t, taint) for t in tolerations):
            return taint
    return None


def _int(text: str) -> int | None:
    try:
        return int(text, 10)
    except ValueError:
        return None


def _expression_matches(expr: Mapping[str, Any], labels: Mapping[str, str]) -> bool | None:
    """One matchExpression against node labels; None when it is malformed."""
    key, op = expr.get("key") or "", expr.get("operator")
    values = [str(v) for v in expr.get("values") or ()]
    if not key:
        return None
    if op in ("In", "NotIn"):
        if not values:
            return None
        present = key in labels and labels[key] in values
        return present if op == "In" else not present
    if op in ("Exists", "DoesNotExist"):
        if values:
            return None
        return bool((key in labels) == (op == "Exists"))
    if op in ("Gt", "Lt"):
        bound = _int(values[0]) if len(values) == 1 else None
        if bound is None:
            return None
        if key not in labels:
            return False
        have = _int(labels[key])
        if have is None:
            return False
        return have > bound if op == "Gt" else have < bound
    return None


def _field_matches(expr: Mapping[str, Any], node_name: str) -> bool | None:
    """One matchField against the node; None when it is malformed (only
    ``metadata.name`` with ``In`` or ``NotIn`` and exactly one value are valid)."""
    values = [str(v) for v in expr.get("values") or ()]
    if expr.get("key") != NAME_FIELD or len(values) != 1:
        return None
    if expr.get("operator") == "In":
        return node_name == values[0]
    if expr.get("operator") == "NotIn":
        return node_name != values[0]
    return None


def term_matches(term: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """One node selector term: every expression and every field matches (a term with
    neither, or a malformed one, matches nothing)."""
    exprs = term.get("matchExpressions") or ()
    fields = term.get("matchFields") or ()
    if not exprs and not fields:
        return False
    meta = node.get("metadata") or {}
    labels = meta.get("labels") or {}
    for expr in exprs:
        if _expression_matches(expr, labels) is not True:
            return False
    name = meta.get("name") or ""
    return all(_field_matches(field, name) is True for field in fields)


def _required_terms(spec: Mapping[str, Any]) -> list[Mapping[str, Any]] | None:
    """The required node affinity's terms; None when the pod has none."""
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or None
    return None if required is None else list(required.get("nodeSelectorTerms") or ())


def required_affinity_matches(spec: Mapping[str, Any], node: Mapping[str, Any]) -> bool:
    """The pod spec's nodeSelector (every label equal) and required node affinity (any
    term) against the node."""
    return Placement.of_spec(spec).affinity_matches(node)


class Placement:
    """Where one DaemonSet's pods belong: its template's nodeName, nodeSelector, required
    node affinity and tolerations (with the daemon defaults), read once and then asked
    of each node (upstream builds the tolerations and the parsed affinity once a sync,
    too)."""

    __slots__ = ("node_name", "selector", "terms", "tolerations")

    def __init__(
        self,
        node_name: str,
        selector: Mapping[str, str],
        terms: list[Mapping[str, Any]] | None,
        tolerations: list[Obj],
    ) -> None:
        self.node_name = node_name
        self.selector = selector
        self.terms = terms
        self.tolerations = tolerations

    @classmethod
    def of_spec(cls, spec: Mapping[str, Any]) -> Placement:
        return cls(
            str(spec.get("nodeName") or ""),
            dict(spec.get("nodeSelector") or {}),
            _required_terms(spec),
            with_daemon_tolerations(spec),
        )

    @classmethod
    def of(cls, ds: Mapping[str, Any]) -> Placement:
        return cls.of_spec(((ds.get("spec") or {}).get("template") or {}).get("spec") or {})

    def affinity_matches(self, node: Mapping[str, Any]) -> bool:
        labels = (node.get("metadata") or {}).get("labels") or {}
        for key, value in self.selector.items():
            if labels.get(key) != value:
                return False
        if self.terms is None:
            return True
        return any(term_matches(t, node) for t in self.terms)

    def __call__(self, node: Mapping[str, Any]) -> tuple[bool, bool]:
        """``(should_run, should_continue_running)`` on the node (see :func:`should_run`)."""
        name = (node.get("metadata") or {}).get("name") or ""
        if (self.node_name or name) != name:
            return False, False
        if not self.affinity_matches(node):
            return False, False
        taints = (node.get("spec") or {}).get("taints") or ()
        if not taints:
            return True, True
        if untolerated(taints, self.tolerations, (NO_SCHEDULE, NO_EXECUTE)) is None:
            return True, True
        return False, untolerated(taints, self.tolerations, (NO_EXECUTE,)) is None


Fits = Mapping[str, tuple[bool, bool]]
"""``(should_run, should_continue_running)`` by node name, for one DaemonSet."""


def fits(ds: Mapping[str, Any], nodes: Iterable[Mapping[str, Any]]) -> dict[str, tuple[bool, bool]]:
    """:func:`should_run` of the DaemonSet on each node, by node name (one sync's answers,
    asked once)."""
    placement = Placement.of(ds)
    return {str((n.get("metadata") or {}).get("name") or ""): placement(n) for n in nodes}


def should_run(ds: Mapping[str, Any], node: Mapping[str, Any]) -> tuple[bool, bool]:
    """``(should_run, should_continue_running)`` of the DaemonSet's pod on the node:
    whether a new pod belongs there, and whether one already there may stay (it may where
    only NoSchedule taints are untolerated)."""
    return Placement.of(ds)(node)


def pin_to_node(affinity: Mapping[str, Any] | None, node_name: str) -> Obj:
    """The pod's affinity with its required node terms replaced by the one term
    ``matchFields metadata.name In [node_name]`` (the other affinities kept)."""
    term = {"matchFields": [{"key": NAME_FIELD, "operator": "In", "values": [node_name]}]}
    out = dict(affinity or {})
    node_affinity = dict(out.get("nodeAffinity") or {})
    required = dict(node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    required["nodeSelectorTerms"] = [term]
    node_affinity["requiredDuringSchedulingIgnoredDuringExecution"] = required
    out["nodeAffinity"] = node_affinity
    return out


def target_node(pod: Mapping[str, Any]) -> str | None:
    """The node a daemon pod is for: its nodeName once bound, else the node its required
    affinity pins it to (a ``metadata.name In`` field with one value); None otherwise."""
    spec = pod.get("spec") or {}
    if spec.get("nodeName"):
        return str(spec["nodeName"])
    required = ((spec.get("affinity") or {}).get("nodeAffinity") or {}).get(
        "requiredDuringSchedulingIgnoredDuringExecution"
    ) or {}
    for term in required.get("nodeSelectorTerms") or ():
        for field in term.get("matchFields") or ():
            values = list(field.get("values") or ())
            pinned = field.get("key") == NAME_FIELD and field.get("operator") == "In"
            if pinned and len(values) == 1:
                return str(values[0])
    return None


def conditions_true(node: Mapping[str, Any]) -> frozenset[str]:
    """The types of the node's conditions whose status is True."""
    conditions = (node.get("status") or {}).get("conditions") or ()
    return frozenset(str(c.get("type")) for c in conditions if c.get("status") == "True")


def _without(obj: Mapping[str, Any], *paths: tuple[str, ...]) -> Obj:
    out = dict(obj)
    for path in paths:
        parent = out
        for part in path[:-1]:
            child = parent.get(part)
            if not isinstance(child, dict):
                break
            parent[part] = child = dict(child)
            parent = child
        else:
            parent.pop(path[-1], None)
    return out


def node_change_matters(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    """Whether a node update can change where daemon pods belong: the set of true
    conditions, or anything but the resource version, the managed fields and the
    conditions (heartbeats alone do not matter), as upstream's ``shouldIgnoreNodeUpdate``."""
    if conditions_true(old) != conditions_true(new):
        return True
    strip = (
        ("metadata", "resourceVersion"),
        ("metadata", "managedFields"),
        ("status", "conditions"),
    )
    return _without(old, *strip) != _without(new, *strip)
