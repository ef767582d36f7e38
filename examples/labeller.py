"""Example controller: copy a ConfigMap's ``steward.io/copy`` label into an annotation.

The smallest controller that goes through every part of Steward: it watches ConfigMaps
through the informer, keeps a local mirror, queues keys, reconciles with workers, writes
to the API server with its own credentials, and registers with the manager (only the
active instance reconciles). Run it as::

    python -m examples.labeller --kubeconfig KUBECONFIG --informer 127.0.0.1:50061 \\
        --manager 127.0.0.1:50062
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import sys
from collections.abc import Sequence

import grpc

from steward.kube import ApiStatusError, KubeClient, NotFoundError, load_access
from steward.runtime import Request, Result, TraceContext
from steward.runtime.controller import Controller, ControllerBuilder, ControllerOptions
from steward.runtime.mirror import Mirror, resource_type
from steward.runtime.session import RegistrationRefusedError, SessionOptions
from steward.runtime.source import labels_changed
from steward.security import SecurityConfigError, add_client_arguments, client_from_args
from steward.telemetry import configure_tracing

NAME = "configmap-labeller"
LABEL = "steward.io/copy"
ANNOTATION = "steward.io/copied"
CONFIGMAPS = resource_type("", "v1", "configmaps")


class Labeller:
    """Reconciles one ConfigMap: its annotation must equal its label (or be absent)."""

    def __init__(self, mirror: Mirror, api: KubeClient) -> None:
        self.mirror = mirror
        self.api = api

    async def reconcile(self, request: Request, contexts: Sequence[TraceContext]) -> Result:
        obj = self.mirror.get(CONFIGMAPS, request.namespace, request.name)
        if obj is None:
            return Result()  # deleted: nothing to do
        want = obj.meta.labels.get(LABEL)
        have = (obj.object["metadata"].get("annotations") or {}).get(ANNOTATION)
        if want == have:
            return Result()
        patch = {
            "metadata": {
                "annotations": {ANNOTATION: want},
                # Only if nobody changed it since the mirror saw it (else: retried).
                "resourceVersion": obj.resource_version,
            }
        }
        try:  # sent with the reconcile span's traceparent (KubeClient adds it)
            await self.api.arequest(
                "PATCH",
                f"/api/v1/namespaces/{request.namespace}/configmaps/{request.name}",
                patch,
                content_type="application/merge-patch+json",
            )
        except NotFoundError:
            return Result()
        except ApiStatusError as err:
            if err.status == 409:
                return Result(requeue=True)  # changed meanwhile: the new state comes
            raise
        return Result()


def build(
    channel: grpc.aio.Channel, api: KubeClient, options: ControllerOptions | None = None
) -> Controller:
    """The labeller, wired: ConfigMaps whose labels changed are reconciled."""
    return (
        ControllerBuilder(NAME)
        .for_(CONFIGMAPS, labels_changed, kind="ConfigMap")
        .with_options(options or ControllerOptions())
        .complete(channel, lambda mirror: Labeller(mirror, api))
    )


async def _main(args: argparse.Namespace) -> None:
    api = KubeClient(load_access(args.kubeconfig), user_agent=NAME)
    async with args.security.channel(args.informer) as channel:
        controller = build(channel, api, ControllerOptions(namespace=args.namespace))
        controller.fence(api)  # no write unless this instance holds the lease
        session = SessionOptions(controller=NAME, standby=args.standby, security=args.security)
        await controller.run(manager=args.manager, session=session if args.manager else None)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m examples.labeller",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--kubeconfig", help="kubeconfig (default: in-cluster or $KUBECONFIG)")
    parser.add_argument("--informer", default="127.0.0.1:50061", help="informer host:port")
    parser.add_argument("--manager", default=None, help="manager host:port (default: none)")
    parser.add_argument("--namespace", default="", help="watch only this namespace")
    parser.add_argument("--standby", action="store_true", help="stand by if another is active")
    add_client_arguments(parser)  # --tls-ca-file, --tls-cert-file, --tls-key-file, ...
    args = parser.parse_args(argv)
    try:
        args.security = client_from_args(args)
    except SecurityConfigError as err:
        parser.error(str(err))
    logging.basicConfig(level=logging.INFO)
    configure_tracing(f"steward-controller-{NAME}")
    try:
        with contextlib.suppress(KeyboardInterrupt):
            asyncio.run(_main(args))
    except RegistrationRefusedError as err:
        print(f"labeller: {err}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
