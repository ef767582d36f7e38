"""Fixtures and scenarios of the serviceaccount-token and legacy token cleaner tests.

Steward's controllers run in this event loop, each as its own identity with only its
RBAC of ``deploy/rbac/``, against ``id_cluster``. kube-controller-manager starts its
tokens controller whatever ``--controllers`` says whenever it has a signing key; the
local control plane gives it none when its ``serviceaccount-token`` is off, as in
``id_cluster`` (``steward.cluster.controller_manager``), so there the token Secrets are
left to Steward's (and the cleaner's Secrets unchanged by anyone else while it looks at
them); ``test_nothing_else_populates_tokens_here`` checks it. The tokens controller is
given the plane's own service account signing key and CA (its state directory's
``pki/sa.key`` and ``pki/ca.crt``, the files kube-controller-manager is given
elsewhere), so kube-apiserver accepts what it signs. The session's ``cluster`` (every
upstream controller on) is the reference side of the differential tests.

Namespaces here are made directly (:func:`plain_namespace`): ``id_cluster`` has no
serviceaccount controller, so no namespace there gets its ``default`` ServiceAccount.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import datetime
import json
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, padding, rsa
from cryptography.hazmat.primitives.asymmetric.utils import encode_dss_signature

from steward.cluster import LocalCluster
from steward.controllers.serviceaccounttoken import cleaner, tokens
from steward.controllers.serviceaccounttoken.signing import key_id
from steward.kube import KubeClient, NotFoundError
from tests.controllers.harness import (
    Starter,
    controllers,
    drop_namespace,
    eventually,
    in_loop_informer,
    stays,
)
from tests.controllers.identity.kcm import controller_manager

TOKEN_TYPE = "kubernetes.io/service-account-token"
WITHIN = 60.0
"""Seconds a side may take to reach a scenario's point (a deadline, not a measurement)."""


# The cluster's PKI -----------------------------------------------------------------------
def pki(plane: LocalCluster, name: str) -> Path:
    """A file of the plane's PKI (``sa.key``, ``sa.pub``, ``ca.crt``)."""
    return plane.directory / "pki" / name


def token_flags(plane: LocalCluster) -> tuple[str, ...]:
    """The tokens controller's flags as kube-controller-manager is given them."""
    return (
        f"--service-account-private-key-file={pki(plane, 'sa.key')}",
        f"--root-ca-file={pki(plane, 'ca.crt')}",
    )


# Namespaces and controllers -------------------------------------------------------------
def plain_namespace(kube: KubeClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """For a fixture to yield from: a fresh namespace (not waiting for a default
    ServiceAccount), dropped after."""
    base = request.node.name.lower().replace("_", "-")
    name = "".join(c for c in base if c.isalnum() or c == "-")[:40].strip("-")
    name = f"{name}-{uuid.uuid4().hex[:6]}"
    kube.request("POST", "/api/v1/namespaces", {"metadata": {"name": name}})
    try:
        yield name
    finally:
        drop_namespace(kube, name)


@pytest.fixture
def token_namespace(id_kube: KubeClient, request: pytest.FixtureRequest) -> Iterator[str]:
    """A fresh namespace of ``id_cluster``."""
    yield from plain_namespace(id_kube, request)


@pytest_asyncio.fixture
async def token_controllers(id_cluster: LocalCluster) -> AsyncIterator[Starter]:
    """A starter of Steward's serviceaccount-token controller over every namespace of
    ``id_cluster``, as ``steward:controller:serviceaccount-token``."""
    identity = id_cluster.component_kubeconfig("controller-serviceaccount-token")
    async with (
        in_loop_informer(id_cluster) as informer,
        controllers(tokens.CONTROLLER, identity, informer, "", workers=5) as starter,
    ):
        yield starter


@pytest_asyncio.fixture
async def cleaner_controllers(id_cluster: LocalCluster) -> AsyncIterator[Starter]:
    """A starter of Steward's legacy-service-account-token-cleaner over every namespace
    of ``id_cluster``, as ``steward:controller:legacy-service-account-token-cleaner``."""
    identity = id_cluster.component_kubeconfig("controller-legacy-service-account-token-cleaner")
    async with (
        in_loop_informer(id_cluster) as informer,
        controllers(cleaner.CONTROLLER, identity, informer, "", workers=2) as starter,
    ):
        yield starter


# Objects --------------------------------------------------------------------------------
def service_account(name: str, secrets: tuple[str, ...] = ()) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": name},
    }
    if secrets:
        body["secrets"] = [{"name": s} for s in secrets]
    return body


