"""One short piece of real work for each identity and certificate controller, as
:mod:`tests.deploy.exercises` has for the others (each a :class:`tests.deploy.exercises.Run`:
None when the work was done, else what did not happen; ``give_up`` ends the wait early).

They run in ``apps_cluster`` (tests/deploy/conftest.py), where none of upstream's twins of
these controllers runs, so only the controller under test can do the work: the
``default`` ServiceAccounts of other namespaces are made by the tests' stand-in
(:class:`tests.deploy.conftest.DefaultAccounts`), which leaves the namespaces labelled
:data:`STEWARD_ACCOUNTS` alone.
"""

from __future__ import annotations

import base64
import json
import random
import string
import subprocess
import time
import uuid
from functools import partial
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from steward.cluster import LocalCluster
from tests.deploy.exercises import GiveUp, _gone, _never, _poll
from tests.deploy.harness import KUBECTL

STEWARD_ACCOUNTS = "steward-deploy-test/default-account"
"""The label (value ``steward``) of a namespace whose ``default`` ServiceAccount is left
to Steward's serviceaccount controller."""

CSRS = "/apis/certificates.k8s.io/v1/certificatesigningrequests"
BINDINGS = "/apis/rbac.authorization.k8s.io/v1/clusterrolebindings"
CLUSTER_ROLES = "/apis/rbac.authorization.k8s.io/v1/clusterroles"
KUBE_SYSTEM_SECRETS = "/api/v1/namespaces/kube-system/secrets"
CLUSTER_INFO = "/api/v1/namespaces/kube-public/configmaps/cluster-info"
TRACKING = (
    "/api/v1/namespaces/kube-system/configmaps/kube-apiserver-legacy-service-account-token-tracking"
)
"""Where kube-apiserver says since when it tracks the use of legacy tokens."""
LAST_USED = "kubernetes.io/legacy-token-last-used"
INVALID_SINCE = "kubernetes.io/legacy-token-invalid-since"
SA_NAME = "kubernetes.io/service-account.name"
TOKEN_TYPE = "kubernetes.io/service-account-token"

LEGACY_CLEAN_UP_PERIOD = "--legacy-service-account-token-clean-up-period=1s"
"""The legacy token cleaner's flag its exercise needs (the default period is a year)."""


# serviceaccount -----------------------------------------------------------------------
def run_serviceaccounts(
    cluster: LocalCluster, namespace: str, *, deadline: float = 30.0, give_up: GiveUp = _never
) -> str | None:
    """A new namespace (one the stand-in leaves alone) gets its ``default``
    ServiceAccount; deleted, the account is made again.

    That uses every permission of the serviceaccount controller's role: namespaces and
    ServiceAccounts come through the informer (their list and watch; the deletion is seen
    there), the account is created (serviceaccounts create)."""
    name = f"accounts-{uuid.uuid4().hex[:6]}"
    body = {
        "apiVersion": "v1",
        "kind": "Namespace",
        "metadata": {"name": name, "labels": {STEWARD_ACCOUNTS: "steward"}},
    }
    cluster.api("POST", "/api/v1/namespaces", body, ok=(201,))
    path = f"/api/v1/namespaces/{name}/serviceaccounts/default"
    end = time.monotonic() + deadline
    missing = _poll(partial(_account_missing, cluster, path, ""), end, give_up)
    if missing:
        return f"namespace {name}: {missing}"
    first = cluster.api("GET", path)["metadata"]["uid"]
    cluster.api("DELETE", path)
    missing = _poll(partial(_account_missing, cluster, path, first), end, give_up)
    return f"namespace {name}, its default account deleted: {missing}" if missing else None


def _account_missing(cluster: LocalCluster, path: str, not_uid: str) -> str:
    found = cluster.api("GET", path, ok=(200, 404))
    if found.get("kind") != "ServiceAccount":
        return "no default ServiceAccount"
    return "not made again" if found["metadata"]["uid"] == not_uid else ""


