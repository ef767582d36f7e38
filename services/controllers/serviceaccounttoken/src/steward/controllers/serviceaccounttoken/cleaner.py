"""The legacy-service-account-token-cleaner controller: auto-generated legacy tokens
unused for a clean-up period are labelled invalid, then deleted a period later, as
upstream's ``LegacySATokenCleaner``
(pkg/controller/serviceaccount/legacy_serviceaccount_token_cleaner.go). The decisions
are :mod:`.legacy`'s.

# Keys and timing
Upstream evaluates every token Secret of the cluster at start and then every 24 hours
(``DefaultCleanerSyncInterval``, not a flag). Here a service account is the key: the
token Secrets it lists in ``secrets`` (the only ones that can be candidates: a token
counts as auto-generated when its service account lists it) are evaluated when it is
first seen (the controller's start, or its creation) and then every 24 hours, as
each sync asks to be queued again after :data:`~.legacy.SYNC_INTERVAL`. Its other
changes queue nothing, so no token is evaluated more often than upstream's.

A sync reads the kube-system ConfigMap ``kube-apiserver-legacy-service-account-token-tracking``
(only when the account lists a candidate), and does nothing more until use has been
tracked for a period. Labelling (a merge patch of the label, with the Secret's UID as a
precondition) and deleting (resource version precondition) failures are logged, as
upstream's, and looked at again at the next evaluation; a missing or malformed
ConfigMap, too.

# What it reads
Service accounts' metadata and ``secrets``; every Secret's metadata and ``type``; of
every pod, the paths that name Secrets (:data:`~.legacy.POD_FIELDS`), indexed by the
Secrets they use.
"""

from __future__ import annotations

import argparse
import logging
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any

import steward
from steward import (
    CONFIGMAPS,
    PODS,
    SECRETS,
    SERVICE_ACCOUNTS,
    ApiError,
    ConflictError,
    NotFoundError,
    Request,
    Result,
    utc_now,
)
from steward.controllers.serviceaccounttoken.common import (
    SA_NAME_KEY,
    SA_UID_KEY,
    annotations_of,
    is_token_secret,
)
from steward.controllers.serviceaccounttoken.legacy import (
    DEFAULT_PERIOD,
    INVALID_SINCE_LABEL,
    POD_FIELDS,
    SYNC_INTERVAL,
    TRACKING_CONFIGMAP,
    TRACKING_KEY,
    Action,
    evaluate,
    pod_secret_names,
    tracked_long_enough,
)
from steward.runtime.times import go_duration

log = logging.getLogger(__name__)

NAME = "legacy-service-account-token-cleaner"
"""The controller's name with the manager (kube-controller-manager's alias), also its
work queue's name (upstream's cleaner has no queue)."""
BY_SECRET = "pods-by-secret"  # noqa: S105 (an index name)
"""The mirror's index of pods by the Secrets they use (``namespace/name``)."""


def _pods_by_secret(obj: steward.MirrorObject) -> Iterable[str]:
    if obj.type != PODS:
        return ()
    return [f"{obj.namespace}/{name}" for name in pod_secret_names(obj.object)]


def first_seen(change: steward.Change) -> bool:
    """Only a service account's appearance queues it; its syncs queue it again."""
    return change.kind is steward.ChangeKind.ADDED


def _period(text: str) -> timedelta:
    try:
        period = go_duration(text)
    except ValueError as err:
        raise argparse.ArgumentTypeError(str(err)) from None
    if not period > timedelta(0):
        raise argparse.ArgumentTypeError(f"invalid CleanUpPeriod: {text}")
    return period


def add_flags(parser: argparse.ArgumentParser) -> None:
    """The cleaner's flag, named and defaulted as kube-controller-manager's."""
    parser.add_argument(
        "--legacy-service-account-token-clean-up-period",
        type=_period,
        default=DEFAULT_PERIOD,
        metavar="DURATION",
        help="the period of time since the last usage of a legacy service account token "
        "before it can be deleted (a Go duration, default 8760h0m0s)",
    )


