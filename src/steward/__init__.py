"""Steward: the Kubernetes controller manager as gRPC microservices.

Everything a controller author needs is here, in one import::

    import steward

    CONFIGMAPS = steward.resource_type("", "v1", "configmaps")

    async def reconcile(ctx: steward.Context, request: steward.Request) -> steward.Result:
        obj = ctx.mirror.get(CONFIGMAPS, request.namespace, request.name)
        ...
        return steward.Result()

    LABELLER = steward.ControllerBuilder("labeller").for_(CONFIGMAPS).complete(reconcile)

    if __name__ == "__main__":
        raise SystemExit(steward.run(LABELLER))

The layers underneath (``steward.runtime``: mirror, sources, work queue, workers, manager
session) are usable alone; see each module's documentation.
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
)
from steward.runtime import endpoints, pods
from steward.runtime.controller import (
    Context,
    Controller,
    ControllerBuilder,
    ControllerDefinition,
    ControllerOptions,
)
from steward.runtime.events import EventRecorder
from steward.runtime.expectations import BatchOutcome, Expectations, slow_start_batches
from steward.runtime.host import run
from steward.runtime.mirror import (
    Change,
    ChangeKind,
    Mirror,
    MirrorObject,
    StaleRead,
    api_path,
    resource_type,
)
from steward.runtime.ownership import (
    Ownership,
    controller_of,
    controller_ref,
    create_child,
    index_by_controller,
    is_controlled_by,
    orphan_index,
)
from steward.runtime.reconcile import Reconciler, Request, Result, RetryAfter, TerminalError
from steward.runtime.selectors import (
    SelectorSyntaxError,
    format_selector,
    parse_selector,
    selector_matches,
)
from steward.runtime.source import (
    generation_changed,
    labels_changed,
    resource_version_changed,
)
from steward.runtime.times import format_time, parse_time, utc_now
from steward.runtime.tracing import stamp_trace_context
from steward.runtime.workqueue import TraceContext

__all__ = [
    "ApiError",
    "ApiStatusError",
    "BatchOutcome",
    "Change",
    "ChangeKind",
    "ConflictError",
    "Context",
    "Controller",
    "ControllerBuilder",
    "ControllerDefinition",
    "ControllerOptions",
    "EventRecorder",
    "Expectations",
    "FencedError",
    "KubeClient",
    "Mirror",
    "MirrorObject",
    "NotFoundError",
    "Ownership",
    "Reconciler",
    "Request",
    "Result",
    "RetryAfter",
    "SelectorSyntaxError",
    "StaleRead",
    "TerminalError",
    "TraceContext",
    "api_path",
    "controller_of",
    "controller_ref",
    "copy_json",
    "create_child",
    "endpoints",
    "format_selector",
    "format_time",
    "generation_changed",
    "index_by_controller",
    "is_controlled_by",
    "labels_changed",
    "orphan_index",
    "parse_selector",
    "parse_time",
    "pods",
    "resource_type",
    "resource_version_changed",
    "run",
    "selector_matches",
    "slow_start_batches",
    "stamp_trace_context",
    "utc_now",
]