# root-ca-cert-publisher ---------------------------------------------------------------
def run_root_ca(
    cluster: LocalCluster, namespace: str, *, deadline: float = 30.0, give_up: GiveUp = _never
) -> str | None:
    """``namespace`` gets the ConfigMap ``kube-root-ca.crt`` holding the cluster's CA;
    its data changed, the publisher writes the CA back.

    That uses every permission of the publisher's role: namespaces and ConfigMaps come
    through the informer (their list and watch), the ConfigMap is created (configmaps
    create) and written back (configmaps update)."""
    bundle = (cluster.directory / "pki" / "ca.crt").read_text()
    path = f"/api/v1/namespaces/{namespace}/configmaps/kube-root-ca.crt"
    end = time.monotonic() + deadline
    missing = _poll(partial(_bundle_missing, cluster, path, bundle), end, give_up)
    if missing:
        return f"namespace {namespace}: {missing}"
    cluster.api("PATCH", path, {"data": {"ca.crt": "not the CA"}})
    missing = _poll(partial(_bundle_missing, cluster, path, bundle), end, give_up)
    return f"{path} after its data changed: {missing}" if missing else None


def _bundle_missing(cluster: LocalCluster, path: str, bundle: str) -> str:
    found = cluster.api("GET", path, ok=(200, 404))
    if found.get("kind") != "ConfigMap":
        return "no kube-root-ca.crt"
    return "" if found.get("data") == {"ca.crt": bundle} else f"data {found.get('data')}"


# clusterrole-aggregation ----------------------------------------------------------------
def run_aggregation(
    cluster: LocalCluster, namespace: str, *, deadline: float = 30.0, give_up: GiveUp = _never
) -> str | None:
    """A ClusterRole with an aggregationRule gets the rules of the ClusterRole it selects,
    rules the controller does not hold itself.

    That uses every permission of the controller's role: ClusterRoles come through the
    informer (their list and watch), the aggregate is written by server-side apply
    (clusterroles patch) with rules beyond the writer's own (clusterroles escalate)."""
    uid = uuid.uuid4().hex[:6]
    label = f"steward-deploy-test/aggregate-{uid}"
    aggregate, selected = f"steward-deploy-test-aggregate-{uid}", f"steward-deploy-test-{uid}"
    rules = [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["get"]}]
    try:
        cluster.api(
            "POST",
            CLUSTER_ROLES,
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": aggregate},
                "aggregationRule": {"clusterRoleSelectors": [{"matchLabels": {label: "true"}}]},
            },
            ok=(201,),
        )
        cluster.api(
            "POST",
            CLUSTER_ROLES,
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "ClusterRole",
                "metadata": {"name": selected, "labels": {label: "true"}},
                "rules": rules,
            },
            ok=(201,),
        )
        end = time.monotonic() + deadline
        missing = _poll(partial(_rules_missing, cluster, aggregate, rules), end, give_up)
        return f"ClusterRole {aggregate}: {missing}" if missing else None
    finally:
        for name in (aggregate, selected):
            cluster.api("DELETE", f"{CLUSTER_ROLES}/{name}", ok=(200, 404))


def _rules_missing(cluster: LocalCluster, name: str, rules: list[dict[str, Any]]) -> str:
    found = cluster.api("GET", f"{CLUSTER_ROLES}/{name}").get("rules") or []
    return "" if found == rules else f"rules {found}"


# csrapproving, csrsigning, csrcleaner ---------------------------------------------------
def _request_pem(common_name: str, organizations: tuple[str, ...] = ()) -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    names = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    names.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    request = x509.CertificateSigningRequestBuilder().subject_name(x509.Name(names))
    pem = request.sign(key, hashes.SHA256()).public_bytes(serialization.Encoding.PEM)
    return base64.b64encode(pem).decode()


def _csr(name: str, request: str, signer: str, usages: list[str]) -> dict[str, Any]:
    return {
        "apiVersion": "certificates.k8s.io/v1",
        "kind": "CertificateSigningRequest",
        "metadata": {"name": name},
        "spec": {"request": request, "signerName": signer, "usages": usages},
    }


def _binding(name: str, role: str, group: str) -> dict[str, Any]:
    return {
        "apiVersion": "rbac.authorization.k8s.io/v1",
        "kind": "ClusterRoleBinding",
        "metadata": {"name": name},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role},
        "subjects": [{"kind": "Group", "name": group, "apiGroup": "rbac.authorization.k8s.io"}],
    }


