"""The bootstrap signer: ``kube-public/cluster-info`` signed with every bootstrap token
that may sign, as upstream's ``bootstrapsigner`` (pkg/controller/bootstrap).

# A sync
There is one key, the ConfigMap. Read from the mirror; gone, or without a ``kubeconfig``
key, it is left alone. Every bootstrap token Secret of ``kube-system`` that may sign
(:func:`~.tokens.signing_token`: well named, its id and secret present, not expired,
``usage-bootstrap-signing: "true"``) gives a detached JWS of the kubeconfig in
``jws-kubeconfig-<token id>``; the signatures of tokens that no longer sign are removed.
When anything differs the ConfigMap is updated (PUT of the mirror's copy with the new
data, as upstream's ``Update``). A conflict or a ConfigMap gone is left to the change
that caused it (its event queues the key again), as upstream; any other failure raises,
and the key is retried with backoff.

# Queueing
The ConfigMap's creation and updates (not its deletion), and every change of a bootstrap
token Secret of ``kube-system`` (created, updated, deleted) queue the ConfigMap, as
upstream's handlers ``pokeConfigMapSync``. No resync (upstream gives these handlers
none). One worker: upstream runs one loop over its queue ``bootstrap_signer_queue``.

# What it reads
The ConfigMap whole, and only it (the informer's field selector); the Secrets of
``kube-system`` projected to ``type`` and the four data keys the token is judged by
(never any other Secret's data).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import steward
from steward import CONFIGMAPS, SECRETS, ConflictError, NotFoundError, Request, Result
from steward.controllers.bootstrap.tokens import (
    CONFIGMAP_NAME,
    CONFIGMAP_NAMESPACE,
    EXPIRATION_KEY,
    ID_KEY,
    SECRET_KEY,
    SIGNING_KEY,
    TOKEN_NAMESPACE,
    SigningToken,
    is_token_secret,
    signed_data,
    signing_token,
)

log = logging.getLogger(__name__)

NAME = "bootstrapsigner"
"""The controller's name with the manager (kube-controller-manager's alias of its
bootstrap-signer-controller)."""
QUEUE = "bootstrap_signer_queue"
"""The work queue's name upstream (``workqueue_*{name="bootstrap_signer_queue"}``)."""
CLUSTER_INFO = Request(CONFIGMAP_NAMESPACE, CONFIGMAP_NAME)
SECRET_FIELDS = (
    "type",
    f"data.{ID_KEY}",
    f"data.{SECRET_KEY}",
    f"data.{EXPIRATION_KEY}",
    f"data.{SIGNING_KEY}",
)
"""What the signer reads of each Secret of kube-system."""


class SignerReconciler:
    """Signs the one ConfigMap; see the module docs."""

    def __init__(self, ctx: steward.Context) -> None:
        self.mirror = ctx.mirror
        self.configmaps = ctx.client(CONFIGMAPS)

    def poke(self, obj: steward.MirrorObject) -> list[Request]:
        """Upstream's ``pokeConfigMapSync``: a token Secret's change queues the ConfigMap."""
        return [CLUSTER_INFO]

    def tokens(self, now: datetime) -> list[SigningToken]:
        """The tokens that sign (upstream's ``getTokens``), in name order."""
        found = []
        for obj in sorted(self.mirror.objects(SECRETS), key=lambda o: o.name):
            secret = obj.object
            if obj.namespace != TOKEN_NAMESPACE or not is_token_secret(secret):
                continue
            token = signing_token(secret, now)
            if token is not None:
                found.append(token)
        return found

    async def reconcile(self, request: Request) -> Result:
        if request != CLUSTER_INFO:
            return Result()
        found = self.mirror.get(CONFIGMAPS, *CLUSTER_INFO)
        if found is None:
            return Result()
        configmap = found.object
        data = configmap.get("data") or {}
        new = signed_data(data, self.tokens(datetime.now(UTC)))
        if new is None:
            if "kubeconfig" not in data:
                log.debug("no key kubeconfig in ConfigMap %s", request)
            return Result()
        await self.update(configmap, new)
        return Result()

    async def update(self, configmap: dict[str, Any], data: dict[str, str]) -> None:
        """Upstream's ``updateConfigMap``: the ConfigMap written with ``data``; a conflict
        or NotFound is left to the event that caused it.

        Raises:
            ApiError: any other failure (retried with backoff).
        """
        body = steward.copy_json(configmap)
        body["data"] = data
        try:
            await self.configmaps.update(body)
        except (ConflictError, NotFoundError) as err:
            log.debug("ConfigMap %s not signed now: %s", CLUSTER_INFO, err)
            return
        log.info(
            "ConfigMap %s: signed with %d tokens",
            CLUSTER_INFO,
            sum(1 for k in data if k.startswith("jws-kubeconfig-")),
        )


def _token_secret(change: steward.Change) -> bool:
    return change.obj.namespace == TOKEN_NAMESPACE and is_token_secret(change.obj.object)


def _not_deleted(change: steward.Change) -> bool:
    return change.kind is not steward.ChangeKind.DELETED


CONTROLLER = (
    steward.ControllerBuilder[SignerReconciler](NAME)
    .for_(
        CONFIGMAPS,
        _not_deleted,
        field_selector=f"metadata.namespace={CONFIGMAP_NAMESPACE},metadata.name={CONFIGMAP_NAME}",
    )
    .watches(
        SECRETS,
        SignerReconciler.poke,
        _token_secret,
        field_selector=f"metadata.namespace={TOKEN_NAMESPACE}",
        fields=SECRET_FIELDS,
    )
    .with_options(steward.ControllerOptions(max_concurrent_reconciles=1, queue_name=QUEUE))
    .beside_upstream(None)
    .disabled_by_default()
    .describe(
        "Steward's bootstrap signer: the ConfigMap kube-public/cluster-info signed with "
        "every bootstrap token of kube-system that may sign (a detached HS256 JWS of its "
        "kubeconfig in jws-kubeconfig-<token id>; stale signatures removed), as "
        "kube-controller-manager's bootstrapsigner. Off unless named, as upstream's; both "
        "would write the same ConfigMap, so it must not run beside upstream's."
    )
    .complete(SignerReconciler)
)
"""The bootstrap signer: the ConfigMap is the primary type, token Secrets queue it."""
