"""Kubernetes label selectors (``matchLabels`` and ``matchExpressions``) against labels.

One implementation for every controller. The empty selector is the one case where callers
differ: a workload controller (Job, ReplicaSet, Deployment) must never take every pod, so
by default a missing or empty selector matches nothing; pass ``empty_matches_all=True``
where Kubernetes reads it as "everything" (a Service's or a NetworkPolicy's selector).

# Errors
An unknown operator matches nothing (the API server refuses such a selector, so an object
carrying one is malformed; matching nothing never takes objects that are not ours).

# Selectors as text
A scale subresource's ``status.selector`` and the ``labelSelector`` query parameter carry
a selector as text (``app=web,tier in (front,back),!canary``). :func:`parse_selector`
reads that into the structured form above (``=``/``==`` and ``!=``, ``in`` and
``notin``, ``key`` and ``!key``, as Kubernetes' ``labels.Parse``); malformed text raises
:class:`SelectorSyntaxError` naming what is wrong. :func:`format_selector` writes a
structured selector as text, requirements sorted by key as Kubernetes writes them.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

_KEY = re.compile(r"^([A-Za-z0-9][-A-Za-z0-9_.]*/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")


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


class SelectorSyntaxError(ValueError):
    """Selector text that Kubernetes would not parse; the message says what and where."""


def _split_requirements(text: str) -> list[str]:
    """The requirements of ``text``: split at commas outside parentheses."""
    parts, depth, start = [], 0, 0
    for i, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise SelectorSyntaxError(f"unexpected ')' at position {i} in {text!r}")
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    if depth:
        raise SelectorSyntaxError(f"unclosed '(' in {text!r}")
    parts.append(text[start:])
    return parts


def _key(key: str, text: str) -> str:
    if not _KEY.match(key) or len(key.rsplit("/", 1)[-1]) > 63:
        raise SelectorSyntaxError(f"invalid label key {key!r} in {text!r}")
    return key


def _value(value: str, text: str) -> str:
    if not _VALUE.match(value) or len(value) > 63:
        raise SelectorSyntaxError(f"invalid label value {value!r} in {text!r}")
    return value


def parse_selector(text: str) -> dict[str, Any]:
    """The structured selector (``matchExpressions`` only) that ``text`` means; the empty
    text gives the empty selector. Raises :class:`SelectorSyntaxError`."""
    expressions: list[dict[str, Any]] = []
    if not text.strip():
        return {}
    for raw in _split_requirements(text):
        part = raw.strip()
        if not part:
            raise SelectorSyntaxError(f"empty requirement in {text!r}")
        set_match = re.fullmatch(r"(\S+)\s+(in|notin)\s*\((.*)\)", part)
        if set_match:
            key, op, values = set_match.groups()
            items = [_value(v.strip(), text) for v in values.split(",")]
            if values.strip() == "":
                raise SelectorSyntaxError(f"{op} needs at least one value in {text!r}")
            operator = "In" if op == "in" else "NotIn"
            expressions.append(
                {"key": _key(key, text), "operator": operator, "values": sorted(set(items))}
            )
            continue
        eq_match = re.fullmatch(r"([^=!\s]+)\s*(==|=|!=)\s*(\S*)", part)
        if eq_match:
            key, op, value = eq_match.groups()
            operator = "NotIn" if op == "!=" else "In"
            expressions.append(
                {"key": _key(key, text), "operator": operator, "values": [_value(value, text)]}
            )
            continue
        if part.startswith("!"):
            expressions.append({"key": _key(part[1:].strip(), text), "operator": "DoesNotExist"})
            continue
        expressions.append({"key": _key(part, text), "operator": "Exists"})
    return {"matchExpressions": expressions}


def format_selector(selector: Mapping[str, Any] | None) -> str:
    """``selector`` as text (``labelSelector`` query form), requirements sorted by key."""
    requirements: list[tuple[str, str]] = []
    for key, value in ((selector or {}).get("matchLabels") or {}).items():
        requirements.append((key, f"{key}={value}"))
    for expr in (selector or {}).get("matchExpressions") or ():
        key, op = str(expr.get("key")), expr.get("operator")
        values = ",".join(sorted(str(v) for v in expr.get("values") or ()))
        if op == "In":
            requirements.append((key, f"{key} in ({values})"))
        elif op == "NotIn":
            requirements.append((key, f"{key} notin ({values})"))
        elif op == "Exists":
            requirements.append((key, key))
        elif op == "DoesNotExist":
            requirements.append((key, f"!{key}"))
        else:
            raise SelectorSyntaxError(f"unknown selector operator {op!r}")
    return ",".join(text for _, text in sorted(requirements, key=lambda r: r[0]))
