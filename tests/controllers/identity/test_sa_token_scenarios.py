"""Steward's serviceaccount-token controller on ``id_cluster`` (no upstream tokens
controller there): token Secrets populated with a token kube-apiserver accepts, removed
with their service account, and a deleted token's name removed from its account."""

from __future__ import annotations

from pathlib import Path

import pytest

from steward.cluster import LocalCluster
from steward.kube import KubeClient
from tests.controllers.harness import (
    Starter,
    eventually,
    stays,
    upstream_kube,
    upstream_namespace,
)
from tests.controllers.identity.satokens import (
    WITHIN,
    create,
    data_of,
    delete,
    get,
    populated,
    service_account,
    token_controllers,
    token_flags,
    token_lifecycle,
    token_namespace,
    token_review,
    token_secret,
)

__all__ = [
    "token_controllers",
    "token_namespace",
    "upstream_kube",
    "upstream_namespace",
]

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

KEY_FLAG = "--service-account-private-key-file="
NO_KEY = "Controller is disabled because there is no private key"
"""What kube-controller-manager logs when it leaves its tokens controller out."""


async def test_nothing_else_populates_tokens_here(
    id_cluster: LocalCluster, id_kube: KubeClient, token_namespace: str
) -> None:
    """The control: without Steward's controller, no one in ``id_cluster`` populates a
    token Secret (so the other tests see Steward's work alone). kube-controller-manager
    there has no signing key and said it leaves its tokens controller out (the window
    below alone would not show it: upstream's can take seconds after the plane is up)."""
    kcm = next(p for p in id_cluster.state.processes if p.name == "kube-controller-manager")
    assert not [a for a in kcm.argv if a.startswith(KEY_FLAG) and a != KEY_FLAG], kcm.argv
    said = await eventually(
        lambda: NO_KEY in Path(kcm.log).read_text(errors="replace"),
        "the tokens controller out",
        30.0,
    )
    assert said
    ns = token_namespace
    create(id_kube, ns, "serviceaccounts", service_account("idle"))
    create(id_kube, ns, "secrets", token_secret("idle-token", "idle"))
    await stays(lambda: not data_of(get(id_kube, ns, "secrets", "idle-token")), "no data", 3.0)


async def test_token_populated_authenticates_and_goes_with_its_account(
    id_cluster: LocalCluster, id_kube: KubeClient, token_namespace: str, token_controllers: Starter
) -> None:
    """The whole life of a token Secret: populated (signature, claims, kid, ca.crt and
    namespace), accepted by kube-apiserver as the service account, a Secret naming a
    missing account deleted, and the token deleted with its account."""
    token_controllers.start(*token_flags(id_cluster))
    snapshot = await token_lifecycle(id_kube, token_namespace, id_cluster)
    assert snapshot["user"]["username"] == "system:serviceaccount:NS:robot"
    assert snapshot["ca.crt is the root CA"] is True
    assert snapshot["kid is the public key's"] is True
    assert snapshot["claims"] == {
        "iss": "kubernetes/serviceaccount",
        "kubernetes.io/serviceaccount/namespace": "NS",
        "kubernetes.io/serviceaccount/secret.name": "robot-token",
        "kubernetes.io/serviceaccount/service-account.name": "robot",
        "kubernetes.io/serviceaccount/service-account.uid": "UID",
        "sub": "system:serviceaccount:NS:robot",
    }
    assert snapshot["annotations"] == {
        "kubernetes.io/service-account.name": "robot",
        "kubernetes.io/service-account.uid": "UID",
    }


async def test_deleted_token_leaves_its_account_secrets(
    id_cluster: LocalCluster, id_kube: KubeClient, token_namespace: str, token_controllers: Starter
) -> None:
    """A token Secret an account lists in ``secrets``, once deleted, is no longer listed
    (the reference removed); the other reference stays."""
    ns = token_namespace
    create(id_kube, ns, "serviceaccounts", service_account("lister", ("a-token", "keep")))
    create(id_kube, ns, "secrets", token_secret("a-token", "lister"))
    token_controllers.start(*token_flags(id_cluster))
    await eventually(lambda: populated(id_kube, ns, "a-token"), "token populated", WITHIN)
    delete(id_kube, ns, "secrets", "a-token")

    def listed() -> list[str]:
        sa = get(id_kube, ns, "serviceaccounts", "lister") or {}
        return [r["name"] for r in sa.get("secrets") or ()]

    await eventually(lambda: listed() == ["keep"], "reference removed", WITHIN)


async def test_token_of_a_predecessor_is_deleted(
    id_cluster: LocalCluster, id_kube: KubeClient, token_namespace: str, token_controllers: Starter
) -> None:
    """A token Secret annotated with another UID than its account's (a deleted account's
    of the same name) is deleted; one with the account's UID is populated and kept."""
    ns = token_namespace
    sa = create(id_kube, ns, "serviceaccounts", service_account("again"))
    uid = sa["metadata"]["uid"]
    create(id_kube, ns, "secrets", token_secret("old-token", "again", uid="0000-gone"))
    create(id_kube, ns, "secrets", token_secret("new-token", "again", uid=uid))
    token_controllers.start(*token_flags(id_cluster))
    await eventually(
        lambda: get(id_kube, ns, "secrets", "old-token") is None, "old token deleted", WITHIN
    )
    await eventually(lambda: populated(id_kube, ns, "new-token"), "new token populated", WITHIN)
    await stays(lambda: get(id_kube, ns, "secrets", "new-token") is not None, "new token kept", 2.0)


async def test_emptied_token_is_signed_again(
    id_cluster: LocalCluster, id_kube: KubeClient, token_namespace: str, token_controllers: Starter
) -> None:
    """A populated Secret whose token is removed gets a new one, valid again."""
    ns = token_namespace
    create(id_kube, ns, "serviceaccounts", service_account("refill"))
    create(id_kube, ns, "secrets", token_secret("refill-token", "refill"))
    token_controllers.start(*token_flags(id_cluster))
    secret = await eventually(lambda: populated(id_kube, ns, "refill-token"), "populated", WITHIN)
    secret["data"].pop("token")
    id_kube.request("PUT", f"/api/v1/namespaces/{ns}/secrets/refill-token", secret)
    again = await eventually(lambda: populated(id_kube, ns, "refill-token"), "refilled", WITHIN)
    review = token_review(id_kube, data_of(again)["token"].decode())
    assert review.get("authenticated") is True, review


async def test_token_lifecycle_matches_upstream(
    cluster: LocalCluster,
    upstream_kube: KubeClient,
    upstream_namespace: str,
    id_cluster: LocalCluster,
    id_kube: KubeClient,
    token_namespace: str,
    token_controllers: Starter,
) -> None:
    token_controllers.start(*token_flags(id_cluster))
    upstream = await token_lifecycle(upstream_kube, upstream_namespace, cluster)
    steward = await token_lifecycle(id_kube, token_namespace, id_cluster)
    assert steward == upstream
    assert upstream["kid is the public key's"] is True
    assert upstream["ca.crt is the root CA"] is True
