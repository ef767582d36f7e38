"""Steward's CSR controllers alone on ``id_cluster`` (no upstream CSR controller there):
a client built from an issued certificate, the signer's per-signer files, and the
cleaner's rules with CSRs already past their deadlines (or about to be)."""

from __future__ import annotations

import asyncio
import datetime
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization

from steward.cluster import LocalCluster
from steward.kube import ClusterAccess, KubeClient, load_access
from tests.controllers.identity.csr import (
    APISERVER_CLIENT,
    CSR_PATH,
    KUBELET_SERVING,
    CsrControllers,
    add_condition,
    ago,
    ca_certificate,
    ca_files,
    call,
    csr_body,
    csr_controllers,
    delete_csr,
    ec_key,
    get_csr,
    issued_certificate,
    request_pem,
    running_controllers,
    self_signed,
    set_certificate,
    stays,
    suffix,
    until_gone,
    until_issued,
)

__all__ = ["csr_controllers", "suffix"]

pytestmark = [pytest.mark.integration, pytest.mark.asyncio]

CUSTOM_SIGNER = "example.com/steward-test"
"""A signer no controller signs for: the test plays the signer."""
HOUR = datetime.timedelta(hours=1)


async def test_client_built_from_an_issued_certificate(
    suffix: str,
    id_cluster: LocalCluster,
    id_kube: KubeClient,
    csr_controllers: CsrControllers,
    tmp_path: Path,
) -> None:
    """Upstream's e2e "should support building a client with a CSR": a
    kube-apiserver-client request for ten minutes, approved, is issued a certificate the
    API server accepts as the request's subject."""
    key = ec_key()
    name = f"csr-client-{suffix}"
    user = f"steward-e2e-{suffix}"
    pem = request_pem(key, user, ("steward-group",))
    await call(
        id_kube, "POST", CSR_PATH, csr_body(name, pem, APISERVER_CLIENT, ["client auth"], 600)
    )
    try:
        await add_condition(id_kube, name, "Approved")
        cert = issued_certificate(await until_issued(id_kube, name))
        cert.verify_directly_issued_by(ca_certificate(id_cluster))
        assert cert.not_valid_after_utc - cert.not_valid_before_utc == datetime.timedelta(
            minutes=15
        )
        cert_file, key_file = tmp_path / "client.crt", tmp_path / "client.key"
        cert_file.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        key_file.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        admin = load_access(str(id_cluster.kubeconfig))
        access = ClusterAccess(
            host=admin.host,
            ca_file=admin.ca_file,
            cert_file=str(cert_file),
            key_file=str(key_file),
            tls_server_name=admin.tls_server_name,
        )
        client = KubeClient(access, user_agent="steward-csr-test")
        try:
            review = await call(
                client,
                "POST",
                "/apis/authentication.k8s.io/v1/selfsubjectreviews",
                {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"},
            )
        finally:
            client.close()
        info = review["status"]["userInfo"]
        assert info["username"] == user
        assert "steward-group" in info["groups"]
    finally:
        delete_csr(id_kube, name)


async def test_per_signer_files(suffix: str, id_cluster: LocalCluster, id_kube: KubeClient) -> None:
    """With only the kube-apiserver-client signer's files given, that signer signs and
    the kubelet-serving one does not (upstream's per-signer flags)."""
    cert, key = ca_files(id_cluster)
    flags = (
        f"--cluster-signing-kube-apiserver-client-cert-file={cert}",
        f"--cluster-signing-kube-apiserver-client-key-file={key}",
    )
    client, serving = f"csr-only-client-{suffix}", f"csr-no-serving-{suffix}"
    async with running_controllers(id_cluster, signing=flags):
        try:
            serving_pem = request_pem(
                ec_key(), f"system:node:n-{suffix}", ("system:nodes",), dns=("n.example",)
            )
            body = csr_body(
                serving, serving_pem, KUBELET_SERVING, ["digital signature", "server auth"]
            )
            await call(id_kube, "POST", CSR_PATH, body)
            await add_condition(id_kube, serving, "Approved")
            body = csr_body(client, request_pem(ec_key(), "u"), APISERVER_CLIENT, ["client auth"])
            await call(id_kube, "POST", CSR_PATH, body)
            await add_condition(id_kube, client, "Approved")
            await until_issued(id_kube, client)
            await stays(
                lambda: (
                    not ((get_csr(id_kube, serving) or {}).get("status") or {}).get("certificate")
                ),
                "the kubelet-serving request unsigned",
                2.0,
            )
        finally:
            delete_csr(id_kube, client)
            delete_csr(id_kube, serving)


async def test_cleaner(suffix: str, id_kube: KubeClient, csr_controllers: CsrControllers) -> None:
    """Upstream's rules with CSRs already past their deadlines (the conditions' times set
    in the past, an issued certificate already expired): each goes. A CSR denied a few
    seconds short of an hour ago goes once the hour is up (its own deadline, not the
    hourly look); a fresh denied one and a pending one stay."""
    names = {
        k: f"csr-{k}-{suffix}"
        for k in (
            "denied",
            "failed",
            "approved-unissued",
            "approved-issued",
            "expired",
            "soon",
            "fresh",
            "pending",
        )
    }
    key = ec_key()
    now = datetime.datetime.now(datetime.UTC)
    valid = self_signed(key, "x", now - HOUR, now + 48 * HOUR)
    expired = self_signed(key, "x", now - 3 * HOUR, now - datetime.timedelta(minutes=1))
    try:
        for name in names.values():
            body = csr_body(name, request_pem(key, "someone"), CUSTOM_SIGNER, ["client auth"])
            await call(id_kube, "POST", CSR_PATH, body)
        await add_condition(id_kube, names["denied"], "Denied", updated=ago(2 * HOUR))
        await add_condition(
            id_kube, names["failed"], "Failed", updated=ago(2 * HOUR), subresource="status"
        )
        await add_condition(id_kube, names["approved-unissued"], "Approved", updated=ago(25 * HOUR))
        await add_condition(id_kube, names["approved-issued"], "Approved", updated=ago(2 * HOUR))
        await set_certificate(id_kube, names["approved-issued"], valid)
        await add_condition(id_kube, names["expired"], "Approved")
        await set_certificate(id_kube, names["expired"], expired)
        await add_condition(
            id_kube, names["soon"], "Denied", updated=ago(HOUR - datetime.timedelta(seconds=4))
        )
        await add_condition(id_kube, names["fresh"], "Denied")
        gone = ("denied", "failed", "approved-unissued", "approved-issued", "expired", "soon")
        await asyncio.gather(*(until_gone(id_kube, names[k], 30.0) for k in gone))
        assert get_csr(id_kube, names["fresh"]) is not None
        assert get_csr(id_kube, names["pending"]) is not None
    finally:
        for name in names.values():
            delete_csr(id_kube, name)
