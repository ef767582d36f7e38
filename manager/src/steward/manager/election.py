"""Leader election of manager replicas through one coordination.k8s.io/v1 Lease.

The semantics are client-go's ``leaderelection``: a candidate takes the Lease when it is
free (no holder), or when its record has not changed for the record's lease duration as
*this* candidate observed it (so clocks of different hosts never get compared). The
leader renews it every retry period and considers itself leader only while its last
successful renewal attempt started less than the renew deadline ago — checked at every
use through :meth:`LeaderElector.is_leader`, not only when the loop runs. On a clean stop
the leader releases the Lease (empty holder), so the next replica takes over at once.

The Lease's ``steward.io/address`` annotation carries the leader's gRPC address, so that
a replica that is not the leader can name it.

# Errors
API errors while trying are logged and retried every retry period; a leader that cannot
renew within the renew deadline stops leading (``on_stopped``) and goes back to trying.
"""

from __future__ import annotations

import asyncio
import datetime
import logging
import math
import time
from collections.abc import Awaitable, Callable
from typing import Any

from steward.kube import ApiError, ConflictError, KubeClient, NotFoundError
from steward.manager.leases import LEASES, MANAGED_BY, format_micro_time
from steward.manager.registry import Timing

log = logging.getLogger(__name__)

ADDRESS_ANNOTATION = "steward.io/address"


class LeaderElector:
    """Campaigns for the Lease ``name``; :meth:`run` blocks until cancelled.

    ``on_started`` runs when this replica becomes leader (its failure gives leadership up
    again); ``on_stopped`` runs when it stops being leader, including on release.
    """

    def __init__(
        self,
        client: KubeClient,
        namespace: str,
        name: str,
        identity: str,
        address: str,
        timing: Timing,
        on_started: Callable[[], Awaitable[None]],
        on_stopped: Callable[[], None],
    ) -> None:
        self.client = client
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.address = address
        self.timing = timing
        self.on_started = on_started
        self.on_stopped = on_stopped
        self.leader = ""
        """Identity of the leader as last observed ('' when unknown)."""
        self.leader_address = ""
        self._leading = False
        self._renewed_at = 0.0
        self._observed: tuple[str, str, str] | None = None
        self._observed_at = 0.0
        self._resource_version = ""

    @property
    def path(self) -> str:
        """The Lease's URL path."""
        return LEASES.format(namespace=self.namespace) + f"/{self.name}"

    def is_leader(self) -> bool:
        """Whether this replica leads now: it holds the Lease and renewed it in time."""
        return self._leading and time.monotonic() - self._renewed_at < self.timing.renew_deadline

    def describe_leader(self) -> str:
        """A phrase naming the leader, for UNAVAILABLE answers."""
        if not self.leader:
            return "no manager is the leader yet"
        where = f" at {self.leader_address}" if self.leader_address else ""
        return f"the leader is {self.leader}{where}"

    async def run(self) -> None:
        """Try to acquire or renew every retry period until cancelled."""
        try:
            while True:
                started = time.monotonic()
                try:
                    won = await self._try(started)
                except ApiError as err:
                    log.warning("leader election: %s", err)
                    won = False
                if won and self._leading:
                    self._renewed_at = started
                elif won:
                    self._leading = True
                    self._renewed_at = started
                    self.leader, self.leader_address = self.identity, self.address
                    log.info("became the leader (%s)", self.identity)
                    try:
                        await self.on_started()
                    except Exception as err:
                        log.exception("cannot start leading")
                        self._step_down(f"start failed: {err}")
                        await self._release()
                elif self._leading and self.leader and self.leader != self.identity:
                    self._step_down(f"{self.leader} took the Lease")
                elif self._leading and not self.is_leader():
                    self._step_down("could not renew within the renew deadline")
                await asyncio.sleep(self.timing.retry_period)
        except asyncio.CancelledError:
            if self._leading:
                self._step_down("stopping")
                await asyncio.shield(self._release())
            raise

    def _step_down(self, why: str) -> None:
        log.warning("no longer the leader: %s", why)
        self._leading = False
        self.on_stopped()

    def _lease(self, holder: str, acquire: str | None, transitions: int) -> dict[str, Any]:
        now = format_micro_time(datetime.datetime.now(datetime.UTC))
        spec: dict[str, Any] = {
            "holderIdentity": holder,
            "leaseDurationSeconds": max(1, math.ceil(self.timing.lease_duration)),
            "renewTime": now,
            "acquireTime": acquire or now,
            "leaseTransitions": transitions,
        }
        metadata: dict[str, Any] = {
            "name": self.name,
            "namespace": self.namespace,
            "labels": dict(MANAGED_BY),
            "annotations": {ADDRESS_ANNOTATION: self.address},
        }
        if self._resource_version:
            metadata["resourceVersion"] = self._resource_version
        return {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": metadata,
            "spec": spec,
        }

    async def _try(self, now: float) -> bool:
        """One acquire-or-renew attempt; True when this replica holds the Lease after it."""
        try:
            doc = await self.client.arequest("GET", self.path)
        except NotFoundError:
            self._resource_version = ""
            body = self._lease(self.identity, None, 0)
            try:
                doc = await self.client.arequest(
                    "POST", LEASES.format(namespace=self.namespace), body
                )
            except ConflictError:
                return False
            self._resource_version = str(doc["metadata"]["resourceVersion"])
            return True
        meta = doc.get("metadata") or {}
        spec = doc.get("spec") or {}
        holder = str(spec.get("holderIdentity") or "")
        self._resource_version = str(meta.get("resourceVersion") or "")
        record = (holder, str(spec.get("renewTime") or ""), self._resource_version)
        if record != self._observed:
            self._observed, self._observed_at = record, now
        self.leader = holder
        self.leader_address = str((meta.get("annotations") or {}).get(ADDRESS_ANNOTATION) or "")
        duration = float(spec.get("leaseDurationSeconds") or self.timing.lease_duration)
        if holder and holder != self.identity and now < self._observed_at + duration:
            return False
        transitions = int(spec.get("leaseTransitions") or 0)
        acquire = spec.get("acquireTime") if holder == self.identity else None
        if holder != self.identity:
            transitions += 1
        try:
            doc = await self.client.arequest(
                "PUT", self.path, self._lease(self.identity, acquire, transitions)
            )
        except ConflictError:
            return False
        self._resource_version = str(doc["metadata"]["resourceVersion"])
        self.leader, self.leader_address = self.identity, self.address
        return True

    async def _release(self) -> None:
        """Give the Lease up (empty holder, 1 s duration), so another replica takes over."""
        if not self._resource_version:
            return
        body = self._lease("", None, 0)
        body["spec"]["leaseDurationSeconds"] = 1
        body["spec"].pop("holderIdentity")
        try:
            current = await self.client.arequest("GET", self.path)
            if (current.get("spec") or {}).get("holderIdentity") != self.identity:
                return
            body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
            body["spec"]["leaseTransitions"] = current["spec"].get("leaseTransitions") or 0
            await self.client.arequest("PUT", self.path, body)
            log.info("released the leader Lease")
        except ApiError as err:
            log.warning("cannot release the leader Lease: %s", err)