class CleanerReconciler:
    """Evaluates the legacy tokens one service account lists; see the module docs."""

    def __init__(self, ctx: steward.Context, clock: Callable[[], datetime] = utc_now) -> None:
        self.mirror = ctx.mirror
        self.secrets = ctx.client(SECRETS)
        self.configmaps = ctx.client(CONFIGMAPS)
        self.period: timedelta = ctx.flags.legacy_service_account_token_clean_up_period
        self.clock = clock

    async def reconcile(self, request: Request) -> Result:
        sa = self.mirror.get(SERVICE_ACCOUNTS, request.namespace, request.name)
        if sa is None:
            return Result()  # gone: its tokens are the tokens controller's to delete
        again = Result(requeue_after=SYNC_INTERVAL.total_seconds())
        candidates = self.listed_tokens(sa)
        if not candidates:
            return again
        now = self.clock()
        if not await self.tracked(now):
            return again
        for secret in candidates:
            await self.act(secret, now)
        return again

    def listed_tokens(self, sa: steward.MirrorObject) -> list[dict[str, Any]]:
        """The token Secrets ``sa`` lists that name it (its UID too, when they carry
        one): those its ``getServiceAccount`` and ``hasSecretReference`` let through."""
        found = []
        for ref in sa.object.get("secrets") or ():
            name = (ref or {}).get("name") or ""
            obj = self.mirror.get(SECRETS, sa.namespace, name) if name else None
            if obj is None:
                continue
            secret = obj.object
            notes = annotations_of(secret)
            if not is_token_secret(secret) or notes.get(SA_NAME_KEY, "") != sa.name:
                continue
            uid = notes.get(SA_UID_KEY, "")
            if uid and uid != sa.meta.uid:
                continue
            found.append(secret)
        return found

    async def tracked(self, now: datetime) -> bool:
        """Whether token use has been tracked for a period (upstream's
        ``latestPossibleTrackedSinceTime``); a missing or malformed ConfigMap is logged."""
        try:
            configmap = await self.configmaps.get("kube-system", TRACKING_CONFIGMAP)
        except ApiError as err:
            log.error("getting the latest possible tracked_since time: %s", err)
            return False
        since = (configmap.get("data") or {}).get(TRACKING_KEY)
        if since is None:
            log.error("configMap %s does not have since label", TRACKING_CONFIGMAP)
            return False
        try:
            return tracked_long_enough(since, now, self.period)
        except ValueError as err:
            log.error("error parsing trackedSince time %r: %s", since, err)
            return False

    def mounted(self, namespace: str, name: str) -> bool:
        return bool(self.mirror.by_index(PODS, BY_SECRET, f"{namespace}/{name}"))

    async def act(self, secret: dict[str, Any], now: datetime) -> None:
        meta = secret.get("metadata") or {}
        ns, name = meta.get("namespace", ""), meta.get("name", "")
        verdict = evaluate(
            secret, now, self.period, listed_by_account=True, mounted=self.mounted(ns, name)
        )
        if verdict.action is Action.KEEP:
            log.debug("keeping legacy token %s/%s: %s", ns, name, verdict.reason)
            return
        if verdict.action is Action.LABEL:
            log.info(
                "marking the auto-generated service account token %s/%s as invalid since %s",
                ns,
                name,
                verdict.invalid_since,
            )
            patch = {
                "kind": "Secret",
                "apiVersion": "v1",
                "metadata": {
                    "name": name,
                    "namespace": ns,
                    "uid": meta.get("uid", ""),
                    "labels": {INVALID_SINCE_LABEL: verdict.invalid_since},
                },
            }
            try:
                await self.secrets.patch(ns, name, patch, patch_type="merge")
            except ApiError as err:
                log.error("labelling legacy token secret %s/%s invalid: %s", ns, name, err)
            return
        log.info(
            "deleting the auto-generated service account token %s/%s (%s)", ns, name, verdict.reason
        )
        try:
            await self.secrets.delete(ns, name, resource_version=meta.get("resourceVersion"))
        except (ConflictError, NotFoundError):
            pass
        except ApiError as err:
            log.error("deleting legacy token secret %s/%s: %s", ns, name, err)


CONTROLLER = (
    steward.ControllerBuilder[CleanerReconciler](NAME)
    .for_(SERVICE_ACCOUNTS, first_seen, metadata_only=True, fields=["secrets"])
    .reads(SECRETS, metadata_only=True, fields=["type"])
    .reads(PODS, fields=list(POD_FIELDS))
    .with_index(BY_SECRET, _pods_by_secret)
    .flags(add_flags)
    .beside_upstream(None)
    .describe(
        "Steward's legacy-service-account-token-cleaner: auto-generated legacy service "
        "account tokens (listed by their service account, mounted by no pod) not used for "
        "--legacy-service-account-token-clean-up-period are labelled "
        "kubernetes.io/legacy-token-invalid-since, and deleted a period later, as "
        "kube-controller-manager's controller of the same name. Every token is evaluated "
        "when its service account is first seen, then every 24 hours. Both would label and "
        "delete the same Secrets, so it must not run beside upstream's."
    )
    .complete(CleanerReconciler)
)
"""The cleaner: service accounts are the primary type (each lists its candidates)."""
