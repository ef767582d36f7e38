"""The root CA publisher's decisions (no cluster): the ConfigMap it creates, when and how
an existing one is corrected, which refusals are no failure, the metrics' codes, the
bundle check and the flag."""

from __future__ import annotations

import argparse
import datetime
from pathlib import Path
from typing import Any

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import NameOID

from steward.controllers.rootcacertpublisher.controller import (
    CONTROLLER,
    RESYNC_PERIOD,
    read_bundle,
)
from steward.controllers.rootcacertpublisher.publication import (
    DESCRIPTION,
    check_bundle,
    configmap,
    create_ignored,
    sync_code,
    updated,
)
from steward.kube import ApiError, ApiStatusError, ConflictError, NotFoundError

pytestmark = pytest.mark.unit

ANNOTATION = "kubernetes.io/description"
UPSTREAM_DESCRIPTION = (
    "Contains a CA bundle that can be used to verify the kube-apiserver when using internal "
    "endpoints such as the internal service IP or kubernetes.default.svc. No other usage is "
    "guaranteed across distributions of Kubernetes clusters."
)


def ca_pem(name: str = "test-ca") -> str:
    key = ec.generate_private_key(ec.SECP256R1())
    subject = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, name)])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    return cert.public_bytes(serialization.Encoding.PEM).decode()


def existing(data: dict[str, str] | None, annotations: dict[str, str] | None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": "kube-root-ca.crt",
        "namespace": "ns",
        "resourceVersion": "7",
        "labels": {"keep": "me"},
    }
    if annotations is not None:
        meta["annotations"] = annotations
    obj: dict[str, Any] = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta}
    if data is not None:
        obj["data"] = data
    obj["binaryData"] = {"b": "AAEC"}
    return obj


def test_the_created_configmap_is_upstreams() -> None:
    assert DESCRIPTION == UPSTREAM_DESCRIPTION
    assert configmap("PEM") == {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "kube-root-ca.crt", "annotations": {ANNOTATION: DESCRIPTION}},
        "data": {"ca.crt": "PEM"},
    }


def test_a_right_configmap_is_left_alone() -> None:
    assert updated(existing({"ca.crt": "PEM"}, {ANNOTATION: DESCRIPTION}), "PEM") is None
    # Upstream checks only that the annotation is not empty, not its text.
    assert updated(existing({"ca.crt": "PEM"}, {ANNOTATION: "other words"}), "PEM") is None


@pytest.mark.parametrize(
    ("data", "annotations"),
    [
        ({"ca.crt": "OLD"}, {ANNOTATION: DESCRIPTION}),  # the bundle edited
        ({"ca.crt": "PEM", "extra": "x"}, {ANNOTATION: DESCRIPTION}),  # a key added
        (None, {ANNOTATION: DESCRIPTION}),  # the data removed
        ({"ca.crt": "PEM"}, None),  # the annotation removed
        ({"ca.crt": "PEM"}, {ANNOTATION: ""}),  # the annotation emptied
        ({"ca.crt": "OLD"}, {ANNOTATION: "other words", "mine": "too"}),
    ],
)
def test_a_wrong_configmap_is_corrected_keeping_the_rest(
    data: dict[str, str] | None, annotations: dict[str, str] | None
) -> None:
    before = existing(data, annotations)
    body = updated(before, "PEM")
    assert body is not None
    assert body["data"] == {"ca.crt": "PEM"}
    expected = {**(annotations or {}), ANNOTATION: DESCRIPTION}
    assert body["metadata"]["annotations"] == expected
    # The rest is written back as it was (conditional on its resourceVersion).
    assert body["metadata"]["labels"] == {"keep": "me"}
    assert body["metadata"]["resourceVersion"] == "7"
    assert body["binaryData"] == {"b": "AAEC"}
    assert before == existing(data, annotations), "the mirror's copy was changed"


def test_refused_creates() -> None:
    terminating = ApiStatusError(
        403, "namespace x is being terminated", "Forbidden", ("NamespaceTerminating",)
    )
    assert create_ignored(terminating)
    assert create_ignored(NotFoundError(404, 'namespaces "x" not found', "NotFound"))
    # AlreadyExists fails the sync, as upstream's: the retry compares what exists.
    assert not create_ignored(ConflictError(409, "already exists", "AlreadyExists"))
    assert not create_ignored(ApiStatusError(403, "forbidden", "Forbidden"))
    assert not create_ignored(ApiError("connection refused"))


def test_sync_codes() -> None:
    assert sync_code(None) == "200"
    assert sync_code(ConflictError(409, "already exists", "AlreadyExists")) == "409"
    assert sync_code(ApiStatusError(403, "forbidden", "Forbidden")) == "403"
    assert sync_code(ApiError("connection refused")) == "500"
    assert sync_code(RuntimeError("bug")) == "500"


def test_bundles() -> None:
    one, two = ca_pem("one"), ca_pem("two")
    check_bundle(one, "f")
    check_bundle(one + two, "f")
    for bad in ("", "not a certificate", one.replace("MII", "XXX", 1)):
        with pytest.raises(ValueError, match="error parsing root-ca-file at f"):
            check_bundle(bad, "f")


def test_the_flag_reads_and_checks_the_file(tmp_path: Path) -> None:
    good = tmp_path / "ca.crt"
    good.write_text(ca_pem())
    assert read_bundle(str(good)) == good.read_text()
    parser = CONTROLLER.flag_parser()
    assert parser.parse_args([]).root_ca_file is None
    assert parser.parse_args([f"--root-ca-file={good}"]).root_ca_file == good.read_text()
    bad = tmp_path / "bad.crt"
    bad.write_text("nothing")
    for path in (bad, tmp_path / "missing.crt"):
        with pytest.raises(argparse.ArgumentTypeError):
            read_bundle(str(path))
        with pytest.raises(SystemExit):
            parser.parse_args([f"--root-ca-file={path}"])


def test_the_declaration() -> None:
    # KCM's alias, one worker, upstream's queue name, the informers' 12 h resync, never
    # beside upstream's, and only the ConfigMaps named kube-root-ca.crt, whole.
    assert CONTROLLER.name == "root-ca-cert-publisher"
    assert CONTROLLER.options.max_concurrent_reconciles == 1
    assert CONTROLLER.options.queue_name == "root_ca_cert_publisher"
    assert CONTROLLER.options.resync_period == RESYNC_PERIOD == 43200
    assert CONTROLLER.beside_upstream is None
    subs = {r.plural: s for r, s in CONTROLLER.subscriptions().items()}
    assert subs["configmaps"].field_selector == "metadata.name=kube-root-ca.crt"
    assert subs["configmaps"].whole
    assert subs["namespaces"].metadata_only and subs["namespaces"].fields == ("status.phase",)
