"""Steward: the Kubernetes controller manager as gRPC microservices.

Everything a controller author needs is here, in one import::

    import steward

    async def reconcile(ctx: steward.Context, request: steward.Request) -> steward.Result:
        obj = ctx.mirror.get(steward.CONFIGMAPS, request.namespace, request.name)
        ...  # writes: ctx.client(steward.CONFIGMAPS).update(...), ctx.children(...)
        return steward.Result()

    LABELLER = steward.ControllerBuilder("labeller").for_(steward.CONFIGMAPS).complete(reconcile)

    if __name__ == "__main__":
        raise SystemExit(steward.run(LABELLER))

The layers underneath (``steward.runtime``: mirror, sources, work queue, workers, manager
session, typed client, children) are usable alone; see each module's documentation.
"""

from pkgutil import extend_path

# Steward's distributions (the runtime, steward-serving, the informer, the manager, each
# controller, the tools) each install part of this package; every part is found wherever it lives.
__path__ = extend_path(__path__, __name__)

from steward.deepjson import copy as copy_json
from steward.kube import (
    ApiError,
    ApiStatusError,
    ConflictError,
    FencedError,
    KubeClient,
    NotFoundError,
    error_message,
)
from steward.runtime import endpoints, pods
from steward.runtime.children import Children, namespace_terminating
from steward.runtime.client import Client, ResourceClient
from steward.runtime.controller import (
    Context,
    Controller,
    ControllerBuilder,
    ControllerDefinition,
    ControllerOptions,
)
from steward.runtime.events import EventRecorder
from steward.runtime.expectations import BatchOutcome, Expectations, slow_start_batches
from steward.runtime.host import add_workers_alias, run
from steward.runtime.mirror import (
    Change,
    ChangeKind,
    Mirror,
    MirrorObject,
    StaleRead,
)
from steward.runtime.ownership import (
    controller_of,
    controller_ref,
    index_by_controller,
    is_controlled_by,
    orphan_index,
)
from steward.runtime.quantity import parse_quantity, parse_quantity_milli
from steward.runtime.reconcile import Reconciler, Request, Result, RetryAfter, TerminalError
from steward.runtime.resources import (
    CONFIGMAPS,
    CONTROLLER_REVISIONS,
    CRONJOBS,
    DAEMONSETS,
    DEPLOYMENTS,
    ENDPOINT_SLICES,
    ENDPOINTS,
    EVENTS,
    HORIZONTAL_POD_AUTOSCALERS,
    JOBS,
    LEASES,
    NAMESPACES,
    NODES,
    PODS,
    REPLICASETS,
    REPLICATION_CONTROLLERS,
    SECRETS,
    SERVICE_ACCOUNTS,
    SERVICES,
    STATEFULSETS,
    ObjectRef,
    Resource,
    owner_of,
)
from steward.runtime.selectors import (
    SelectorSyntaxError,
    format_selector,
    parse_selector,
    selector_matches,
)
from steward.runtime.source import (
    EnqueueAdopters,
    generation_changed,
    labels_changed,
    resource_version_changed,
)
from steward.runtime.subscriptions import ProjectionError, TypeSubscription
from steward.runtime.times import format_time, parse_time, utc_now
from steward.runtime.tracing import stamp_trace_context
from steward.runtime.workqueue import TraceContext

__all__ = [
    "CONFIGMAPS",
    "CONTROLLER_REVISIONS",
    "CRONJOBS",
    "DAEMONSETS",
    "DEPLOYMENTS",
    "ENDPOINTS",
    "ENDPOINT_SLICES",
    "EVENTS",
    "HORIZONTAL_POD_AUTOSCALERS",
    "JOBS",
    "LEASES",
    "NAMESPACES",
    "NODES",
    "PODS",
    "REPLICASETS",
    "REPLICATION_CONTROLLERS",
    "SECRETS",
    "SERVICES",
    "SERVICE_ACCOUNTS",
    "STATEFULSETS",
    "ApiError",
    "ApiStatusError",
    "BatchOutcome",
    "Change",
    "ChangeKind",
    "Children",
    "Client",
    "ConflictError",
    "Context",
    "Controller",
    "ControllerBuilder",
    "ControllerDefinition",
    "ControllerOptions",
    "EnqueueAdopters",
    "EventRecorder",
    "Expectations",
    "FencedError",
    "KubeClient",
    "Mirror",
    "MirrorObject",
    "NotFoundError",
    "ObjectRef",
    "ProjectionError",
    "Reconciler",
    "Request",
    "Resource",
    "ResourceClient",
    "Result",
    "RetryAfter",
    "SelectorSyntaxError",
    "StaleRead",
    "TerminalError",
    "TraceContext",
    "TypeSubscription",
    "add_workers_alias",
    "controller_of",
    "controller_ref",
    "copy_json",
    "endpoints",
    "error_message",
    "format_selector",
    "format_time",
    "generation_changed",
    "index_by_controller",
    "is_controlled_by",
    "labels_changed",
    "namespace_terminating",
    "orphan_index",
    "owner_of",
    "parse_quantity",
    "parse_quantity_milli",
    "parse_selector",
    "parse_time",
    "pods",
    "resource_version_changed",
    "run",
    "selector_matches",
    "slow_start_batches",
    "stamp_trace_context",
    "utc_now",
]
