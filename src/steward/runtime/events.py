"""Kubernetes Events about a controller's objects, posted in the background.

:class:`EventRecorder` is what client-go's ``record.EventRecorder`` is to the upstream
controllers: ``event(obj, type, reason, message)`` returns at once, and the Event is
POSTed to the API server on its own task. Recording is best effort, never retried, and
never fails a reconcile. An Event the API server rejects is logged as a warning (at most
one line per ``warn_every`` seconds, counting the ones not logged), so a missing
``create events`` permission shows in the controller's log; an Event refused by the
controller's own write fence (it does not hold its lease) is expected and logged at
debug level only.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from steward.kube import ApiError, FencedError, KubeClient

log = logging.getLogger(__name__)


class EventRecorder:
    """Posts Events about objects of one kind (``api_version``/``kind``) as ``component``
    (``source.component``) reported by ``reporting_component``."""

    def __init__(
        self,
        api: KubeClient,
        *,
        api_version: str,
        kind: str,
        component: str,
        reporting_component: str,
        clock: Callable[[], datetime] = lambda: datetime.now(UTC),
        warn_every: float = 10.0,
    ) -> None:
        self.api = api
        self.api_version = api_version
        self.kind = kind
        self.component = component
        self.reporting_component = reporting_component
        self.clock = clock
        self.warn_every = warn_every
        self.dropped = 0
        """Events the API server did not take (for tests and metrics)."""
        self._tasks: set[asyncio.Task[None]] = set()
        self._last_warning = -float("inf")
        self._unlogged = 0

    def body(self, obj: dict[str, Any], etype: str, reason: str, message: str) -> dict[str, Any]:
        """The Event an ``event`` call posts."""
        meta = obj["metadata"]
        stamp = self.clock().astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {
                "apiVersion": self.api_version,
                "kind": self.kind,
                "name": meta["name"],
                "namespace": meta["namespace"],
                "uid": meta.get("uid", ""),
                "resourceVersion": meta.get("resourceVersion", ""),
            },
            "reason": reason,
            "message": message,
            "type": etype,
            "source": {"component": self.component},
            "reportingComponent": self.reporting_component,
            "firstTimestamp": stamp,
            "lastTimestamp": stamp,
            "count": 1,
        }

    def event(self, obj: dict[str, Any], etype: str, reason: str, message: str) -> None:
        """Record an Event on ``obj`` ("Normal" or "Warning") in the background."""
        body = self.body(obj, etype, reason, message)
        task = asyncio.get_running_loop().create_task(self._send(body))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def drain(self) -> None:
        """Wait for the Events still being sent."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def _send(self, body: dict[str, Any]) -> None:
        namespace = body["metadata"]["namespace"]
        try:
            await self.api.arequest("POST", f"/api/v1/namespaces/{namespace}/events", body)
        except FencedError:
            log.debug(
                "event %s not recorded: this instance does not hold its lease", body["reason"]
            )
        except ApiError as err:
            self.dropped += 1
            self._warn(body, err)

    def _warn(self, body: dict[str, Any], err: ApiError) -> None:
        now = time.monotonic()
        if now - self._last_warning < self.warn_every:
            self._unlogged += 1
            return
        involved = body["involvedObject"]
        more = (
            f" ({self._unlogged} more not logged since the last warning)" if self._unlogged else ""
        )
        log.warning(
            "event %s on %s %s/%s rejected, not retried: %s%s",
            body["reason"],
            self.kind,
            involved["namespace"],
            involved["name"],
            err,
            more,
        )
        self._last_warning = now
        self._unlogged = 0
