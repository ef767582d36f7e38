"""The Python runtime's conformance driver (the contract is in ``conformance/README.md``).

Run as ``python -m conformance.driver --informer HOST:PORT [--workers N]``: a controller
named ``conformance`` on ConfigMaps, built from the runtime's ordinary parts, that reports
every reconcile as one JSON line on stdout.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import logging
import signal
import sys
import time
from collections.abc import Sequence

import grpc
import orjson

from steward.runtime import Request, Result
from steward.runtime.controller import Context, ControllerBuilder, ControllerOptions
from steward.runtime.mirror import MirrorError
from steward.runtime.resources import CONFIGMAPS
from steward.runtime.tracing import coalesced_contexts

SLEEP = "conformance.steward.dev/sleep-ms"
FAIL = "conformance.steward.dev/fail-times"


def emit(record: dict[str, object]) -> None:
    sys.stdout.buffer.write(orjson.dumps(record) + b"\n")
    sys.stdout.buffer.flush()


class Reporter:
    """Reconciles a ConfigMap as the contract says, and reports the attempt."""

    def __init__(self, ctx: Context) -> None:
        self.mirror = ctx.mirror
        self.failures: dict[Request, int] = {}

    async def reconcile(self, request: Request) -> Result:
        start = time.time_ns()
        contexts = coalesced_contexts()
        obj = self.mirror.get(CONFIGMAPS, request.namespace, request.name)
        annotations = (obj.object.get("metadata", {}).get("annotations") or {}) if obj else {}
        sleep_ms = int(annotations.get(SLEEP, "0") or 0)
        fail_times = int(annotations.get(FAIL, "0") or 0)
        if sleep_ms:
            await asyncio.sleep(sleep_ms / 1000)
        attempt = self.failures.get(request, 0)
        failed = attempt < fail_times
        if failed:
            self.failures[request] = attempt + 1
        else:
            self.failures.pop(request, None)
        emit(
            {
                "key": f"{request.namespace}/{request.name}",
                "exists": obj is not None,
                "resourceVersion": obj.resource_version if obj else "",
                "attempt": attempt,
                "startNs": start,
                "endNs": time.time_ns(),
                "parent": contexts[0].traceparent if contexts else "",
                "links": [c.traceparent for c in contexts[1:]],
                "result": "error" if failed else "ok",
            }
        )
        if failed:
            raise RuntimeError(f"failing as asked ({attempt + 1} of {fail_times})")
        return Result()


async def run(args: argparse.Namespace) -> int:
    async with grpc.aio.insecure_channel(args.informer) as channel:
        controller = (
            ControllerBuilder[Reporter]("conformance")
            .for_(CONFIGMAPS)
            .with_options(ControllerOptions(max_concurrent_reconciles=args.workers))
            .complete(Reporter)
            .new(channel)  # no API client: the driver writes nothing
        )
        task = asyncio.create_task(controller.run())
        synced = asyncio.create_task(controller.mirror.wait_synced())
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        loop.add_signal_handler(signal.SIGINT, stop.set)
        stopping = asyncio.create_task(stop.wait())
        try:
            done, _ = await asyncio.wait({task, synced}, return_when=asyncio.FIRST_COMPLETED)
            if synced in done:
                emit({"synced": True})
                await asyncio.wait({task, stopping}, return_when=asyncio.FIRST_COMPLETED)
            if task.done():
                task.result()  # the mirror's permanent error, if any
            return 0
        except MirrorError as err:
            print(f"conformance driver: {err}", file=sys.stderr)
            return 1
        finally:
            for pending in (task, synced, stopping):
                pending.cancel()
                with contextlib.suppress(asyncio.CancelledError, MirrorError):
                    await pending


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m conformance.driver",
        description="The Python runtime's driver for Steward's runtime conformance kit: "
        "reconciles ConfigMaps watched through --informer and prints one JSON line per "
        "reconcile (see conformance/README.md).",
    )
    parser.add_argument("--informer", required=True, help="the informer's host:port")
    parser.add_argument("--workers", type=int, default=2, help="concurrent reconciles (2)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    return asyncio.run(run(args))


if __name__ == "__main__":
    sys.exit(main())
