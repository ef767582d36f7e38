"""The serviceaccount-token controller: legacy token Secrets populated, and removed with
their service account, as upstream's ``TokensController``
(pkg/controller/serviceaccount/tokens_controller.go).

# Two kinds of key, one queue
Upstream has two queues (both named ``serviceaccount_tokens_service`` in its source);
here one work queue of that name holds both kinds of key:

- a service account's (``Request(namespace, name)``, the primary), queued on each of its
  changes: once the account is gone, every token Secret naming it is deleted; while it
  exists, the token Secrets naming it with another UID (a predecessor of the same name)
  are deleted. (Upstream's key carries the UID; with the name alone both cases come to
  the same deletions: a Secret whose account is gone is deleted by its own sync too.)
- a token Secret's (:class:`SecretKey`: namespace, name and UID, and the service
  account's name and UID from its annotations, as upstream's ``secretQueueKey``),
  queued on each change of a Secret of type ``kubernetes.io/service-account-token``
  that names a service account:

  - the Secret is gone (or has another UID now): its name is removed from the
    ``secrets`` of its service account, if that account exists (a fresh read and an
    update, retried on conflicts; a failure is logged, as upstream);
  - its service account does not exist (the mirror, then a fresh read; a UID that
    differs counts as not existing): the Secret is deleted (UID precondition);
  - else, if it lacks ``token`` or ``namespace`` data, or its ``ca.crt`` is not the
    root CA: the Secret is read afresh and updated with what is missing (a legacy JWT,
    :mod:`.signing`; the root CA; the namespace) and the service account's name and
    UID annotations.

A failed request raises (retried with backoff, at most ten times in a row as upstream's
``maxRetries``); a conflict or a NotFound on delete or update needs nothing more.

# What it reads
Service accounts' metadata; of Secrets, the metadata, ``type``, ``data.token`` and
``data.namespace`` of each (the informer filters selectors on names and namespaces only,
so not by type: every Secret's metadata is mirrored, no Secret's other data). Whether a
token Secret's ``ca.crt`` is current is read afresh (``ca.crt`` cannot be named in a
projection path); a Secret found complete at a resource version is not read again at
that version.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import logging
import random
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import steward
from steward import (
    SECRETS,
    SERVICE_ACCOUNTS,
    ApiError,
    ConflictError,
    NotFoundError,
    Request,
    Result,
)
from steward.controllers.serviceaccounttoken.common import (
    BY_SERVICE_ACCOUNT,
    CA_KEY,
    NAMESPACE_KEY,
    SA_NAME_KEY,
    SA_UID_KEY,
    TOKEN_KEY,
    annotations_of,
    by_service_account,
    is_token_secret,
)
from steward.controllers.serviceaccounttoken.signing import (
    Signer,
    UnusableKey,
    legacy_claims,
    load_signer_file,
    pem_certificates,
)

log = logging.getLogger(__name__)

NAME = "serviceaccount-token"
"""The controller's name with the manager (kube-controller-manager's alias of its
ServiceAccountTokenController)."""
QUEUE = "serviceaccount_tokens_service"
"""The work queue's name (its ``workqueue_*`` metrics' ``name`` label): upstream gives
both of its queues this name."""
WORKERS = 5
"""Keys synced at once (``--concurrent-serviceaccount-token-syncs``)."""
MAX_RETRIES = 10
"""Failed syncs of a key in a row before it is dropped until its next change (upstream's
``maxRetries`` default)."""
REMOVE_REFERENCE_STEPS = 10
"""Attempts at removing a deleted Secret's name from its service account (upstream's
``RemoveTokenBackoff``: 10 steps, 100 ms with jitter 1.0)."""
SECRET_FIELDS = ("type", "data.token", "data.namespace")
"""What is read of each Secret besides its metadata."""


@dataclass(frozen=True)
class SecretKey:
    """A token Secret's key (upstream's ``secretQueueKey``): enough to find it in the
    mirror, or, once it is gone, the service account that may still list it."""

    namespace: str
    name: str
    uid: str
    sa_name: str
    sa_uid: str = ""

    def __str__(self) -> str:
        return f"secret {self.namespace}/{self.name}"


def secret_key(obj: steward.MirrorObject) -> SecretKey | None:
    """The key of a Secret, None unless it is a token Secret naming a service account
    (upstream queues those too, and drops them when it parses the key)."""
    secret = obj.object
    if not is_token_secret(secret):
        return None
    notes = annotations_of(secret)
    sa_name = notes.get(SA_NAME_KEY, "")
    if not sa_name or not obj.namespace or not obj.meta.uid:
        log.debug("secret %s/%s names no service account; skipped", obj.namespace, obj.name)
        return None
    return SecretKey(obj.namespace, obj.name, obj.meta.uid, sa_name, notes.get(SA_UID_KEY, ""))


def _decoded(data: dict[str, Any], key: str) -> bytes:
    value = data.get(key) or ""
    try:
        return base64.b64decode(value, validate=True)
    except (ValueError, TypeError):
        return value.encode() if isinstance(value, str) else b""


@dataclass(frozen=True)
class Needs:
    """What a token Secret lacks (upstream's ``secretUpdateNeeded``)."""

    ca: bool
    namespace: bool
    token: bool

    def __bool__(self) -> bool:
        return self.ca or self.namespace or self.token


def update_needed(data: dict[str, Any] | None, root_ca: bytes) -> Needs:
    """What a token Secret's ``data`` (base64 values, as the API serves them) lacks: the
    root CA (only when there is one), the namespace, the token."""
    data = data or {}
    return Needs(
        ca=bool(root_ca) and _decoded(data, CA_KEY) != root_ca,
        namespace=not _decoded(data, NAMESPACE_KEY),
        token=not _decoded(data, TOKEN_KEY),
    )


def populated(
    secret: dict[str, Any],
    needs: Needs,
    signer: Signer,
    root_ca: bytes,
    sa_name: str,
    sa_uid: str,
) -> dict[str, Any]:
    """``secret`` (a fresh read, changed in place) with what ``needs`` says filled in,
    and the service account's name and UID annotations."""
    meta = secret.setdefault("metadata", {})
    data = secret.get("data") or {}
    secret["data"] = data
    ns = meta.get("namespace", "")
    if needs.ca:
        data[CA_KEY] = base64.b64encode(root_ca).decode("ascii")
    if needs.namespace:
        data[NAMESPACE_KEY] = base64.b64encode(ns.encode()).decode("ascii")
    if needs.token:
        token = signer.sign(legacy_claims(ns, sa_name, sa_uid, meta.get("name", "")))
        data[TOKEN_KEY] = base64.b64encode(token.encode("ascii")).decode("ascii")
    notes = meta.get("annotations") or {}
    meta["annotations"] = notes
    notes[SA_NAME_KEY] = sa_name
    notes[SA_UID_KEY] = sa_uid
    return secret


def without_reference(sa: dict[str, Any], secret_name: str) -> dict[str, Any] | None:
    """``sa`` without ``secret_name`` in its ``secrets`` (changed in place); None when it
    did not list it."""
    refs = sa.get("secrets") or []
    kept = [r for r in refs if (r or {}).get("name") != secret_name]
    if len(kept) == len(refs):
        return None
    sa["secrets"] = kept
    return sa


# Flags ---------------------------------------------------------------------------------
def _private_key(path: str) -> Signer:
    try:
        return load_signer_file(path)
    except UnusableKey as err:
        raise argparse.ArgumentTypeError(f"{path}: {err}") from None


def _root_ca(path: str) -> bytes:
    try:
        pem = Path(path).read_bytes()
        pem_certificates(pem)
    except (OSError, ValueError) as err:
        raise argparse.ArgumentTypeError(f"error parsing root-ca-file at {path}: {err}") from None
    return pem


def add_flags(parser: argparse.ArgumentParser) -> None:
    """The controller's flags, named as kube-controller-manager's."""
    parser.add_argument(
        "--service-account-private-key-file",
        type=_private_key,
        required=True,
        metavar="FILE",
        help="PEM-encoded private RSA or ECDSA key that signs the legacy tokens (required: "
        "upstream does not start the controller without it)",
    )
    parser.add_argument(
        "--root-ca-file",
        type=_root_ca,
        default=None,
        metavar="FILE",
        help="PEM-encoded CA bundle put in each token Secret's ca.crt (default: the CA "
        "of the controller's kubeconfig)",
    )
    steward.add_workers_alias(parser, "--concurrent-serviceaccount-token-syncs", "keys", WORKERS)


# The controller --------------------------------------------------------------------------
class TokensReconciler:
    """Syncs service account and token Secret keys; see the module docs."""

    def __init__(self, ctx: steward.Context) -> None:
        self.mirror = ctx.mirror
        self.api = ctx.api
        self.secrets = ctx.client(SECRETS)
        self.accounts = ctx.client(SERVICE_ACCOUNTS)
        self.signer: Signer = ctx.flags.service_account_private_key_file
        root_ca: bytes | None = ctx.flags.root_ca_file
        if root_ca is None:
            ca_file = ctx.api.access.ca_file
            root_ca = Path(ca_file).read_bytes() if ca_file else b""
        self.root_ca = root_ca
        self.complete: dict[tuple[str, str], tuple[str, str]] = {}
        """Token Secrets found complete: (namespace, name) → (UID, resource version)."""

    # Queueing -------------------------------------------------------------------------
    def secret_keys(self, change: steward.Change) -> Iterable[Any]:
        """A token Secret's change queues its key as it is now (or was, once deleted)."""
        if change.kind is steward.ChangeKind.DELETED:
            self.complete.pop(change.obj.key, None)
        key = secret_key(change.obj)
        return (key,) if key is not None else ()

    # Reconcile --------------------------------------------------------------------------
    async def reconcile(self, request: Request | SecretKey) -> Result:
        if isinstance(request, SecretKey):
            return await self.sync_secret(request)
        await self.sync_service_account(request.namespace, request.name)
        return Result()

    def _tokens_of(self, namespace: str, name: str) -> list[steward.MirrorObject]:
        return self.mirror.by_index(SECRETS, BY_SERVICE_ACCOUNT, f"{namespace}/{name}")

    async def sync_service_account(self, namespace: str, name: str) -> None:
        """Delete the token Secrets of a service account that is gone (and those naming
        a predecessor of the same name, by UID)."""
        sa = self.mirror.get(SERVICE_ACCOUNTS, namespace, name)
        stale = []
        for obj in self._tokens_of(namespace, name):
            uid = annotations_of(obj.object).get(SA_UID_KEY, "")
            if sa is None or (uid and uid != sa.meta.uid):
                stale.append(obj)
        errors = []
        for obj in stale:
            log.info(
                "service account %s/%s deleted, removing token secret %s", namespace, name, obj.name
            )
            try:
                await self.delete_token(namespace, obj.name, obj.meta.uid)
            except ApiError as err:
                errors.append(f"{obj.name}: {err}")
        if errors:
            raise ApiError(
                f"deleting the token secrets of service account {namespace}/{name}: "
                + "; ".join(errors)
            )

    async def delete_token(self, namespace: str, name: str, uid: str) -> None:
        """Delete a token Secret with a UID precondition; gone or replaced is fine."""
        with contextlib.suppress(NotFoundError, ConflictError):
            await self.secrets.delete(namespace, name, uid=uid or None)

    async def service_account(
        self, namespace: str, name: str, uid: str, *, fetch: bool
    ) -> dict[str, Any] | None:
        """The service account of that name (and UID, when given): the mirror's copy,
        else (with ``fetch``) a fresh read; None when there is none."""
        cached = self.mirror.get(SERVICE_ACCOUNTS, namespace, name)
        if cached is not None and (not uid or uid == cached.meta.uid):
            return {"metadata": {"namespace": namespace, "name": name, "uid": cached.meta.uid}}
        if not fetch:
            return None
        try:
            live = await self.accounts.get(namespace, name)
        except NotFoundError:
            return None
        live_uid = (live.get("metadata") or {}).get("uid", "")
        return live if not uid or uid == live_uid else None

    async def sync_secret(self, key: SecretKey) -> Result:
        obj = self.mirror.get(SECRETS, key.namespace, key.name)
        if obj is None or obj.meta.uid != key.uid:
            await self.secret_gone(key)
            return Result()
        sa = await self.service_account(key.namespace, key.sa_name, key.sa_uid, fetch=True)
        if sa is None:
            log.info(
                "service account %s/%s does not exist, deleting token secret %s",
                key.namespace,
                key.sa_name,
                key.name,
            )
            await self.delete_token(key.namespace, key.name, key.uid)
            return Result()
        return await self.populate(key, obj, sa)

    async def secret_gone(self, key: SecretKey) -> None:
        """Remove a deleted Secret's name from its service account's ``secrets``
        (upstream's ``removeSecretReference``); failures are logged."""
        if await self.service_account(key.namespace, key.sa_name, key.sa_uid, fetch=False) is None:
            return
        for attempt in range(REMOVE_REFERENCE_STEPS):
            try:
                await self._remove_reference(key)
                return
            except ConflictError:
                jitter = random.random()  # noqa: S311 (a retry's jitter)
                await asyncio.sleep(0.1 * (1 + jitter) if attempt else 0)
            except ApiError as err:
                log.error("removing secret reference %s from %s: %s", key.name, key.sa_name, err)
                return
        log.error("removing secret reference %s from %s: too many conflicts", key.name, key.sa_name)

    async def _remove_reference(self, key: SecretKey) -> None:
        try:
            sa = await self.accounts.get(key.namespace, key.sa_name)
        except NotFoundError:
            return
        if key.sa_uid and key.sa_uid != (sa.get("metadata") or {}).get("uid"):
            return
        changed = without_reference(sa, key.name)
        if changed is None:
            return
        with contextlib.suppress(NotFoundError):
            await self.accounts.update(changed)

    async def populate(
        self, key: SecretKey, obj: steward.MirrorObject, sa: dict[str, Any]
    ) -> Result:
        """Upstream's ``generateTokenIfNeeded`` (see the module docs)."""
        if self.complete.get(obj.key) == (obj.meta.uid, obj.resource_version):
            return Result()
        try:
            live = await self.secrets.get(key.namespace, key.name)
        except NotFoundError:
            return Result()
        meta = live.get("metadata") or {}
        if meta.get("uid") != key.uid:
            return Result()  # replaced: the new one has a key of its own
        needs = update_needed(live.get("data"), self.root_ca)
        if not needs:
            self.complete[obj.key] = (key.uid, meta.get("resourceVersion", ""))
            return Result()
        sa_meta = sa.get("metadata") or {}
        body = populated(
            live, needs, self.signer, self.root_ca, sa_meta.get("name", ""), sa_meta.get("uid", "")
        )
        try:
            written = await self.secrets.update(body)
        except NotFoundError:
            return Result()  # deleted meanwhile: nothing to populate
        except ConflictError:
            return Result(requeue=True)  # changed meanwhile: look again
        self.complete[obj.key] = (
            key.uid,
            (written.get("metadata") or {}).get("resourceVersion", ""),
        )
        log.info(
            "populated token secret %s/%s (ca: %s, namespace: %s, token: %s)",
            key.namespace,
            key.name,
            needs.ca,
            needs.namespace,
            needs.token,
        )
        return Result()


CONTROLLER = (
    steward.ControllerBuilder[TokensReconciler](NAME)
    .for_(SERVICE_ACCOUNTS, metadata_only=True)
    .watches_changes(
        SECRETS, TokensReconciler.secret_keys, metadata_only=True, fields=list(SECRET_FIELDS)
    )
    .with_index(BY_SERVICE_ACCOUNT, by_service_account)
    .flags(add_flags)
    .with_options(
        steward.ControllerOptions(
            max_concurrent_reconciles=WORKERS, max_retries=MAX_RETRIES, queue_name=QUEUE
        )
    )
    .beside_upstream(None)
    .describe(
        "Steward's serviceaccount-token controller: Secrets of type "
        "kubernetes.io/service-account-token naming a service account get a legacy token "
        "signed with --service-account-private-key-file, the root CA and the namespace, "
        "and are deleted with their service account, as kube-controller-manager's "
        "serviceaccount-token. --workers (or --concurrent-serviceaccount-token-syncs) "
        "defaults to 5. Both would sign the same Secrets, so it must not run beside "
        "upstream's."
    )
    .complete(TokensReconciler)
)
"""The serviceaccount-token controller: service accounts are the primary type, token
Secrets the other key kind."""
