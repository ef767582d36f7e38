"""csrsigning: approved requests of the four built-in signers issued a certificate by the
cluster's CA, as kube-controller-manager's ``csrsigning`` (pkg/controller/certificates/signer).

# Which CA signs what
Each built-in signer (``kubernetes.io/kubelet-serving``,
``kubernetes.io/kube-apiserver-client-kubelet``, ``kubernetes.io/kube-apiserver-client``,
``kubernetes.io/legacy-unknown``) signs with its own files when any per-signer flag is
given (``--cluster-signing-kubelet-serving-{cert,key}-file`` and the like; a signer
without its files then signs nothing), else all four with ``--cluster-signing-cert-file``
and ``--cluster-signing-key-file``. Giving both kinds is an error, as is a cert without
its key; with none at all nothing is signed (upstream does not start the controller). The
files are read at start (a file that does not load stops the controller) and read again
when they change (their size, modification time or inode): a changed pair that does not
load is logged and the previous one kept, as upstream's dynamic cert/key content.

# A sync
A CSR already issued, not approved (or denied), failed, or of another signer is left
alone. Else its request is parsed (one that does not parse fails the sync, retried with
backoff) and checked for its signer (:data:`~.csr.VALIDATORS`); a request the signer
refuses gets the condition Failed, reason ``SignerValidationFailure``, the check's
message, through the ``status`` subresource, and is not signed. Else the certificate
(:func:`~.csr.build_certificate`: lifetime ``--cluster-signing-duration``, or the CSR's
``spec.expirationSeconds`` when shorter but never under ten minutes; capped at the CA's
own expiry) is written to ``status.certificate`` through the ``status`` subresource.
"""

from __future__ import annotations

import argparse
import base64
import datetime
import logging
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import steward
from steward import Request, Result, format_time, utc_now
from steward.controllers.certificates.csr import (
    CSRS,
    DEFAULT_DURATION,
    FAILED,
    KUBE_APISERVER_CLIENT,
    KUBE_APISERVER_CLIENT_KUBELET,
    KUBELET_SERVING,
    LEGACY_UNKNOWN,
    VALIDATORS,
    Authority,
    RequestError,
    SigningError,
    ValidationError,
    build_certificate,
    certificate_of,
    certificate_pem,
    duration,
    has_true_condition,
    is_approved,
    load_authority,
    parse_request,
)
from steward.runtime.times import go_duration

log = logging.getLogger(__name__)

NAME = "csrsigning"
"""The controller's name with the manager (kube-controller-manager's alias)."""
QUEUE = "certificate"
"""The work queue's name, as kube-controller-manager's (every loop of its approver and
signers names its queue so)."""
WORKERS = 5
"""Workers (kube-controller-manager runs each signer's loop with 5; it has no flag)."""
BACKOFF = (0.2, 1000.0)
"""A failing CSR's first and longest retry delay (upstream's certificate controller)."""

SIGNER_FLAGS = {
    KUBELET_SERVING: "kubelet-serving",
    KUBE_APISERVER_CLIENT_KUBELET: "kubelet-client",
    KUBE_APISERVER_CLIENT: "kube-apiserver-client",
    LEGACY_UNKNOWN: "legacy-unknown",
}
"""Each signer's part of its flags' names (``--cluster-signing-<part>-{cert,key}-file``)."""
VALIDATION_NAMES = {
    KUBELET_SERVING: "cluster-signing-kubelet-serving",
    KUBE_APISERVER_CLIENT_KUBELET: "cluster-signing-kube-apiserver-client",
    KUBE_APISERVER_CLIENT: "cluster-signing-kube-apiserver",
    LEGACY_UNKNOWN: "cluster-signing-legacy-unknown",
}
"""How upstream's flag validation names each signer's pair (its own, odd, names kept)."""


class ConfigError(ValueError):
    """The signing flags contradict each other (upstream's messages)."""


# Flags ----------------------------------------------------------------------------------------


def add_flags(parser: argparse.ArgumentParser) -> None:
    """The signer's flags, named and defaulted as kube-controller-manager's."""
    parser.add_argument(
        "--cluster-signing-cert-file",
        default="",
        help="PEM-encoded X509 CA certificate used to issue cluster-scoped certificates; "
        "if given, no more specific --cluster-signing-* flag may be",
    )
    parser.add_argument(
        "--cluster-signing-key-file",
        default="",
        help="PEM-encoded RSA or ECDSA private key used to sign cluster-scoped certificates; "
        "if given, no more specific --cluster-signing-* flag may be",
    )
    for signer, part in SIGNER_FLAGS.items():
        for kind, what in (("cert", "X509 CA certificate"), ("key", "RSA or ECDSA private key")):
            parser.add_argument(
                f"--cluster-signing-{part}-{kind}-file",
                default="",
                help=f"PEM-encoded {what} for the {signer} signer; if given, "
                "--cluster-signing-{cert,key}-file must not be",
            )
    parser.add_argument(
        "--cluster-signing-duration",
        type=go_duration,
        default=DEFAULT_DURATION,
        metavar="DURATION",
        help="the longest lifetime of an issued certificate; a CSR may ask for less with "
        "spec.expirationSeconds (default 8760h0m0s)",
    )


