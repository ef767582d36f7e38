"""Kubernetes Events about a controller's objects, posted in the background.

:class:`EventRecorder` is what client-go's ``record.EventRecorder`` and its broadcaster are
to the upstream controllers: ``event(obj, type, reason, message)`` returns at once, and
one sender task POSTs the queued Events in order, one at a time, so that Events never take
more of the client's rate limit (``--kube-api-qps``) than one worker does. As upstream:
at most ``max_queued`` (1000) Events wait, the next ones are dropped; and each object
(with its source and the Event's type) may have 25 Events at once, then one per five
minutes (client-go's ``EventSourceObjectSpamFilter``), more being dropped. Recording is
best effort, never retried, and never fails a reconcile. An Event the API server rejects
is logged as a warning (at most one line per ``warn_every`` seconds, counting the ones
not logged), so a missing ``create events`` permission shows in the controller's log; an
Event refused by the controller's own write fence (it does not hold its lease) is
expected and logged at debug level only.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

from steward.flowcontrol import TokenBucket
from steward.kube import ApiError, FencedError, KubeClient

log = logging.getLogger(__name__)

MAX_QUEUED = 1000
"""Events that may wait to be sent (client-go's broadcaster queue); more are dropped."""
SPAM_BURST = 25
"""Events one object may have at once (client-go's spam filter burst)."""
SPAM_QPS = 1 / 300
"""Events a second one object may have after its burst (one per five minutes)."""
SPAM_KEYS = 4096
"""Objects whose spam budget is remembered."""


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
        max_queued: int = MAX_QUEUED,
        spam_burst: int = SPAM_BURST,
        spam_qps: float = SPAM_QPS,
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
        self.discarded = 0
        """Events never sent: the queue was full, or the object's spam budget spent."""
        self.max_queued = max_queued
        self._spam_burst = spam_burst
        self._spam_qps = spam_qps
        self._spam: dict[tuple[str, ...], TokenBucket] = {}
        self._queue: asyncio.Queue[dict[str, Any]] | None = None
        self._sender: asyncio.Task[None] | None = None
        self._last_warning = -float("inf")
        self._unlogged = 0

    def body(self, obj: dict[str, Any], etype: str, reason: str, message: str) -> dict[str, Any]:
        """The Event an ``event`` call posts: in the object's namespace, or, about a
        cluster-scoped object, in ``default`` (as client-go's recorder)."""
        meta = obj["metadata"]
        home = meta.get("namespace") or "default"
        stamp = self.clock().astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        return {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"generateName": f"{meta['name']}.", "namespace": home},
            "involvedObject": {
                "apiVersion": self.api_version,
                "kind": self.kind,
                "name": meta["name"],
                "namespace": meta.get("namespace", ""),
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
        involved = body["involvedObject"]
        key = (
            self.component,
            involved["apiVersion"],
            involved["kind"],
            involved["namespace"],
            involved["name"],
            involved["uid"],
            etype,
        )
        bucket = self._spam.get(key)
        if bucket is None:
            if len(self._spam) >= SPAM_KEYS:
                self._spam.clear()  # a bound, as client-go's LRU of 4096 keys
            bucket = self._spam[key] = TokenBucket(self._spam_qps, self._spam_burst)
        if bucket.reserve() > 0:
            bucket.give_back()
            self.discarded += 1
            return
        queue = self._start()
        try:
            queue.put_nowait(body)
        except asyncio.QueueFull:
            self.discarded += 1

    def _start(self) -> asyncio.Queue[dict[str, Any]]:
        if self._queue is None or self._sender is None or self._sender.done():
            self._queue = asyncio.Queue(self.max_queued)
            self._sender = asyncio.get_running_loop().create_task(self._send_all(self._queue))
        return self._queue

    async def _send_all(self, queue: asyncio.Queue[dict[str, Any]]) -> None:
        while True:
            body = await queue.get()
            try:
                await self._send(body)
            finally:
                queue.task_done()

    async def drain(self) -> None:
        """Wait for the Events still queued to be sent."""
        if self._queue is not None and self._sender is not None and not self._sender.done():
            await self._queue.join()

    async def close(self) -> None:
        """Send the Events still queued, then stop the sender (a later :meth:`event`
        starts a new one)."""
        await self.drain()
        sender, self._sender, self._queue = self._sender, None, None
        if sender is not None and not sender.done():
            sender.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sender

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
