"""The ClusterRole aggregation controller: each aggregated ClusterRole holds the rules of
the ClusterRoles it selects, as upstream's ``clusterrole-aggregation`` controller.

# A sync
The ClusterRole is read from the mirror; one that is gone or has no ``aggregationRule``
is left alone. Its rules are computed from every ClusterRole in the mirror
(:func:`~.rules.aggregate`: selectors in order, selected roles by name, exact duplicates
dropped, itself excluded) and, when they differ from the role's, written with a
server-side apply of the rules alone, field manager ``clusterrole-aggregation-controller``,
forced (upstream's ``applyClusterRoles``). A failed apply raises: the key is retried with
backoff. A selector upstream cannot parse (the API server refuses such objects) is
logged and the role skipped until it changes.

# Queueing
Any change of any ClusterRole (added, updated, deleted) queues every aggregated
ClusterRole in the mirror (upstream's ``enqueue``: the roles are few and the dependency
graph unknown). The resync (12 hours, kube-controller-manager's ``--min-resync-period``)
queues them all again.

# What it reads
ClusterRoles from the informer, projected to their labels, ``aggregationRule`` and
``rules``: a change to anything else (annotations, say) never reaches the controller.
"""

from __future__ import annotations

import logging
from typing import Any

import steward
from steward import Request, Resource, Result
from steward.controllers.clusterroleaggregation.rules import (
    FIELD_MANAGER,
    InvalidSelector,
    aggregate,
    apply_body,
    same_rules,
)

log = logging.getLogger(__name__)

NAME = "clusterrole-aggregation"
"""The controller's name with the manager (kube-controller-manager's alias of its
clusterrole-aggregation-controller)."""
QUEUE = "ClusterRoleAggregator"
"""The work queue's name, as upstream names it (``workqueue_*{name="ClusterRoleAggregator"}``)."""
WORKERS = 5
"""Roles synced at once: kube-controller-manager runs the controller with 5 workers (no
flag)."""
RESYNC_PERIOD = 12 * 3600.0
"""Seconds between two resyncs: the shared informer's default resync,
kube-controller-manager's ``--min-resync-period`` (12 h)."""
CLUSTERROLES = Resource(
    "rbac.authorization.k8s.io", "v1", "clusterroles", "ClusterRole", namespaced=False
)
FIELDS = ("metadata.labels", "aggregationRule", "rules")
"""What the controller reads of each ClusterRole."""
APPLY = "application/apply-patch+yaml"


class AggregationReconciler:
    """Fills one aggregated ClusterRole; see the module docs."""

    def __init__(self, ctx: steward.Context) -> None:
        self.mirror = ctx.mirror
        self.api = ctx.api

    def aggregated(self, change: steward.Change) -> list[Request]:
        """Upstream's ``enqueue``: every aggregated ClusterRole, whatever changed."""
        return [
            Request("", obj.name)
            for obj in self.mirror.objects(CLUSTERROLES)
            if obj.object.get("aggregationRule") is not None
        ]

    async def reconcile(self, request: Request) -> Result:
        found = self.mirror.get(CLUSTERROLES, "", request.name)
        if found is None:
            return Result()
        role = found.object
        rule = role.get("aggregationRule")
        if rule is None:
            return Result()
        roles = [
            (obj.name, obj.meta.labels, obj.object.get("rules") or ())
            for obj in self.mirror.objects(CLUSTERROLES)
        ]
        try:
            rules = aggregate(request.name, rule.get("clusterRoleSelectors") or (), roles)
        except InvalidSelector as err:
            # As a malformed object: retrying cannot help until the role changes.
            raise steward.TerminalError(f"ClusterRole {request.name}: {err}") from err
        if same_rules(rules, role.get("rules")):
            return Result()
        await self.apply(request.name, rules)
        log.info("ClusterRole %s: %d aggregated rules written", request.name, len(rules))
        return Result()

    async def apply(self, name: str, rules: list[dict[str, list[str]]]) -> dict[str, Any]:
        """Upstream's ``applyClusterRoles``: the rules applied, forced, as
        :data:`~.rules.FIELD_MANAGER`.

        Raises:
            ApiError: the API server refused the apply (retried with backoff).
        """
        path = CLUSTERROLES.path("", name) + f"?fieldManager={FIELD_MANAGER}&force=true"
        return await self.api.arequest("PATCH", path, apply_body(name, rules), content_type=APPLY)


def _every_change(change: steward.Change) -> bool:
    return True


CONTROLLER = (
    steward.ControllerBuilder[AggregationReconciler](NAME)
    # The primary's own key is queued by the mapper below with every other aggregated role;
    # the primary source is there for the start and the resync (every ClusterRole queued,
    # those without an aggregationRule left alone).
    .for_(CLUSTERROLES, lambda change: False, fields=FIELDS)
    .watches_changes(CLUSTERROLES, AggregationReconciler.aggregated, _every_change, fields=FIELDS)
    .with_options(
        steward.ControllerOptions(
            max_concurrent_reconciles=WORKERS, resync_period=RESYNC_PERIOD, queue_name=QUEUE
        )
    )
    .beside_upstream(None)
    .describe(
        "Steward's ClusterRole aggregation controller: every ClusterRole with an "
        "aggregationRule holds the rules of the ClusterRoles its selectors select, written "
        "by server-side apply as kube-controller-manager's clusterrole-aggregation "
        "controller (field manager clusterrole-aggregation-controller). --workers is "
        "upstream's fixed 5, --resync-period the shared informer's 12 h. Both would write "
        "the same roles, so it must not run beside upstream's."
    )
    .complete(AggregationReconciler)
)
"""The aggregation controller: ClusterRoles are the primary (and only watched) type."""
