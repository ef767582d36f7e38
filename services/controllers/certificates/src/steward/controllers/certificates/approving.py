"""csrapproving: kubelet client certificate requests approved after a SubjectAccessReview,
as kube-controller-manager's ``csrapproving`` (pkg/controller/certificates/approver).

# A sync
A CSR already issued, approved or denied is left alone. Else its request is parsed (a
request that does not parse fails the sync, retried with backoff) and tried against two
recognizers in turn:

1. ``selfnodeclient``: a node client request (below) whose requester is the subject's
   common name;
2. ``nodeclient``: signer ``kubernetes.io/kube-apiserver-client-kubelet``, subject
   organization exactly ``system:nodes``, common name ``system:node:…``, no SANs, usages
   exactly {digital signature, key encipherment, client auth} or {digital signature,
   client auth}.

For each recognizer that matches, a SubjectAccessReview asks whether the requester (its
user, uid, groups and extra, as the CSR records them) may ``create``
``certificatesigningrequests/<recognizer>`` in ``certificates.k8s.io``; the first allowed
appends the condition Approved (reason ``AutoApproved``, upstream's message) through the
``approval`` subresource. When some recognizer matched and none was allowed, the sync
fails (retried with backoff: the requester may be granted the permission later), as
upstream's ignorable error.
"""

from __future__ import annotations

import base64
import logging
from collections.abc import Callable, Mapping
from typing import Any

import steward
from steward import Request, Result
from steward.controllers.certificates.csr import (
    APPROVED,
    CSRS,
    ParsedRequest,
    RequestError,
    approval,
    certificate_of,
    is_node_client,
    is_self_node_client,
    parse_request,
)

log = logging.getLogger(__name__)

NAME = "csrapproving"
"""The controller's name with the manager (kube-controller-manager's alias)."""
QUEUE = "certificate"
"""The work queue's name, as kube-controller-manager's (every loop of its approver and
signers names its queue so)."""
WORKERS = 5
"""Workers (kube-controller-manager runs the approver with 5; it has no flag)."""
BACKOFF = (0.2, 1000.0)
"""A failing CSR's first and longest retry delay (upstream's certificate controller)."""
SAR_PATH = "/apis/authorization.k8s.io/v1/subjectaccessreviews"


class Recognizer:
    """One kind of request the approver knows, the permission that approves it, and the
    message it approves it with."""

    def __init__(
        self,
        subresource: str,
        recognize: Callable[[Mapping[str, Any], ParsedRequest], bool],
        message: str,
    ) -> None:
        self.subresource = subresource
        self.recognize = recognize
        self.message = message

    def attributes(self) -> dict[str, str]:
        return {
            "group": "certificates.k8s.io",
            "resource": "certificatesigningrequests",
            "verb": "create",
            "subresource": self.subresource,
            "version": "*",
        }


RECOGNIZERS = (
    Recognizer(
        "selfnodeclient",
        is_self_node_client,
        "Auto approving self kubelet client certificate after SubjectAccessReview.",
    ),
    Recognizer(
        "nodeclient",
        is_node_client,
        "Auto approving kubelet client certificate after SubjectAccessReview.",
    ),
)
"""Upstream's recognizers, in the order it tries them."""


class NotApproved(Exception):
    """A recognized CSR whose requester may not have it approved (yet): retried."""


def needs_approval(csr: Mapping[str, Any]) -> bool:
    """Neither issued nor approved nor denied."""
    if certificate_of(csr):
        return False
    approved, denied = approval(csr)
    return not (approved or denied)


def review(csr: Mapping[str, Any], recognizer: Recognizer) -> dict[str, Any]:
    """The SubjectAccessReview asking whether the CSR's requester holds ``recognizer``'s
    permission."""
    spec = csr.get("spec") or {}
    body: dict[str, Any] = {
        "apiVersion": "authorization.k8s.io/v1",
        "kind": "SubjectAccessReview",
        "spec": {"resourceAttributes": recognizer.attributes()},
    }
    for source, target in (("username", "user"), ("uid", "uid"), ("groups", "groups")):
        if spec.get(source):
            body["spec"][target] = spec[source]
    if spec.get("extra"):
        body["spec"]["extra"] = {k: list(v) for k, v in spec["extra"].items()}
    return body


def approved(csr: Mapping[str, Any], message: str) -> dict[str, Any]:
    """The CSR with the condition Approved appended (a copy)."""
    body = steward.copy_json(dict(csr))
    body["apiVersion"], body["kind"] = CSRS.api_version, CSRS.kind
    status = body.setdefault("status", {})
    status["conditions"] = [
        *(status.get("conditions") or ()),
        {"type": APPROVED, "status": "True", "reason": "AutoApproved", "message": message},
    ]
    return body


class ApprovingReconciler:
    """Approves one CSR when a recognizer and its SubjectAccessReview allow it."""

    def __init__(self, ctx: steward.Context) -> None:
        self.mirror = ctx.mirror
        self.api = ctx.api

    async def reconcile(self, request: Request) -> Result:
        found = self.mirror.get(CSRS, "", request.name)
        if found is None:
            log.debug("csr %s has been deleted", request.name)
            return Result()
        csr = found.object
        if not needs_approval(csr):
            return Result()
        try:
            parsed = parse_request(base64.b64decode((csr.get("spec") or {}).get("request") or ""))
        except (RequestError, ValueError) as err:
            raise RequestError(f"unable to parse csr {request.name!r}: {err}") from err
        tried = []
        for recognizer in RECOGNIZERS:
            if not recognizer.recognize(csr, parsed):
                continue
            tried.append(recognizer.subresource)
            answer = await self.api.arequest("POST", SAR_PATH, review(csr, recognizer))
            if (answer.get("status") or {}).get("allowed"):
                await self.api.arequest(
                    "PUT",
                    CSRS.path("", request.name, "approval"),
                    approved(csr, recognizer.message),
                )
                log.info("csr %s approved (%s)", request.name, recognizer.subresource)
                return Result()
        if tried:
            raise NotApproved(
                f"recognized csr {request.name!r} as [{' '.join(tried)}] but subject access"
                " review was not approved"
            )
        return Result()


CONTROLLER = (
    steward.ControllerBuilder[ApprovingReconciler](NAME)
    .for_(CSRS)
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
        "Steward's CSR approver: approves kubelet client CertificateSigningRequests "
        "(signer kubernetes.io/kube-apiserver-client-kubelet, O=system:nodes, "
        "CN=system:node:...) whose requester a SubjectAccessReview allows to create "
        "certificatesigningrequests/selfnodeclient or /nodeclient, as "
        "kube-controller-manager's csrapproving. --workers defaults to upstream's 5. Both "
        "would approve the same requests, so it must not run beside upstream's."
    )
    .complete(ApprovingReconciler)
)
"""The approver: CSRs are the primary (and only watched) type, whole (the approval is
written back as the object read)."""
