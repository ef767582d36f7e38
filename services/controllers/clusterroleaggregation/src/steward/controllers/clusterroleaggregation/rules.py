"""The decisions of the ClusterRole aggregation, without I/O.

An aggregated ClusterRole (one with an ``aggregationRule``) holds the rules of every
ClusterRole its ``clusterRoleSelectors`` select, as upstream's
``ClusterRoleAggregationController.syncClusterRole`` computes them:

- selectors in their order; within one selector, the selected roles sorted by name
  (byte order, as Go compares strings); the aggregated role itself never counts;
- each rule of a selected role is added unless a semantically equal one is there already
  (upstream's ``ruleExists``: an empty list equals an absent one, order within a list
  counts);
- an empty selector selects every ClusterRole (``LabelSelectorAsSelector`` of ``{}`` is
  ``Everything``).

The result is written only when it differs (semantically) from the role's rules, as a
server-side apply of the rules alone (:func:`apply_body`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

GROUP_VERSION = "rbac.authorization.k8s.io/v1"
FIELD_MANAGER = "clusterrole-aggregation-controller"
"""The field manager of upstream's apply (and the name of its client)."""
RULE_FIELDS = ("verbs", "apiGroups", "resources", "resourceNames", "nonResourceURLs")
"""A PolicyRule's fields, in the order upstream's apply configuration serializes them."""
OPERATORS = ("In", "NotIn", "Exists", "DoesNotExist")

Rule = dict[str, list[str]]


class InvalidSelector(ValueError):
    """A ``clusterRoleSelector`` that upstream's ``LabelSelectorAsSelector`` refuses (the
    API server's validation refuses it too, so only a malformed object carries one)."""


def normalized_rule(rule: Mapping[str, Any]) -> Rule:
    """``rule`` with only its non-empty fields, each a list of strings (how
    ``equality.Semantic`` sees a PolicyRule: nil and empty lists are equal)."""
    out: Rule = {}
    for key in RULE_FIELDS:
        values = rule.get(key) or []
        if values:
            out[key] = [str(v) for v in values]
    return out


def same_rules(
    a: Sequence[Mapping[str, Any]] | None, b: Sequence[Mapping[str, Any]] | None
) -> bool:
    """Upstream's ``equality.Semantic.DeepEqual`` of two rule lists (order counts; an
    absent list equals an empty one)."""
    left = [normalized_rule(r) for r in a or ()]
    right = [normalized_rule(r) for r in b or ()]
    return left == right


def _check_selector(selector: Mapping[str, Any]) -> None:
    for expr in selector.get("matchExpressions") or ():
        op = expr.get("operator")
        values = expr.get("values") or []
        if op not in OPERATORS:
            raise InvalidSelector(f"{op!r} is not a valid label selector operator")
        if op in ("In", "NotIn") and not values:
            raise InvalidSelector(
                f"for 'in', 'notin' operators, values set can't be empty ({expr})"
            )
        if op in ("Exists", "DoesNotExist") and values:
            raise InvalidSelector(
                f"values set must be empty for exists and does not exist ({expr})"
            )


def selects(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Whether ``selector`` (a ``metav1.LabelSelector``) selects ``labels``; the empty
    selector selects everything.

    Raises:
        InvalidSelector: an unknown operator, or values where there must be none (or none
            where there must be some).
    """
    selector = selector or {}
    _check_selector(selector)
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or ():
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and not (key in labels and labels[key] in values):
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True


def aggregate(
    name: str,
    selectors: Sequence[Mapping[str, Any]],
    roles: Iterable[tuple[str, Mapping[str, str], Sequence[Mapping[str, Any]]]],
) -> list[Rule]:
    """The rules of the aggregated ClusterRole ``name``: ``roles`` are every ClusterRole
    as (name, labels, rules); see the module docs for the order and the deduplication.

    Raises:
        InvalidSelector: a selector upstream would refuse.
    """
    known = sorted(roles, key=lambda r: r[0].encode())
    merged: list[Rule] = []
    for selector in selectors:
        for role_name, labels, rules in known:
            if role_name == name or not selects(selector, labels):
                continue
            for rule in rules or ():
                normal = normalized_rule(rule)
                if normal not in merged:
                    merged.append(normal)
    return merged


def apply_body(name: str, rules: Sequence[Rule]) -> dict[str, Any]:
    """The server-side apply request upstream sends: the ClusterRole's name and its rules
    (each with its non-empty fields only); no ``rules`` at all when there are none, so the
    field manager gives up the rules it held and the API server drops them."""
    body: dict[str, Any] = {
        "kind": "ClusterRole",
        "apiVersion": GROUP_VERSION,
        "metadata": {"name": name},
    }
    if rules:
        body["rules"] = [{k: list(r[k]) for k in RULE_FIELDS if r.get(k)} for r in rules]
    return body
