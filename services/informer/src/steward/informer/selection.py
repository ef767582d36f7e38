"""Selected-by targets: the objects that objects of another type select by their labels.

A Watch target with ``selected_by`` (informer.proto) receives only the objects some
object of another type selects, in the same namespace: the Endpoints controller needs
the pods that Services select, not every pod of the cluster. The informer holds both
types, so it makes the join itself; the subscriber never receives the others.

A :class:`Selection` holds, for one subscriber's feed, the selector of every selecting
object, by namespace, with an index by the label pairs selectors require, so that an
object is tested only against selectors that could select it (those requiring one of its
label pairs, and the few that require no pair). It is built from the selecting type's
cache when the feed starts and kept by that type's events (:meth:`Selection.update`),
which say which objects a changed selector starts or stops selecting.

# Selector forms
The selector at ``path`` is either a plain map of labels (a Service's ``spec.selector``:
every pair must match) or a LabelSelector, a map with ``matchLabels`` and/or
``matchExpressions`` (a Deployment's ``spec.selector``). An absent or empty selector
selects nothing, in either form: the Endpoints controllers treat a Service without a
selector so, and Kubernetes refuses empty selectors on workloads (a PodDisruptionBudget's
empty selector, which selects every pod of its namespace, is the case this does not
serve). A selector that does not parse selects nothing, and is logged.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from typing import Any

import orjson

from steward.deepjson import loads_deep
from steward.informer.selectors import LabelSelector, Operator, Requirement
from steward.informer.store import StoredObject

log = logging.getLogger(__name__)

_OPERATORS = {
    "In": Operator.IN,
    "NotIn": Operator.NOT_IN,
    "Exists": Operator.EXISTS,
    "DoesNotExist": Operator.DOES_NOT_EXIST,
}


def parse_path(path: str) -> tuple[str, ...]:
    """The segments of a selector path.

    Raises:
        ValueError: the path is empty or has an empty segment.
    """
    segments = tuple(path.split("."))
    if not path or not all(segments):
        raise ValueError(
            f"selected_by.path {path!r} is not a dot-separated path such as 'spec.selector'"
        )
    return segments


def selector_at(obj: Mapping[str, Any], path: tuple[str, ...]) -> LabelSelector | None:
    """The selector an object holds at ``path`` (see the module docs); None when it
    selects nothing.

    Raises:
        ValueError: the value there is not a selector of either form.
    """
    value: Any = obj
    for key in path:
        if not isinstance(value, Mapping):
            return None
        value = value.get(key)
    if value is None:
        return None
    if not isinstance(value, Mapping):
        raise ValueError(f"the selector at {'.'.join(path)} is not a map")
    if not value:
        return None
    if "matchLabels" in value or "matchExpressions" in value:
        selector = _label_selector(value)
        return selector if selector.requirements else None
    if not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        raise ValueError(f"the selector at {'.'.join(path)} is not a map of strings")
    return LabelSelector(
        tuple(Requirement(k, Operator.EQUALS, frozenset({v})) for k, v in sorted(value.items()))
    )


def _label_selector(value: Mapping[str, Any]) -> LabelSelector:
    requirements: list[Requirement] = []
    for key, label in sorted((value.get("matchLabels") or {}).items()):
        requirements.append(Requirement(str(key), Operator.EQUALS, frozenset({str(label)})))
    for expr in value.get("matchExpressions") or ():
        if not isinstance(expr, Mapping):
            raise ValueError("a matchExpressions entry is not a map")
        op = _OPERATORS.get(str(expr.get("operator")))
        if op is None:
            raise ValueError(f"unknown matchExpressions operator {expr.get('operator')!r}")
        values = frozenset(str(v) for v in expr.get("values") or ())
        requirements.append(Requirement(str(expr.get("key") or ""), op, values))
    return LabelSelector(tuple(requirements))


def _index_pair(selector: LabelSelector) -> tuple[str, str] | None:
    """The label pair an object must have to match ``selector`` (its first equality
    requirement), or None when it requires no single pair."""
    for req in selector.requirements:
        if req.operator is Operator.EQUALS and len(req.values) == 1:
            (value,) = req.values
            return (req.key, value)
    return None


class Selection:
    """The selectors of one selecting type, for one feed (see the module docs)."""

    def __init__(self, path: tuple[str, ...]) -> None:
        self.path = path
        self._selectors: dict[tuple[str, str], LabelSelector] = {}
        """By selecting object's (namespace, name)."""
        self._by_pair: dict[str, dict[tuple[str, str], set[str]]] = {}
        """namespace → required label pair → names of the selecting objects."""
        self._unindexed: dict[str, set[str]] = {}
        """namespace → names of selecting objects whose selectors require no pair."""

    def load(self, objects: Iterable[StoredObject]) -> None:
        """Take the selectors of every object of the selecting type."""
        for obj in objects:
            self._set(obj.namespace, obj.name, self.selector_of(obj))

    def selector(self, namespace: str, name: str) -> LabelSelector | None:
        """The selector held for one selecting object."""
        return self._selectors.get((namespace, name))

    def selector_of(self, obj: StoredObject, decoded: Any = None) -> LabelSelector | None:
        """The selector ``obj`` holds (``decoded`` is its dict when the caller has it)."""
        if decoded is None:
            try:
                decoded = orjson.loads(obj.raw)
            except orjson.JSONDecodeError:
                decoded = loads_deep(obj.raw)
        try:
            return selector_at(decoded, self.path)
        except ValueError as err:
            log.warning("%s/%s selects nothing: %s", obj.namespace, obj.name, err)
            return None

    def selects(self, namespace: str, labels: Mapping[str, str]) -> bool:
        """Whether some selector of ``namespace`` selects an object with ``labels``."""
        selectors = self._selectors
        for name in self._unindexed.get(namespace, ()):
            if selectors[(namespace, name)].matches(labels):
                return True
        pairs = self._by_pair.get(namespace)
        if pairs:
            for pair in labels.items():
                for name in pairs.get(pair, ()):
                    if selectors[(namespace, name)].matches(labels):
                        return True
        return False

    def update(
        self, namespace: str, name: str, selector: LabelSelector | None
    ) -> tuple[LabelSelector | None, LabelSelector | None] | None:
        """Set one selecting object's selector (None: it selects nothing, or is gone);
        (old, new) when it changed, else None."""
        old = self._selectors.get((namespace, name))
        if old == selector:
            return None
        self._set(namespace, name, selector)
        return old, selector

    def _set(self, namespace: str, name: str, selector: LabelSelector | None) -> None:
        key = (namespace, name)
        old = self._selectors.pop(key, None)
        if old is not None:
            pair = _index_pair(old)
            if pair is None:
                names = self._unindexed.get(namespace)
            else:
                names = self._by_pair.get(namespace, {}).get(pair)
            if names is not None:
                names.discard(name)
                if not names:
                    if pair is None:
                        del self._unindexed[namespace]
                    else:
                        del self._by_pair[namespace][pair]
                        if not self._by_pair[namespace]:
                            del self._by_pair[namespace]
        if selector is None:
            return
        self._selectors[key] = selector
        pair = _index_pair(selector)
        if pair is None:
            self._unindexed.setdefault(namespace, set()).add(name)
        else:
            self._by_pair.setdefault(namespace, {}).setdefault(pair, set()).add(name)
