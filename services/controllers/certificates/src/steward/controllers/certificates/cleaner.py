"""csrcleaner: old CertificateSigningRequests deleted, as kube-controller-manager's
``csrcleaner`` (pkg/controller/certificates/cleaner).

# What goes
A CSR is deleted when (upstream's six rules, any of them):

- it is issued and an Approved condition was last updated more than an hour ago;
- a Denied condition was last updated more than an hour ago;
- a Failed condition was last updated more than an hour ago;
- it has no condition at all and was created more than 24 hours ago;
- it is issued, approved, and its certificate's notAfter has passed;
- it is not issued and an Approved condition was last updated more than 24 hours ago.

A condition without ``lastUpdateTime`` never counts, as upstream's zero time.

# When
Upstream lists every CSR once an hour. Here every CSR is queued at start and on each
change, and again every hour (the resync); a CSR not yet due is queued again at the
first moment one of the rules will hold for it (:func:`next_deadline`), so it goes
within a second of its deadline rather than up to an hour after.
"""

from __future__ import annotations

import base64
import binascii
import datetime
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from cryptography import x509

import steward
from steward import NotFoundError, Request, Result, parse_time, utc_now
from steward.controllers.certificates.csr import APPROVED, CSRS, DENIED, FAILED, pem_blocks

log = logging.getLogger(__name__)

NAME = "csrcleaner"
"""The controller's name with the manager (kube-controller-manager's alias), also its work
queue's name (upstream's cleaner has no queue: it polls)."""
POLLING_INTERVAL = 3600.0
"""Seconds between two looks at every CSR (upstream's ``pollingInterval``)."""
APPROVED_EXPIRATION = datetime.timedelta(hours=1)
DENIED_EXPIRATION = datetime.timedelta(hours=1)
PENDING_EXPIRATION = datetime.timedelta(hours=24)
FIELDS = ("status.conditions", "status.certificate")
"""What the cleaner reads of a CSR besides its metadata (its creationTimestamp)."""
SLACK = 1.0
"""Seconds past a deadline at which a CSR is looked at again (the rules are strict:
"older than")."""


def _issued(csr: Mapping[str, Any]) -> bool:
    return bool((csr.get("status") or {}).get("certificate"))


def not_after(csr: Mapping[str, Any]) -> datetime.datetime | None:
    """The issued certificate's notAfter (the first certificate of the first PEM block,
    upstream's ``isExpired``); None when there is none or it does not parse."""
    text = (csr.get("status") or {}).get("certificate") or ""
    try:
        pem = base64.b64decode(text)
    except (binascii.Error, ValueError):
        return None
    blocks = pem_blocks(pem)
    if not blocks:
        return None
    try:
        return x509.load_der_x509_certificate(blocks[0][1]).not_valid_after_utc
    except ValueError:
        return None


@dataclass(frozen=True)
class Verdict:
    """Whether a CSR goes now (and upstream's log line saying why), else when it will."""

    delete: bool
    reason: str = ""
    deadline: datetime.datetime | None = None


def _conditions(csr: Mapping[str, Any]) -> list[tuple[str, datetime.datetime | None]]:
    found = []
    for c in (csr.get("status") or {}).get("conditions") or ():
        found.append((c.get("type", ""), parse_time(c.get("lastUpdateTime"))))
    return found


def verdict(csr: Mapping[str, Any], now: datetime.datetime) -> Verdict:
    """Upstream's rules (see the module docs), in its order, and the earliest moment one
    will hold when none does now."""
    issued = _issued(csr)
    conditions = _conditions(csr)
    deadlines: list[tuple[datetime.datetime, str]] = []

    def rule(since: datetime.datetime | None, after: datetime.timedelta, reason: str) -> None:
        if since is not None:
            deadlines.append((since + after, reason))

    for kind, updated in conditions:
        if issued and kind == APPROVED:
            rule(updated, APPROVED_EXPIRATION, "approved, issued, more than 1h0m0s old")
    for kind, updated in conditions:
        if kind == DENIED:
            rule(updated, DENIED_EXPIRATION, "denied, more than 1h0m0s old")
    for kind, updated in conditions:
        if kind == FAILED:
            rule(updated, DENIED_EXPIRATION, "failed, more than 1h0m0s old")
    if not conditions:
        created = parse_time((csr.get("metadata") or {}).get("creationTimestamp"))
        rule(created, PENDING_EXPIRATION, "pending, more than 24h0m0s old")
    if issued and any(kind == APPROVED for kind, _ in conditions):
        expiry = not_after(csr)
        if expiry is not None:
            deadlines.append((expiry, "the certificate has expired"))
    if not issued:
        for kind, updated in conditions:
            if kind == APPROVED:
                rule(updated, PENDING_EXPIRATION, "approved but not issued for more than 24h0m0s")
    for deadline, reason in deadlines:
        if now > deadline:
            return Verdict(True, reason)
    return Verdict(False, deadline=min((d for d, _ in deadlines), default=None))


class CleanerReconciler:
    """Deletes one CSR once a rule holds for it, else looks at it again when one will."""

    def __init__(self, ctx: steward.Context) -> None:
        self.mirror = ctx.mirror
        self.csrs = ctx.client(CSRS)

    async def reconcile(self, request: Request) -> Result:
        found = self.mirror.get(CSRS, "", request.name)
        if found is None:
            return Result()
        now = utc_now()
        decided = verdict(found.object, now)
        if decided.delete:
            log.info("Cleaning CSR %s: %s", request.name, decided.reason)
            try:
                await self.csrs.delete("", request.name)
            except NotFoundError:
                pass  # gone already
            except steward.ApiError as err:
                raise steward.ApiError(f"unable to delete CSR {request.name!r}: {err}") from err
            return Result()
        if decided.deadline is None:
            return Result()
        wait = (decided.deadline - now).total_seconds() + SLACK
        # Beyond the resync the hourly look comes first; it computes the wait again.
        return Result(requeue_after=wait) if wait < POLLING_INTERVAL else Result()


CONTROLLER = (
    steward.ControllerBuilder[CleanerReconciler](NAME)
    .for_(CSRS, metadata_only=True, fields=FIELDS)
    .with_options(
        steward.ControllerOptions(max_concurrent_reconciles=1, resync_period=POLLING_INTERVAL)
    )
    .beside_upstream(None)
    .describe(
        "Steward's CSR cleaner: deletes CertificateSigningRequests denied, failed or "
        "approved and issued more than an hour ago, pending or approved and not issued for "
        "more than 24 hours, or whose certificate has expired, as kube-controller-manager's "
        "csrcleaner. Every CSR is looked at on each change, every hour (upstream's polling "
        "interval) and at its own deadline. --workers defaults to upstream's 1. It must not "
        "run beside upstream's (both would delete the same CSRs)."
    )
    .complete(CleanerReconciler)
)
"""The cleaner: CSRs are the primary (and only watched) type, their metadata, conditions
and certificate only."""