def _create_as(
    cluster: LocalCluster, body: dict[str, Any], user: str, group: str, end: float
) -> str:
    """Create ``body`` as ``user`` of ``group`` (the admin impersonating them), again while
    a fresh binding is not in the authorizer's cache yet; '' once created."""
    said = "not tried"
    while time.monotonic() < end:
        done = subprocess.run(
            [
                KUBECTL,
                f"--kubeconfig={cluster.kubeconfig}",
                f"--as={user}",
                f"--as-group={group}",
                "create",
                "-f",
                "-",
            ],
            input=json.dumps(body),
            capture_output=True,
            text=True,
            check=False,
            timeout=60,
        )
        if done.returncode == 0:
            return ""
        said = done.stderr.strip()
        if "forbidden" not in said.lower():
            break
        time.sleep(0.25)
    return said


def _conditions(cluster: LocalCluster, name: str) -> dict[str, dict[str, Any]]:
    found = cluster.api("GET", f"{CSRS}/{name}", ok=(200, 404))
    return {c.get("type"): c for c in (found.get("status") or {}).get("conditions") or []}


def _approved_missing(cluster: LocalCluster, name: str) -> str:
    approved = _conditions(cluster, name).get("Approved") or {}
    if approved.get("status") != "True" or approved.get("reason") != "AutoApproved":
        return f"not approved (conditions {sorted(_conditions(cluster, name))})"
    return ""


def run_csr_approving(
    cluster: LocalCluster, namespace: str, *, deadline: float = 30.0, give_up: GiveUp = _never
) -> str | None:
    """A bootstrapping kubelet (a user of a group that may create CSRs and have node
    client ones approved) asks for a kubelet client certificate: the request is approved
    (AutoApproved).

    That uses every permission of the approver's role: CSRs come through the informer
    (their list and watch), the requester's right is asked with a SubjectAccessReview
    (subjectaccessreviews create), the condition is written (certificatesigningrequests/
    approval update) for the kubelet client signer (signers approve)."""
    uid = uuid.uuid4().hex[:6]
    user, group = f"system:bootstrap:{uid}", f"system:bootstrappers:steward-deploy-test-{uid}"
    name = f"steward-deploy-test-kubelet-{uid}"
    made = [
        (f"steward-deploy-test-csr-create-{uid}", "system:node-bootstrapper"),
        (
            f"steward-deploy-test-csr-nodeclient-{uid}",
            "system:certificates.k8s.io:certificatesigningrequests:nodeclient",
        ),
    ]
    try:
        for binding, role in made:
            cluster.api("POST", BINDINGS, _binding(binding, role, group), ok=(201,))
        request = _request_pem(f"system:node:node-{uid}", ("system:nodes",))
        usages = ["digital signature", "key encipherment", "client auth"]
        body = _csr(name, request, "kubernetes.io/kube-apiserver-client-kubelet", usages)
        end = time.monotonic() + deadline
        refused = _create_as(cluster, body, user, group, end)
        if refused:
            return f"the bootstrapper's CSR {name}: {refused}"
        missing = _poll(partial(_approved_missing, cluster, name), end, give_up)
        return f"the kubelet client CSR {name}: {missing}" if missing else None
    finally:
        cluster.api("DELETE", f"{CSRS}/{name}", ok=(200, 404))
        for binding, _ in made:
            cluster.api("DELETE", f"{BINDINGS}/{binding}", ok=(200, 404))


def _add_condition(cluster: LocalCluster, name: str, kind: str, updated: str | None = None) -> None:
    """Append the condition ``kind`` (Approved or Denied) as the cluster's admin."""
    condition: dict[str, Any] = {
        "type": kind,
        "status": "True",
        "reason": "ByTest",
        "message": "by the deploy test",
    }
    if updated is not None:
        condition["lastUpdateTime"] = updated
    csr = cluster.api("GET", f"{CSRS}/{name}")
    status = csr.setdefault("status", {})
    status["conditions"] = [*(status.get("conditions") or ()), condition]
    cluster.api("PUT", f"{CSRS}/{name}/approval", csr)


def _issued_missing(cluster: LocalCluster, name: str, issuer: x509.Name) -> str:
    found = cluster.api("GET", f"{CSRS}/{name}", ok=(200, 404))
    pem = (found.get("status") or {}).get("certificate")
    if not pem:
        return f"no certificate (conditions {sorted(_conditions(cluster, name))})"
    certificate = x509.load_pem_x509_certificate(base64.b64decode(pem))
    if certificate.issuer != issuer:
        return f"issued by {certificate.issuer.rfc4514_string()}, not the cluster's CA"
    return ""