def _attr(flag: str) -> str:
    return flag.replace("-", "_")


def signer_files(flags: Mapping[str, str]) -> dict[str, tuple[str, str]]:
    """Which (cert, key) files each signer signs with, from the flags' values (keyed by
    the flags' names without ``--``), by upstream's rules; empty: nothing is signed.

    Raises:
        ConfigError: upstream's messages, every one found.
    """
    general = (
        flags.get("cluster-signing-cert-file", ""),
        flags.get("cluster-signing-key-file", ""),
    )
    specific = {
        signer: (
            flags.get(f"cluster-signing-{part}-cert-file", ""),
            flags.get(f"cluster-signing-{part}-key-file", ""),
        )
        for signer, part in SIGNER_FLAGS.items()
    }
    errors = []
    for signer, (cert, key) in specific.items():
        if key and not cert:
            errors.append(f'"{VALIDATION_NAMES[signer]}": cannot specify key without cert')
        elif cert and not key:
            errors.append(f'"{VALIDATION_NAMES[signer]}": cannot specify cert without key')
    any_specific = any(cert or key for cert, key in specific.values())
    if any(general) and any_specific:
        errors.append(
            "cannot specify --cluster-signing-{cert,key}-file and other "
            "--cluster-signing-*-file flags at the same time"
        )
    if errors:
        raise ConfigError("; ".join(errors))
    if any_specific:
        return {signer: pair for signer, pair in specific.items() if pair[0] or pair[1]}
    if not general[0] or not general[1]:
        return {}  # upstream skips the controller: no csr cert/key was specified
    return dict.fromkeys(SIGNER_FLAGS, general)


# The CA files ---------------------------------------------------------------------------------
def _stamp(path: Path) -> tuple[int, int, int]:
    st = os.stat(path)
    return st.st_mtime_ns, st.st_size, st.st_ino


class AuthorityFiles:
    """A signer's CA, read from its files and read again when they change."""

    def __init__(self, cert: str, key: str) -> None:
        self.cert = Path(cert)
        self.key = Path(key)
        self.name = f"{cert}::{key}"
        self._stamps = (_stamp(self.cert), _stamp(self.key))
        self.authority = self._load()

    def _load(self) -> Authority:
        return load_authority(self.cert.read_bytes(), self.key.read_bytes(), self.name)

    def current(self) -> Authority:
        """The CA now: read again if either file changed since it was last read; if the
        new pair does not load, the previous one (logged)."""
        try:
            stamps = (_stamp(self.cert), _stamp(self.key))
        except OSError as err:
            log.warning("CA files %s: %s; signing with the ones read before", self.name, err)
            return self.authority
        if stamps != self._stamps:
            self._stamps = stamps
            try:
                self.authority = self._load()
                log.info("CA files %s read again", self.name)
            except (OSError, SigningError) as err:
                log.error(
                    "CA files %s changed but do not load: %s; keeping the previous", self.name, err
                )
        return self.authority


# Decisions ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Outcome:
    """What a sync writes: nothing, a Failed condition, or a certificate."""

    failed: str = ""
    certificate: bytes = b""


def failed(csr: Mapping[str, Any], message: str, now: str) -> dict[str, Any]:
    """The CSR with the condition Failed (``SignerValidationFailure``) appended (a copy)."""
    body = steward.copy_json(dict(csr))
    body["apiVersion"], body["kind"] = CSRS.api_version, CSRS.kind
    status = body.setdefault("status", {})
    status["conditions"] = [
        *(status.get("conditions") or ()),
        {
            "type": FAILED,
            "status": "True",
            "reason": "SignerValidationFailure",
            "message": message,
            "lastUpdateTime": now,
        },
    ]
    return body


def issued(csr: Mapping[str, Any], pem: bytes) -> dict[str, Any]:
    """The CSR with ``status.certificate`` set (a copy)."""
    body = steward.copy_json(dict(csr))
    body["apiVersion"], body["kind"] = CSRS.api_version, CSRS.kind
    body.setdefault("status", {})["certificate"] = base64.b64encode(pem).decode("ascii")
    return body


def wants_signing(csr: Mapping[str, Any], signers: Mapping[str, object]) -> bool:
    """Not issued, approved and not denied, not failed, and of a signer configured here."""
    if certificate_of(csr):
        return False
    if not is_approved(csr) or has_true_condition(csr, FAILED):
        return False
    return (csr.get("spec") or {}).get("signerName") in signers


