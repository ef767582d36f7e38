"""A primary type watched through a field selector.

``ControllerBuilder.for_`` takes no selectors, and every source of one type must ask for
the same ones, so a controller whose primary is one object (``kube-public/cluster-info``)
would receive every ConfigMap of the cluster. :func:`for_selected` declares the primary
with the informer's field selector (``metadata.name``, ``metadata.namespace``) instead:
the informer sends only the objects it selects.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, TypeVar

from steward.runtime.controller import ControllerBuilder, _SourceSpec
from steward.runtime.resources import Resource
from steward.runtime.source import Predicate
from steward.runtime.subscriptions import subscription

R = TypeVar("R")


def for_selected(
    builder: ControllerBuilder[R],
    rtype: Resource,
    *predicates: Predicate,
    field_selector: str,
    fields: Sequence[str] | None = None,
) -> ControllerBuilder[R]:
    """``builder.for_(rtype, *predicates, fields=fields)``, the informer sending only the
    objects ``field_selector`` selects."""
    builder.for_(rtype, *predicates, fields=fields)
    spec: Any = builder._sources[-1]
    builder._sources[-1] = _SourceSpec(
        rtype,
        spec.kind,
        spec.predicates,
        subscription=subscription(field_selector=field_selector, fields=fields),
    )
    return builder