def token_secret(
    name: str, sa: str, *, uid: str = "", labels: dict[str, str] | None = None
) -> dict[str, Any]:
    notes = {"kubernetes.io/service-account.name": sa}
    if uid:
        notes["kubernetes.io/service-account.uid"] = uid
    meta: dict[str, Any] = {"name": name, "annotations": notes}
    if labels:
        meta["labels"] = labels
    return {"apiVersion": "v1", "kind": "Secret", "type": TOKEN_TYPE, "metadata": meta}


def create(kube: KubeClient, ns: str, plural: str, body: dict[str, Any]) -> dict[str, Any]:
    return kube.request("POST", f"/api/v1/namespaces/{ns}/{plural}", body)


def get(kube: KubeClient, ns: str, plural: str, name: str) -> dict[str, Any] | None:
    try:
        return kube.request("GET", f"/api/v1/namespaces/{ns}/{plural}/{name}")
    except NotFoundError:
        return None


def delete(kube: KubeClient, ns: str, plural: str, name: str) -> None:
    with contextlib.suppress(NotFoundError):
        kube.request("DELETE", f"/api/v1/namespaces/{ns}/{plural}/{name}")


def data_of(secret: dict[str, Any] | None) -> dict[str, bytes]:
    return {k: base64.b64decode(v) for k, v in ((secret or {}).get("data") or {}).items()}


def populated(kube: KubeClient, ns: str, name: str) -> dict[str, Any] | None:
    """The Secret once it holds a token, ca.crt and namespace."""
    secret = get(kube, ns, "secrets", name)
    return secret if {"token", "ca.crt", "namespace"} <= set(data_of(secret)) else None


