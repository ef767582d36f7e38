"""The token cleaner: expired bootstrap token Secrets of ``kube-system`` deleted, as
upstream's ``tokencleaner`` (pkg/controller/bootstrap/tokencleaner.go).

# A sync
The Secret is read from the mirror; gone, or not of type ``bootstrap.kubernetes.io/token``,
it is left alone. Expired (:func:`~.tokens.expiration`: its ``expiration`` passed, or
unparseable) it is deleted with its UID as precondition, so a Secret made again under the
same name is never taken for it; NotFound (deleted already) and Conflict (the UID
precondition failed) are no failures, as upstream. Any other failure raises and the key
is retried with backoff. Not expired but with an ``expiration``, the Secret is looked at
again when it expires.

# Queueing
A bootstrap token Secret's creation and updates queue it (upstream's handlers; its
deletion needs nothing). No resync (upstream gives the handler none). One worker, as
upstream's one loop over its queue ``token_cleaner``.

# What it reads
The Secrets of ``kube-system`` (the controller's namespace, upstream's
``TokenSecretNamespace``), projected to ``type`` and ``data.expiration``.
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime

import steward
from steward import SECRETS, ConflictError, NotFoundError, Request, Result
from steward.controllers.bootstrap.tokens import (
    EXPIRATION_KEY,
    TOKEN_NAMESPACE,
    expiration,
    is_token_secret,
)

log = logging.getLogger(__name__)

NAME = "tokencleaner"
"""The controller's name with the manager (kube-controller-manager's alias of its
token-cleaner-controller)."""
QUEUE = "token_cleaner"
"""The work queue's name upstream (``workqueue_*{name="token_cleaner"}``)."""
FIELDS = ("type", f"data.{EXPIRATION_KEY}")
"""What the cleaner reads of each Secret."""


class CleanerReconciler:
    """Deletes one expired token Secret, or looks at it again when it expires."""

    def __init__(self, ctx: steward.Context) -> None:
        self.mirror = ctx.mirror
        self.secrets = ctx.client(SECRETS)
        self.api = ctx.api

    async def reconcile(self, request: Request) -> Result:
        found = self.mirror.get(SECRETS, request.namespace, request.name)
        if found is None:
            log.debug("secret %s has been deleted", request)
            return Result()
        secret = found.object
        if request.namespace != TOKEN_NAMESPACE or not is_token_secret(secret):
            return Result()
        remaining, expired = expiration(secret, datetime.now(UTC))
        if expired:
            await self.delete(request, found.meta.uid)
            return Result()
        if remaining > 0:
            return Result(requeue_after=remaining)
        return Result()

    async def delete(self, request: Request, uid: str) -> None:
        """Upstream's delete of an expired token: with the UID as precondition.

        Raises:
            ApiError: a failure other than NotFound or Conflict (retried with backoff).
        """
        log.info("deleting expired bootstrap token secret %s", request)
        options: dict[str, object] = {"kind": "DeleteOptions", "apiVersion": "v1"}
        if uid:
            options["preconditions"] = {"uid": uid}
        try:
            await self.api.arequest(
                "DELETE", SECRETS.path(request.namespace, request.name), options
            )
        except (NotFoundError, ConflictError) as err:
            log.debug("secret %s not deleted: %s", request, err)


def _token_secret(change: steward.Change) -> bool:
    return (
        change.kind is not steward.ChangeKind.DELETED
        and change.obj.namespace == TOKEN_NAMESPACE
        and is_token_secret(change.obj.object)
    )


CONTROLLER = (
    steward.ControllerBuilder[CleanerReconciler](NAME)
    .for_(SECRETS, _token_secret, fields=FIELDS)
    .with_options(
        steward.ControllerOptions(
            max_concurrent_reconciles=1, namespace=TOKEN_NAMESPACE, queue_name=QUEUE
        )
    )
    .beside_upstream(None)
    .disabled_by_default()
    .describe(
        "Steward's token cleaner: bootstrap token Secrets of kube-system deleted once their "
        "expiration has passed (each looked at again when it expires), as "
        "kube-controller-manager's tokencleaner. It watches kube-system only (--namespace, "
        "upstream's fixed token namespace). Off unless named, as upstream's; both would "
        "delete the same Secrets, so it must not run beside upstream's."
    )
    .complete(CleanerReconciler)
)
"""The token cleaner: Secrets of kube-system are the primary (and only watched) type."""