def run_csr_signing(
    cluster: LocalCluster, namespace: str, *, deadline: float = 30.0, give_up: GiveUp = _never
) -> str | None:
    """An approved kube-apiserver-client CSR gets its certificate, issued by the cluster's
    CA.

    That uses every permission of the signer's role: CSRs come through the informer
    (their list and watch), the certificate is written (certificatesigningrequests/status
    update) for a built-in signer (signers sign)."""
    uid = uuid.uuid4().hex[:6]
    name = f"steward-deploy-test-client-{uid}"
    ca = x509.load_pem_x509_certificate((cluster.directory / "pki" / "ca.crt").read_bytes())
    body = _csr(
        name,
        _request_pem(f"steward-deploy-test-{uid}"),
        "kubernetes.io/kube-apiserver-client",
        ["digital signature", "client auth"],
    )
    try:
        cluster.api("POST", CSRS, body, ok=(201,))
        _add_condition(cluster, name, "Approved")
        end = time.monotonic() + deadline
        missing = _poll(partial(_issued_missing, cluster, name, ca.subject), end, give_up)
        return f"the approved CSR {name}: {missing}" if missing else None
    finally:
        cluster.api("DELETE", f"{CSRS}/{name}", ok=(200, 404))


def _hours_ago(hours: float) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() - hours * 3600))


def run_csr_cleaning(
    cluster: LocalCluster, namespace: str, *, deadline: float = 30.0, give_up: GiveUp = _never
) -> str | None:
    """A CSR denied two hours ago (past the cleaner's hour for denied requests) is deleted.

    That uses every permission of the cleaner's role: CSRs come through the informer
    (their list and watch), the old one is deleted (certificatesigningrequests delete)."""
    uid = uuid.uuid4().hex[:6]
    name = f"steward-deploy-test-denied-{uid}"
    body = _csr(
        name,
        _request_pem(f"steward-deploy-test-{uid}"),
        "kubernetes.io/kube-apiserver-client",
        ["digital signature", "client auth"],
    )
    try:
        cluster.api("POST", CSRS, body, ok=(201,))
        _add_condition(cluster, name, "Denied", updated=_hours_ago(2))
        end = time.monotonic() + deadline
        missing = _poll(partial(_gone, cluster, f"{CSRS}/{name}"), end, give_up)
        return f"the CSR {name} denied two hours ago: {missing}" if missing else None
    finally:
        cluster.api("DELETE", f"{CSRS}/{name}", ok=(200, 404))


# serviceaccount-token, legacy-service-account-token-cleaner ------------------------------
def _token_secret(name: str, account: str, labels: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "annotations": {SA_NAME: account}, "labels": labels or {}},
        "type": TOKEN_TYPE,
    }


def _populated_missing(cluster: LocalCluster, namespace: str, name: str, account: str) -> str:
    found = cluster.api("GET", f"/api/v1/namespaces/{namespace}/secrets/{name}", ok=(200, 404))
    data = found.get("data") or {}
    lacking = sorted({"token", "ca.crt", "namespace"} - set(data))
    if lacking:
        return f"Secret {name} lacks {lacking}"
    review = cluster.api(
        "POST",
        "/apis/authentication.k8s.io/v1/tokenreviews",
        {
            "apiVersion": "authentication.k8s.io/v1",
            "kind": "TokenReview",
            "spec": {"token": base64.b64decode(data["token"]).decode()},
        },
        ok=(201,),
    )
    user = ((review.get("status") or {}).get("user") or {}).get("username")
    want = f"system:serviceaccount:{namespace}:{account}"
    return "" if user == want else f"its token authenticates as {user!r}, not {want}"


