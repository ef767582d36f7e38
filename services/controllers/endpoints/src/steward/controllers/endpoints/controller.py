"""The Endpoints controller: Services and their pods from the mirror, :mod:`.sync`'s
decisions, and the writes to the API server (Endpoints, Events).

# A sync
A Service that is gone has its Endpoints object (of the same name) deleted. A Service of
type ExternalName, or without a selector, is left alone (someone else writes its
Endpoints, if anyone). Otherwise the pods of its namespace that its selector matches
give the desired subsets (:func:`.sync.endpoints_for`); the last-change trigger time is
computed on every sync (upstream's trigger time tracker, so its memory of the pods'
Ready transitions stays current even when nothing is written); and the Endpoints object
is created, or updated unless it already says exactly that. An Endpoints object of the
Service's name is taken over whoever wrote it, as upstream does: it gets the managed-by
label and the controller's subsets.

# Queueing
Every change of a Service queues it. A pod change queues the Services of its namespace
whose selectors match its old or new labels, when the change can move endpoints (added
or deleted; deletion mark, readiness, IPs, labels, hostname or subdomain changed). A
change of an Endpoints object queues the Service of its name while that Service exists;
while the mirror's initial snapshot is arriving, every Endpoints object not holding a
leader-election record is queued too, so leftovers of Services deleted while no
controller ran are deleted (upstream's checkLeftoverEndpoints).

# What it reads
Services and Endpoints whole (an update is a copy of the mirror's Endpoints object); of a
pod only :data:`POD_FIELDS`, so a pod change touching none of them (annotations, most of
the status) never reaches the controller.

# Errors
A create that finds the object already there (409 AlreadyExists: usually this
controller's own create that the mirror does not show yet) ends the sync quietly, since
the object's arrival in the mirror queues the Service again. Any other refused write ends
the sync with the API server's error, so the key is retried with backoff; a conflicting
update (409) too — the next sync reads the mirror afresh, as upstream's
requeue does. Each refused create or update records a Warning Event
(``FailedToCreateEndpoint`` / ``FailedToUpdateEndpoint``) on the Endpoints object, except a
create refused because the namespace is being terminated, which is dropped quietly
(every later create would fail too). A delete that finds nothing is done. After
:data:`MAX_RETRIES` failed syncs in a row the Service is dropped until its next event.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import steward
from steward import (
    ENDPOINTS,
    PODS,
    SERVICES,
    ApiError,
    ConflictError,
    NotFoundError,
    Request,
    Result,
    error_message,
)
from steward.controllers.endpoints.sync import LEADER_ANNOTATION, endpoints_for

log = logging.getLogger(__name__)

NAME = "endpoint"
"""The controller's name with the manager (kube-controller-manager's --controllers alias
of its endpoints-controller)."""
MAX_RETRIES = 15
"""Failed syncs in a row after which a Service is dropped until its next event (upstream's
maxRetries; its backoff is client-go's default, 5 ms doubling to 1000 s)."""
COMPONENT = "endpoint-controller"
"""The Events' source component, as upstream's."""
POD_FIELDS = (*steward.endpoints.POD_FIELDS, "spec.nodeName")
"""What the controller reads of a pod: what ``steward.endpoints`` reads, and the node name
of its addresses (:func:`.sync.endpoint_address`)."""


class EndpointsReconciler:
    """Reconciles one Service's Endpoints by key; see the module docs."""

    def __init__(self, ctx: steward.Context) -> None:
        self.mirror = ctx.mirror
        self.endpoints = ctx.client(ENDPOINTS)
        # As upstream, the Events are about the Endpoints object.
        self.events = ctx.event_recorder(COMPONENT, about=ENDPOINTS)
        self.triggers = steward.endpoints.TriggerTimes()

    # Mapping --------------------------------------------------------------------------
    def services_of_pod(self, obj: steward.MirrorObject) -> list[Request]:
        """The Services of the pod's namespace whose selector matches its labels."""
        return steward.endpoints.services_selecting(self.mirror, obj)

    def service_of_endpoints(self, obj: steward.MirrorObject) -> list[Request]:
        """The Service of the Endpoints' name while it exists; during the initial
        snapshot also a leftover's (but never a leader-election record's)."""
        key = Request(obj.namespace, obj.name)
        if self.mirror.get(SERVICES, obj.namespace, obj.name) is not None:
            return [key]
        if self.mirror.has_synced():
            return []
        annotations = (obj.object.get("metadata") or {}).get("annotations") or {}
        return [] if LEADER_ANNOTATION in annotations else [key]

    # Reconcile --------------------------------------------------------------------------
    async def reconcile(self, request: Request) -> Result:
        """Sync one Service's Endpoints (see the module docs for what happens on errors)."""
        ns, name = request.namespace, request.name
        found = self.mirror.get(SERVICES, ns, name)
        if found is None:
            await self._delete(ns, name)
            self.triggers.forget(ns, name)
            return Result()
        service = found.object
        if not steward.endpoints.managed(service):
            return Result()
        selected = steward.endpoints.selected_pods(self.mirror, service)
        # Computed on every sync, so the tracker's state follows the pods even when the
        # sync turns out to write nothing (as upstream).
        trigger_time = self.triggers.compute(service, selected)
        current = self.mirror.get(ENDPOINTS, ns, name)
        body = endpoints_for(
            service, selected, None if current is None else current.object, trigger_time
        )
        if body is None:
            return Result()
        if current is None:
            await self._create(ns, name, body)
        else:
            await self._update(ns, name, body)
        return Result()

    # Writes -----------------------------------------------------------------------------
    async def _delete(self, ns: str, name: str) -> None:
        with contextlib.suppress(NotFoundError):  # gone already: done
            await self.endpoints.delete(ns, name)

    async def _create(self, ns: str, name: str, body: dict[str, Any]) -> None:
        try:
            await self.endpoints.create(body, namespace=ns)
        except ConflictError:
            # It exists already: our own create of a moment ago that the mirror does not
            # show yet, or someone else's. Either way its arrival in the mirror queues the
            # Service again, and that sync updates it if needed.
            log.debug(
                "endpoints %s/%s exist already; waiting for the mirror to show them", ns, name
            )
            return
        except ApiError as err:
            if steward.namespace_terminating(err):
                log.debug("not creating endpoints %s/%s: %s", ns, name, error_message(err))
                return
            self.events.event(
                body,
                "Warning",
                "FailedToCreateEndpoint",
                f"Failed to create endpoint for service {ns}/{name}: {error_message(err)}",
            )
            raise

    async def _update(self, ns: str, name: str, body: dict[str, Any]) -> None:
        try:
            await self.endpoints.update(body)
        except ApiError as err:
            self.events.event(
                body,
                "Warning",
                "FailedToUpdateEndpoint",
                f"Failed to update endpoint {ns}/{name}: {error_message(err)}",
            )
            raise


CONTROLLER = (
    steward.ControllerBuilder[EndpointsReconciler](NAME)
    .for_(SERVICES)
    .watches(
        PODS,
        EndpointsReconciler.services_of_pod,
        steward.endpoints.pod_change_matters,
        fields=POD_FIELDS,
        # Only pods some Service selects: a Job's pods never reach the controller.
        selected_by=(SERVICES, "spec.selector"),
    )
    # Whole: an update is a copy of the object as the mirror holds it.
    .watches(ENDPOINTS, EndpointsReconciler.service_of_endpoints)
    .with_index(steward.endpoints.LABEL_INDEX, steward.endpoints.index_pod_labels)
    .with_options(steward.ControllerOptions(max_concurrent_reconciles=5, max_retries=MAX_RETRIES))
    .beside_upstream(None)
    .describe(
        "Steward's Endpoints controller: keeps the core/v1 Endpoints object of every "
        "Service with a selector in line with the Service's pods (ready and not-ready "
        "addresses, resolved ports, at most 1000 addresses) and deletes it with its "
        "Service. Endpoints have no spec.managedBy, so it must not run beside "
        "kube-controller-manager's endpoints-controller."
    )
    .complete(EndpointsReconciler)
)
"""The Endpoints controller: Services are the primary type; pods map to the Services
selecting them (old and new labels), Endpoints to the Service of their name."""
