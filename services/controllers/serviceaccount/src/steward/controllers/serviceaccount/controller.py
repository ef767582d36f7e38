"""The service account controller: the ``default`` ServiceAccount (or the accounts
``--service-accounts`` names) in every active namespace, as upstream's
``serviceaccount-controller`` (pkg/controller/serviceaccount/serviceaccounts_controller.go).

# A sync
Keyed by namespace. A namespace that is gone, or whose phase is not ``Active`` (being
deleted), is left alone. In an active one, every wanted account the mirror does not hold
is created, bare (name and namespace: the API server fills in the rest). An existing
account is never updated. A create refused with ``AlreadyExists`` (someone was faster) or
because the namespace is now being deleted (a ``NamespaceTerminating`` cause) is no
failure; any other failure fails the sync (all of them in one error), and the namespace is
retried with backoff.

# Queueing
A namespace is queued when it is added or changes (upstream's ``namespaceAdded`` and
``namespaceUpdated``; not when it is deleted), and when a ServiceAccount in it is deleted
(``serviceAccountDeleted``): so a deleted ``default`` comes back. There is no resync
(upstream's handlers have none).

# What it reads
Namespaces: metadata and ``status.phase``. ServiceAccounts: metadata only (whether one of
a name exists). Both from the informer; nothing is read with direct calls.
"""

from __future__ import annotations

import argparse
import logging
import time

import steward
from steward import NAMESPACES, ApiError, Request, Resource, Result
from steward.controllers.serviceaccount.accounts import (
    DEFAULT_ACCOUNTS,
    account,
    account_names,
    ignored,
    missing,
    wanted_accounts,
)

log = logging.getLogger(__name__)

NAME = "serviceaccount"
"""The controller's name with the manager (kube-controller-manager's --controllers alias
of its serviceaccount-controller), also its work queue's name (upstream's queue is
``serviceaccount`` too)."""
WORKERS = 1
"""Namespaces synced at once: kube-controller-manager runs this controller with one worker
and no flag to change it."""
SERVICEACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount")


class SyncFailed(Exception):
    """Creates of a namespace's accounts failed (the sync is retried with backoff); the
    text lists every failure."""


def not_deleted(change: steward.Change) -> bool:
    """Upstream's namespace handlers: additions and updates, never a deletion."""
    return change.kind is not steward.ChangeKind.DELETED


def add_flags(parser: argparse.ArgumentParser) -> None:
    """The controller's own flag (upstream has the list as an option, not a flag)."""
    parser.add_argument(
        "--service-accounts",
        type=account_names,
        action="append",
        default=None,
        metavar="NAME[,NAME...]",
        help=(
            "the ServiceAccounts to ensure in every active namespace, comma-separated, the "
            "flag repeatable; given at all, it replaces the default list, so name "
            f"{','.join(DEFAULT_ACCOUNTS)} too if it is wanted "
            f"(default: {','.join(DEFAULT_ACCOUNTS)})"
        ),
    )


class ServiceAccountsReconciler:
    """Creates one namespace's missing accounts; see the module docs."""

    def __init__(self, ctx: steward.Context) -> None:
        self.mirror = ctx.mirror
        self.accounts = ctx.client(SERVICEACCOUNTS)
        self.wanted = wanted_accounts(ctx.flags.service_accounts)

    def account_deleted(self, change: steward.Change) -> list[Request]:
        """A deleted ServiceAccount queues its namespace (upstream's
        ``serviceAccountDeleted``); other changes queue nothing."""
        if change.kind is not steward.ChangeKind.DELETED:
            return []
        return [Request("", change.obj.namespace)]

    async def reconcile(self, request: Request) -> Result:
        """Sync one namespace (see the module docs)."""
        name = request.name
        started = time.monotonic()
        try:
            await self.sync(name)
        finally:
            log.debug("finished syncing namespace %s in %.3fs", name, time.monotonic() - started)
        return Result()

    async def sync(self, name: str) -> None:
        """Create the accounts namespace ``name`` lacks.

        Raises:
            SyncFailed: a create failed for another reason than upstream lets pass.
        """
        found = self.mirror.get(NAMESPACES, "", name)
        if found is None:
            return
        phase = (found.object.get("status") or {}).get("phase")
        todo = missing(
            phase, self.wanted, lambda sa: self.mirror.get(SERVICEACCOUNTS, name, sa) is not None
        )
        failures: list[str] = []
        for sa in todo:
            try:
                await self.accounts.create(account(sa, name))
            except ApiError as err:
                if ignored(err):
                    log.debug("namespace %s: create of serviceaccount %s: %s", name, sa, err)
                    continue
                failures.append(f"serviceaccount {sa}: {err}")
            else:
                log.info("namespace %s: created serviceaccount %s", name, sa)
        if failures:
            raise SyncFailed(f"namespace {name}: {'; '.join(failures)}")


CONTROLLER = (
    steward.ControllerBuilder[ServiceAccountsReconciler](NAME)
    .for_(NAMESPACES, not_deleted, metadata_only=True, fields=["status.phase"])
    .watches_changes(SERVICEACCOUNTS, ServiceAccountsReconciler.account_deleted, metadata_only=True)
    .flags(add_flags)
    .with_options(steward.ControllerOptions(max_concurrent_reconciles=WORKERS))
    .beside_upstream(None)
    .describe(
        "Steward's service account controller: the default ServiceAccount (or those "
        "--service-accounts names) in every active namespace, created when missing and "
        "again when deleted, as kube-controller-manager's serviceaccount-controller. "
        "--workers defaults to 1, as upstream runs it. Both would create the same "
        "accounts, so it must not run beside upstream's."
    )
    .complete(ServiceAccountsReconciler)
)
"""The service account controller: namespaces are the primary type; ServiceAccounts
(metadata only) are watched for deletions and read for existence."""