def decide(
    csr: Mapping[str, Any],
    ca: Authority,
    max_duration: datetime.timedelta,
    now: datetime.datetime,
) -> Outcome:
    """Upstream's ``signer.handle`` for a CSR :func:`wants_signing`: the Failed message,
    or the certificate (PEM).

    Raises:
        RequestError: the request does not parse.
        SigningError: the certificate cannot be issued.
    """
    spec = csr.get("spec") or {}
    name = (csr.get("metadata") or {}).get("name", "")
    try:
        parsed = parse_request(base64.b64decode(spec.get("request") or ""))
    except (RequestError, ValueError) as err:
        raise RequestError(f"unable to parse csr {name!r}: {err}") from err
    usages = list(spec.get("usages") or ())
    try:
        VALIDATORS[spec["signerName"]](parsed, usages)
    except ValidationError as err:
        return Outcome(failed=str(err))
    expiration = spec.get("expirationSeconds")
    ttl = duration(max_duration, int(expiration) if expiration is not None else None)
    try:
        cert = build_certificate(ca, parsed, usages, ttl, now)
    except SigningError as err:
        raise SigningError(f"error auto signing csr: {err}") from err
    return Outcome(certificate=certificate_pem(cert))


# The controller -------------------------------------------------------------------------------
class SigningReconciler:
    """Signs one approved CSR of a configured signer, or marks it Failed."""

    def __init__(self, ctx: steward.Context) -> None:
        self.mirror = ctx.mirror
        self.api = ctx.api
        flags = vars(ctx.flags)
        files = signer_files(
            {k.replace("_", "-"): v for k, v in flags.items() if isinstance(v, str)}
        )
        self.max_duration: datetime.timedelta = flags["cluster_signing_duration"]
        loaded: dict[tuple[str, str], AuthorityFiles] = {}
        self.authorities: dict[str, AuthorityFiles] = {}
        for signer, pair in files.items():
            if pair not in loaded:
                try:
                    loaded[pair] = AuthorityFiles(*pair)
                except (OSError, SigningError) as err:
                    raise ConfigError(
                        f"failed to init {signer} certificate controller: {err}"
                    ) from err
            self.authorities[signer] = loaded[pair]
        if not self.authorities:
            log.info("Skipping CSR signing because no csr cert/key was specified")
        for signer in SIGNER_FLAGS:
            if files and signer not in files:
                log.info(
                    "Skipping CSR signer %s because specific files were specified for other "
                    "signers and not this one",
                    signer,
                )

    async def reconcile(self, request: Request) -> Result:
        found = self.mirror.get(CSRS, "", request.name)
        if found is None:
            log.debug("csr %s has been deleted", request.name)
            return Result()
        csr = found.object
        if not wants_signing(csr, self.authorities):
            return Result()
        signer = csr["spec"]["signerName"]
        outcome = decide(csr, self.authorities[signer].current(), self.max_duration, utc_now())
        path = CSRS.path("", request.name, "status")
        if outcome.failed:
            body = failed(csr, outcome.failed, format_time(utc_now()))
            try:
                await self.api.arequest("PUT", path, body)
            except steward.ApiError as err:
                raise steward.ApiError(f"error adding failure condition for csr: {err}") from err
            log.info("csr %s failed validation: %s", request.name, outcome.failed)
            return Result()
        try:
            await self.api.arequest("PUT", path, issued(csr, outcome.certificate))
        except steward.ApiError as err:
            raise steward.ApiError(f"error updating signature for csr: {err}") from err
        log.info("csr %s signed by %s", request.name, signer)
        return Result()


CONTROLLER = (
    steward.ControllerBuilder[SigningReconciler](NAME)
    .for_(CSRS)
    .flags(add_flags)
    .with_options(
        steward.ControllerOptions(
            max_concurrent_reconciles=WORKERS,
            backoff_base_seconds=BACKOFF[0],
            backoff_max_seconds=BACKOFF[1],
            queue_name=QUEUE,
        )
    )
    .beside_upstream(None)
    .describe(
        "Steward's CSR signer: issues certificates for approved CertificateSigningRequests "
        "of the built-in signers (kubernetes.io/kubelet-serving, "
        "kubernetes.io/kube-apiserver-client-kubelet, kubernetes.io/kube-apiserver-client, "
        "kubernetes.io/legacy-unknown) with the CA of --cluster-signing-cert-file/"
        "--cluster-signing-key-file or of each signer's own flags, as "
        "kube-controller-manager's csrsigning. --workers defaults to upstream's 5. Both "
        "would sign the same requests, so it must not run beside upstream's."
    )
    .complete(SigningReconciler)
)
"""The signer: CSRs are the primary (and only watched) type, whole (the status is written
back as the object read)."""