def run_sa_tokens(
    cluster: LocalCluster, namespace: str, *, deadline: float = 30.0, give_up: GiveUp = _never
) -> str | None:
    """A token Secret of an existing ServiceAccount gets its token (which kube-apiserver
    accepts as the account's), ``ca.crt`` and ``namespace``; deleted, its name is removed
    from the account's ``secrets``. A token Secret of a missing account is deleted.

    That uses every permission of the tokens controller's role: ServiceAccounts and
    Secrets come through the informer (their list and watch), the Secret is read afresh
    and written (secrets get, update), the account read afresh (serviceaccounts get) and
    its reference removed (serviceaccounts update), the orphan deleted (secrets delete)."""
    base = f"/api/v1/namespaces/{namespace}"
    account = {
        "apiVersion": "v1",
        "kind": "ServiceAccount",
        "metadata": {"name": "robot"},
        "secrets": [{"name": "robot-token"}, {"name": "kept"}],
    }
    cluster.api("POST", f"{base}/serviceaccounts", account, ok=(201,))
    cluster.api("POST", f"{base}/secrets", _token_secret("robot-token", "robot"), ok=(201,))
    cluster.api("POST", f"{base}/secrets", _token_secret("orphan-token", "missing"), ok=(201,))
    end = time.monotonic() + deadline
    populated = partial(_populated_missing, cluster, namespace, "robot-token", "robot")
    missing = _poll(populated, end, give_up)
    if missing:
        return f"namespace {namespace}: {missing}"
    missing = _poll(partial(_gone, cluster, f"{base}/secrets/orphan-token"), end, give_up)
    if missing:
        return f"the token Secret of a missing account: {missing}"
    cluster.api("DELETE", f"{base}/secrets/robot-token")
    unlisted = partial(_references_missing, cluster, f"{base}/serviceaccounts/robot", ["kept"])
    missing = _poll(unlisted, end, give_up)
    return f"the account of a deleted token Secret: {missing}" if missing else None


def _references_missing(cluster: LocalCluster, path: str, want: list[str]) -> str:
    found = cluster.api("GET", path).get("secrets") or []
    names = [s.get("name") for s in found]
    return "" if names == want else f"secrets {names}, expected {want}"


def _today() -> str:
    return time.strftime("%Y-%m-%d", time.gmtime())


def _set_tracked_since(cluster: LocalCluster, since: str) -> str:
    """Say kube-apiserver has tracked legacy token use since ``since``; the date before
    ('' if none)."""
    found = cluster.api("GET", TRACKING, ok=(200, 404))
    if found.get("kind") != "ConfigMap":
        body = {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": TRACKING.rsplit("/", 1)[1]},
            "data": {"since": since},
        }
        cluster.api("POST", TRACKING.rsplit("/", 1)[0], body, ok=(201,))
        return ""
    cluster.api("PATCH", TRACKING, {"data": {"since": since}})
    previous: str = (found.get("data") or {}).get("since", "")
    return previous


def _labelled_missing(cluster: LocalCluster, path: str) -> str:
    found = cluster.api("GET", path, ok=(200, 404))
    labels = (found.get("metadata") or {}).get("labels") or {}
    return "" if labels.get(INVALID_SINCE) == _today() else f"labels {labels}"


def run_legacy_cleaning(
    cluster: LocalCluster, namespace: str, *, deadline: float = 30.0, give_up: GiveUp = _never
) -> str | None:
    """With legacy token use tracked since 2020 (and the cleaner's period a second, see
    :data:`LEGACY_CLEAN_UP_PERIOD`), an account listing two unused token Secrets made
    before it: the one unlabelled is labelled invalid since today, the one labelled
    invalid since 2020 is deleted.

    That uses every permission of the cleaner's role: the tracking ConfigMap is read
    (configmaps get, by name), accounts, Secrets and pods come through the informer (their
    list and watch), the label is written (secrets patch), the old token deleted (secrets
    delete). The tokens are made first and the account a period later: the cleaner looks
    at an account's tokens when it first sees the account, and keeps tokens younger than
    a period."""
    base = f"/api/v1/namespaces/{namespace}"
    long_ago = {LAST_USED: "2020-01-01"}
    previous = _set_tracked_since(cluster, "2020-01-01")
    try:
        stale = _token_secret("stale", "legacy", long_ago)
        invalid = _token_secret("invalid", "legacy", {**long_ago, INVALID_SINCE: "2020-01-02"})
        for secret in (stale, invalid):
            cluster.api("POST", f"{base}/secrets", secret, ok=(201,))
        time.sleep(2.0)  # both older than the period when the account appears
        account = {
            "apiVersion": "v1",
            "kind": "ServiceAccount",
            "metadata": {"name": "legacy"},
            "secrets": [{"name": "stale"}, {"name": "invalid"}],
        }
        cluster.api("POST", f"{base}/serviceaccounts", account, ok=(201,))
        end = time.monotonic() + deadline
        missing = _poll(partial(_gone, cluster, f"{base}/secrets/invalid"), end, give_up)
        if missing:
            return f"the token invalid since 2020: {missing}"
        missing = _poll(partial(_labelled_missing, cluster, f"{base}/secrets/stale"), end, give_up)
        return f"the unused token: {missing}" if missing else None
    finally:
        _set_tracked_since(cluster, previous or _today())