def token_review(kube: KubeClient, token: str) -> dict[str, Any]:
    """What kube-apiserver says of a bearer token (a TokenReview's status)."""
    review = kube.request(
        "POST",
        "/apis/authentication.k8s.io/v1/tokenreviews",
        {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenReview", "spec": {"token": token}},
    )
    return review.get("status") or {}


# Tokens ---------------------------------------------------------------------------------
def _unb64(part: str) -> bytes:
    return base64.urlsafe_b64decode(part + "=" * (-len(part) % 4))


def decode(token: str) -> tuple[dict[str, Any], dict[str, Any]]:
    """A compact JWS's header and claims (unverified)."""
    header, payload, _ = token.split(".")
    return json.loads(_unb64(header)), json.loads(_unb64(payload))


def verify(token: str, public_key: Any) -> None:
    """Check a compact JWS's signature with ``public_key`` (RSA: RS256; ECDSA: ES256,
    ES384 or ES512 by its curve); raises ``cryptography.exceptions.InvalidSignature``."""
    header, payload, signature = token.split(".")
    signed = f"{header}.{payload}".encode("ascii")
    raw = _unb64(signature)
    if isinstance(public_key, rsa.RSAPublicKey):
        public_key.verify(raw, signed, padding.PKCS1v15(), hashes.SHA256())
        return
    assert isinstance(public_key, ec.EllipticCurvePublicKey)
    digest = {256: hashes.SHA256(), 384: hashes.SHA384(), 521: hashes.SHA512()}[
        public_key.curve.key_size
    ]
    half = len(raw) // 2
    der = encode_dss_signature(int.from_bytes(raw[:half], "big"), int.from_bytes(raw[half:], "big"))
    public_key.verify(der, signed, ec.ECDSA(digest))


def public_key_of(plane: LocalCluster) -> Any:
    """The plane's service account public key (``pki/sa.pub``)."""
    pem = pki(plane, "sa.pub").read_bytes()
    return serialization.load_pem_public_key(pem)


# Scenario --------------------------------------------------------------------------------
async def token_lifecycle(kube: KubeClient, ns: str, plane: LocalCluster) -> dict[str, Any]:
    """A service account, a token Secret for it and one for a service account that does
    not exist: the first is populated (its token checked against the plane's own public
    key and by a TokenReview), the second deleted; then the service account is deleted
    and its token Secret with it. What each step showed, masked where the sides must
    differ (names, UIDs, certificate bytes), for the two sides to compare."""
    sa = create(kube, ns, "serviceaccounts", service_account("robot"))
    sa_uid = sa["metadata"]["uid"]
    create(kube, ns, "secrets", token_secret("robot-token", "robot"))
    create(kube, ns, "secrets", token_secret("orphan-token", "nobody"))
    secret = await eventually(lambda: populated(kube, ns, "robot-token"), "token populated", WITHIN)
    data = data_of(secret)
    token = data["token"].decode()
    verify(token, public_key_of(plane))
    header, claims = decode(token)
    review = token_review(kube, token)
    assert review.get("authenticated") is True, review
    await eventually(
        lambda: get(kube, ns, "secrets", "orphan-token") is None, "orphan deleted", WITHIN
    )
    meta = secret["metadata"]
    snapshot = {
        "type": secret["type"],
        "data keys": sorted(data),
        "namespace": data["namespace"].decode().replace(ns, "NS"),
        "ca.crt is the root CA": data["ca.crt"] == pki(plane, "ca.crt").read_bytes(),
        "labels": meta.get("labels") or {},
        "annotations": {
            k: v.replace(sa_uid, "UID") for k, v in (meta.get("annotations") or {}).items()
        },
        "header keys": sorted(header),
        "alg": header["alg"],
        "kid is the public key's": header.get("kid") == key_id(public_key_of(plane)),
        "claims": {
            k: (v.replace(sa_uid, "UID").replace(ns, "NS") if isinstance(v, str) else v)
            for k, v in claims.items()
        },
        "user": {
            "username": review["user"]["username"].replace(ns, "NS"),
            "groups": sorted(g.replace(ns, "NS") for g in review["user"].get("groups") or ()),
        },
    }
    delete(kube, ns, "serviceaccounts", "robot")
    await eventually(
        lambda: get(kube, ns, "secrets", "robot-token") is None, "token deleted with its SA", WITHIN
    )
    return snapshot


def today() -> str:
    return time.strftime("%Y-%m-%d", time.gmtime())


TRACKING = (
    "/api/v1/namespaces/kube-system/configmaps/kube-apiserver-legacy-service-account-token-tracking"
)
"""The ConfigMap where kube-apiserver says since when it tracks legacy token use."""


def set_tracked_since(kube: KubeClient, since: str) -> str:
    """Say token use has been tracked since ``since`` (a date); the previous date."""
    from tests.controllers.harness import update

    previous = ""

    def change(configmap: dict[str, Any]) -> None:
        nonlocal previous
        previous = (configmap.get("data") or {}).get("since", "")
        configmap.setdefault("data", {})["since"] = since

    update(kube, TRACKING, change, "the tracking ConfigMap kept conflicting")
    return previous


@pytest.fixture
def tracked_long_ago(id_kube: KubeClient) -> Iterator[None]:
    """``id_cluster`` has tracked legacy token use since 2020-01-01 while the test runs."""
    previous = set_tracked_since(id_kube, "2020-01-01")
    try:
        yield
    finally:
        set_tracked_since(id_kube, previous or today())


def labels_of(kube: KubeClient, ns: str, name: str) -> dict[str, str] | None:
    """A Secret's labels ({} without), None once it is gone."""
    secret = get(kube, ns, "secrets", name)
    return None if secret is None else (secret["metadata"].get("labels") or {})


def pod_using(name: str, sa: str, secret: str) -> dict[str, Any]:
    """A pod (never scheduled: no node fits it) that mounts ``secret``."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "serviceAccountName": sa,
            "automountServiceAccountToken": False,
            "nodeSelector": {"steward.test/nowhere": "true"},
            "containers": [{"name": "c", "image": "fake"}],
            "volumes": [{"name": "token", "secret": {"secretName": secret}}],
        },
    }


# The legacy cleaner against upstream's ---------------------------------------------------
LAST_USED = "kubernetes.io/legacy-token-last-used"
INVALID_SINCE = "kubernetes.io/legacy-token-invalid-since"
LONG_AGO = "2020-01-02"
FUTURE = "2999-01-01"
HOLD = "steward.test/hold"
"""A finalizer that keeps a deleted Secret (with its deletionTimestamp) for the test."""
DAY = "<the day it ran>"
"""What a date the cleaner wrote is masked as (see :func:`legacy_snapshot`)."""
ACCOUNTS = ("legacy", "other")
"""The scenario's service accounts: ``legacy`` lists the cases that are ``listed``,
``other`` lists nothing."""


@dataclass(frozen=True)
class LegacyCase:
    """One Secret of the cleaner's scenario and what upstream's rules do with it."""

    outcome: str
    """``kept`` (unchanged), ``labelled`` (invalid since the day it ran) or ``deleted``."""
    labels: dict[str, str] = field(default_factory=dict)
    account: str = "legacy"
    """The service account its annotation names (kube-apiserver requires one of a
    token Secret)."""
    listed: bool = True
    """Whether ``legacy`` lists it in ``secrets``."""
    uid: str = ""
    """Its service account UID annotation: ``own`` is ``legacy``'s UID on that side."""
    type: str = TOKEN_TYPE
    used_by: str = ""
    """How the scenario's pod uses it (:func:`pod_using_all`), if it does."""
    deleting: bool = False
    """Deleted by the test first, held by :data:`HOLD`."""


def legacy_cases(today: str) -> dict[str, LegacyCase]:
    """The Secrets of the cleaner's scenario, with dates relative to ``today`` (a
    clean-up period of one second: a date before ``today`` is more than a period ago).
    Every kept Secret but ``recent`` and the two ``*-future`` ones is labelled invalid
    long ago, so that the rule that keeps it is all that does."""
    yesterday = (datetime.date.fromisoformat(today) - datetime.timedelta(days=1)).isoformat()
    old = {LAST_USED: "2020-01-01", INVALID_SINCE: LONG_AGO}
    return {
        # Use.
        "recent": LegacyCase("kept", {LAST_USED: today}),
        "used-yesterday": LegacyCase("labelled", {LAST_USED: yesterday}),
        "unused": LegacyCase("labelled", {LAST_USED: "2020-01-01"}),
        "never-used": LegacyCase("labelled"),
        "used-future": LegacyCase("kept", {LAST_USED: FUTURE, INVALID_SINCE: LONG_AGO}),
        "used-malformed": LegacyCase("kept", {LAST_USED: "yesterday", INVALID_SINCE: LONG_AGO}),
        # Invalid since.
        "expired": LegacyCase("deleted", old),
        "invalid-yesterday": LegacyCase("deleted", {INVALID_SINCE: yesterday}),
        "invalid-today": LegacyCase("kept", {INVALID_SINCE: today}),
        "invalid-future": LegacyCase("kept", {INVALID_SINCE: FUTURE}),
        "invalid-malformed": LegacyCase("labelled", {INVALID_SINCE: "soon"}),
        # Whose token.
        "own-uid": LegacyCase("deleted", old, uid="own"),
        "other-uid": LegacyCase("kept", old, uid="00000000-0000-0000-0000-000000000000"),
        "missing-account": LegacyCase("kept", old, account="ghost"),
        "unlisted": LegacyCase("kept", old, listed=False),
        "listed-for-other": LegacyCase("kept", old, account="other"),
        "not-a-token": LegacyCase("kept", old, type="Opaque"),
        "being-deleted": LegacyCase("kept", old, deleting=True),
        # Used by a pod.
        "in-volume": LegacyCase("kept", old, used_by="volume"),
        "in-projected": LegacyCase("kept", old, used_by="projected"),
        "in-init-env": LegacyCase("kept", old, used_by="env"),
        "in-image-pull": LegacyCase("kept", old, used_by="pull"),
    }


def pod_using_all(name: str, sa: str, uses: dict[str, str]) -> dict[str, Any]:
    """A pod (never scheduled) using each Secret of ``uses`` (name to how: ``volume``,
    ``projected``, ``env`` of an init container, ``pull``)."""
    pod = pod_using(name, sa, "")
    spec = pod["spec"]
    spec["volumes"] = []
    for secret, how in uses.items():
        if how == "volume":
            spec["volumes"].append({"name": "v", "secret": {"secretName": secret}})
        elif how == "projected":
            source = {"secret": {"name": secret}}
            spec["volumes"].append({"name": "p", "projected": {"sources": [source]}})
        elif how == "env":
            ref = {"secretKeyRef": {"name": secret, "key": "token"}}
            env = [{"name": "TOKEN", "valueFrom": ref}]
            spec["initContainers"] = [{"name": "i", "image": "fake", "env": env}]
        elif how == "pull":
            spec["imagePullSecrets"] = [{"name": secret}]
    return pod


def make_legacy_cases(kube: KubeClient, ns: str, cases: dict[str, LegacyCase]) -> None:
    """The scenario's service accounts, Secrets and pod in ``ns``."""
    listed = tuple(name for name, case in cases.items() if case.listed)
    legacy = create(kube, ns, "serviceaccounts", service_account("legacy", listed))
    create(kube, ns, "serviceaccounts", service_account("other"))
    for name, case in cases.items():
        uid = legacy["metadata"]["uid"] if case.uid == "own" else case.uid
        body = token_secret(name, case.account, uid=uid, labels=case.labels)
        body["type"] = case.type
        if case.deleting:
            body["metadata"]["finalizers"] = [HOLD]
        create(kube, ns, "secrets", body)
        if case.deleting:
            delete(kube, ns, "secrets", name)
    uses = {name: case.used_by for name, case in cases.items() if case.used_by}
    create(kube, ns, "pods", pod_using_all("user", "legacy", uses))


def release_held(kube: KubeClient, ns: str, cases: dict[str, LegacyCase]) -> None:
    """Remove :data:`HOLD` from the Secrets held being deleted."""
    for name, case in cases.items():
        if case.deleting:
            with contextlib.suppress(NotFoundError):
                kube.request(
                    "PATCH",
                    f"/api/v1/namespaces/{ns}/secrets/{name}",
                    {"metadata": {"finalizers": None}},
                    content_type="application/merge-patch+json",
                )


def legacy_snapshot(
    kube: KubeClient, ns: str, cases: dict[str, LegacyCase], days: set[str]
) -> dict[str, Any]:
    """What is left in ``ns``, comparable across two namespaces: each case's Secret (None:
        deleted) but its name, UID, resource version and timestamps, with ``legacy``'s UID in
        its annotation masked (each side's account has its own) and any label date in
        ``days`` (the days the side ran on: the invalid-since date a cleaner writes is its
        clock's) masked as :data:`DAY`; each service account's ``secrets``; the pods' names;
        the reasons of the Events about anything but the pod (upstream's cleaner records none;
    the scheduler records the pod's, on its own schedule)."""
    legacy = get(kube, ns, "serviceaccounts", "legacy") or {"metadata": {"uid": "?"}}
    own_uid = legacy["metadata"]["uid"]
    secrets: dict[str, Any] = {}
    for name in cases:
        secret = get(kube, ns, "secrets", name)
        if secret is None:
            secrets[name] = None
            continue
        meta = secret["metadata"]
        secrets[name] = {
            "type": secret.get("type"),
            "labels": {k: DAY if v in days else v for k, v in (meta.get("labels") or {}).items()},
            "annotations": {
                k: "<legacy's uid>" if v == own_uid else v
                for k, v in (meta.get("annotations") or {}).items()
            },
            "finalizers": meta.get("finalizers") or [],
            "being deleted": "deletionTimestamp" in meta,
            "owners": meta.get("ownerReferences") or [],
            "data": secret.get("data") or {},
        }
    accounts = {}
    for sa in ACCOUNTS:
        found = get(kube, ns, "serviceaccounts", sa)
        accounts[sa] = (
            None if found is None else [r.get("name") for r in found.get("secrets") or ()]
        )
    pods = kube.request("GET", f"/api/v1/namespaces/{ns}/pods").get("items") or ()
    events = kube.request("GET", f"/api/v1/namespaces/{ns}/events").get("items") or ()
    return {
        "secrets": secrets,
        "accounts": accounts,
        "pods": sorted(p["metadata"]["name"] for p in pods),
        "events": sorted(
            e.get("reason", "")
            for e in events
            if (e.get("involvedObject") or {}).get("kind") != "Pod"
        ),
    }


def legacy_outcomes(
    snapshot: dict[str, Any], cases: dict[str, LegacyCase], days: set[str]
) -> dict[str, str]:
    """Each case's outcome as :class:`LegacyCase` names them, read off a snapshot."""
    found = {}
    for name, case in cases.items():
        secret = snapshot["secrets"][name]
        if secret is None:
            found[name] = "deleted"
        elif secret["labels"] == {k: DAY if v in days else v for k, v in case.labels.items()}:
            found[name] = "kept"
        elif secret["labels"] == {**case.labels, INVALID_SINCE: DAY}:
            found[name] = "labelled"
        else:
            found[name] = f"changed: {secret['labels']}"
    return found


async def legacy_settled(
    kube: KubeClient, ns: str, cases: dict[str, LegacyCase], days: set[str]
) -> dict[str, Any]:
    """``ns``'s :func:`legacy_snapshot` once each case has upstream's outcome (or
    :data:`WITHIN` has passed) and nothing changed for a second more (either cleaner acts
    in one pass, upstream's over every Secret, Steward's over the account that lists them)."""
    expected = {name: case.outcome for name, case in cases.items()}

    def look() -> dict[str, Any]:
        days.add(today())
        return legacy_snapshot(kube, ns, cases, days)

    with contextlib.suppress(pytest.fail.Exception):
        await eventually(
            lambda: legacy_outcomes(look(), cases, days) == expected, "upstream's outcomes", WITHIN
        )
    settled = await asyncio.to_thread(look)
    await stays(lambda: look() == settled, "the Secrets left by the evaluation", 1.0)
    return settled


@contextlib.asynccontextmanager
async def steward_legacy_cleaner(
    plane: LocalCluster, namespace: str, *flags: str
) -> AsyncIterator[None]:
    """Steward's cleaner over ``namespace`` of ``plane`` (as its own identity) while the
    block runs, started now."""
    identity = plane.component_kubeconfig("controller-legacy-service-account-token-cleaner")
    async with (
        in_loop_informer(plane) as informer,
        controllers(cleaner.CONTROLLER, identity, informer, namespace, workers=2) as starter,
    ):
        starter.start(*flags)
        yield


@contextlib.asynccontextmanager
async def upstream_legacy_cleaner(
    plane: LocalCluster, log: Path, *flags: str
) -> AsyncIterator[None]:
    """Upstream's cleaner alone on ``plane`` (a kube-controller-manager of the test's
    own: :func:`~tests.controllers.identity.kcm.controller_manager`) while the block runs,
    started now: it evaluates every token Secret once its informers have synced (then
    every 24 hours)."""
    manager = controller_manager(plane, cleaner.NAME, log, *flags)
    manager.__enter__()  # here: the process dies with the thread that started it
    try:
        yield
    finally:
        await asyncio.to_thread(manager.__exit__, None, None, None)