# bootstrapsigner, tokencleaner ----------------------------------------------------------
def _token_id() -> str:
    return "".join(random.choices(string.ascii_lowercase + string.digits, k=6))


def _bootstrap_token(token_id: str, expires_in: float) -> dict[str, Any]:
    expiration = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(time.time() + expires_in))
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": f"bootstrap-token-{token_id}"},
        "type": "bootstrap.kubernetes.io/token",
        "stringData": {
            "token-id": token_id,
            "token-secret": f"{token_id}0123456789",
            "expiration": expiration,
            "usage-bootstrap-signing": "true",
        },
    }


def _write_cluster_info(cluster: LocalCluster) -> None:
    """``kube-public/cluster-info`` holding a kubeconfig (made if missing)."""
    kubeconfig = (
        "apiVersion: v1\nkind: Config\nclusters:\n- name: ''\n  cluster:\n"
        f"    server: {cluster.state.server}\n"
    )
    found = cluster.api("GET", CLUSTER_INFO, ok=(200, 404))
    if found.get("kind") == "ConfigMap":
        if (found.get("data") or {}).get("kubeconfig"):
            return
        cluster.api("PATCH", CLUSTER_INFO, {"data": {"kubeconfig": kubeconfig}})
        return
    body = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "cluster-info"},
        "data": {"kubeconfig": kubeconfig},
    }
    cluster.api("POST", CLUSTER_INFO.rsplit("/", 1)[0], body, ok=(201,))


def _signed_missing(cluster: LocalCluster, token_id: str) -> str:
    data = cluster.api("GET", CLUSTER_INFO).get("data") or {}
    return "" if data.get(f"jws-kubeconfig-{token_id}") else f"unsigned (keys {sorted(data)})"


def run_cluster_info_signing(
    cluster: LocalCluster, namespace: str, *, deadline: float = 30.0, give_up: GiveUp = _never
) -> str | None:
    """A bootstrap token that may sign (kube-system) gets its signature of
    ``kube-public/cluster-info``.

    That uses every permission of the signer's role: Secrets and ConfigMaps come through
    the informer (their list and watch), the signature is written (configmaps update, of
    cluster-info)."""
    token_id = _token_id()
    _write_cluster_info(cluster)
    secret = f"{KUBE_SYSTEM_SECRETS}/bootstrap-token-{token_id}"
    try:
        cluster.api("POST", KUBE_SYSTEM_SECRETS, _bootstrap_token(token_id, 3600), ok=(201,))
        end = time.monotonic() + deadline
        missing = _poll(partial(_signed_missing, cluster, token_id), end, give_up)
        return f"cluster-info with the token {token_id}: {missing}" if missing else None
    finally:
        cluster.api("DELETE", secret, ok=(200, 404))


def run_token_cleaning(
    cluster: LocalCluster, namespace: str, *, deadline: float = 30.0, give_up: GiveUp = _never
) -> str | None:
    """A bootstrap token that expired a minute ago is deleted.

    That uses every permission of the cleaner's role: the Secrets of kube-system come
    through the informer (their list and watch), the expired one is deleted (secrets
    delete)."""
    token_id = _token_id()
    secret = f"{KUBE_SYSTEM_SECRETS}/bootstrap-token-{token_id}"
    try:
        cluster.api("POST", KUBE_SYSTEM_SECRETS, _bootstrap_token(token_id, -60), ok=(201,))
        end = time.monotonic() + deadline
        missing = _poll(partial(_gone, cluster, secret), end, give_up)
        return (
            f"the bootstrap token {token_id} expired a minute ago: {missing}" if missing else None
        )
    finally:
        cluster.api("DELETE", secret, ok=(200, 404))
