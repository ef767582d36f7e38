"""Transport: mutual TLS only. A client certificate of another CA, no client certificate
and plaintext cannot reach the servers; a server with neither TLS files nor an explicit
``insecure_plaintext`` does not start, and neither does the command line; a rotated
serving certificate is served to new connections without a restart."""

from __future__ import annotations

import socket
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import grpc
import pytest
from cryptography import x509
from cryptography.x509.oid import NameOID
from grpc_health.v1 import health_pb2, health_pb2_grpc  # type: ignore[import-untyped]

from steward import cli
from steward.cluster import LocalCluster
from steward.cluster.pki import CertificateAuthority, KeyPair
from steward.informer import InformerOptions, InformerServer
from steward.kube import load_access
from steward.manager import ManagerOptions, ManagerServer
from steward.security import ClientSecurity, SecurityConfigError
from steward.serving.security import ServingSecurity
from steward.v1 import informer_pb2 as ipb
from steward.v1 import informer_pb2_grpc as ipb_grpc
from steward.v1 import manager_pb2 as mpb
from steward.v1 import manager_pb2_grpc as mpb_grpc
from tests.informer.conftest import RunningInformer, informer_kubeconfig
from tests.security.conftest import CONFIGMAPS, Pki, rand, rpc_error, serving_security

pytestmark = pytest.mark.integration

Probe = Callable[[grpc.Channel], object]


def informer_probe(channel: grpc.Channel) -> object:
    stub = ipb_grpc.InformerServiceStub(channel)
    return stub.List(ipb.ListRequest(type=CONFIGMAPS, namespace="default"), timeout=10)


def manager_probe(channel: grpc.Channel) -> object:
    return mpb_grpc.ManagerServiceStub(channel).ListControllers(
        mpb.ListControllersRequest(), timeout=10
    )


@pytest.fixture(params=["informer", "manager"])
def server(
    request: pytest.FixtureRequest,
) -> tuple[str, Probe]:
    """The address of a secure server and a call to it."""
    if request.param == "informer":
        running: Any = request.getfixturevalue("secure_informer")
        return running.address, informer_probe
    running = request.getfixturevalue("secure_manager")
    return running.address, manager_probe


def probe_with(
    address: str, probe: Probe, credentials: grpc.ChannelCredentials | None
) -> grpc.RpcError:
    if credentials is None:
        channel = grpc.insecure_channel(address)
    else:
        channel = grpc.secure_channel(address, credentials)
    with channel:
        return rpc_error(lambda: probe(channel))


def test_only_certificates_of_the_client_ca_connect(
    server: tuple[str, Probe], pki: Pki, tmp_path: Path
) -> None:
    address, probe = server
    ca = pki.ca.pair.cert.read_bytes()

    # A certificate of the cluster's CA connects; its user may do nothing, which the server
    # can only say once it knows who is calling.
    known = pki.client_pair(f"test:nobody-{rand()}")
    err = probe_with(
        address,
        probe,
        grpc.ssl_channel_credentials(ca, known.key.read_bytes(), known.cert.read_bytes()),
    )
    assert err.code() == grpc.StatusCode.PERMISSION_DENIED, err.details()

    # The same name from another CA does not get past the handshake.
    other = CertificateAuthority(tmp_path / "other-ca", common_name="not-the-cluster-ca")
    stranger = other.issue("stranger", "steward-admin", orgs=("system:masters",), client=True)
    err = probe_with(
        address,
        probe,
        grpc.ssl_channel_credentials(ca, stranger.key.read_bytes(), stranger.cert.read_bytes()),
    )
    assert err.code() == grpc.StatusCode.UNAVAILABLE, err.details()

    # Nor does a client without a certificate, nor one speaking plaintext.
    err = probe_with(address, probe, grpc.ssl_channel_credentials(ca))
    assert err.code() == grpc.StatusCode.UNAVAILABLE, err.details()
    err = probe_with(address, probe, None)
    assert err.code() == grpc.StatusCode.UNAVAILABLE, err.details()


def test_a_client_checks_the_servers_certificate(
    server: tuple[str, Probe], pki: Pki, tmp_path: Path
) -> None:
    """A client trusting another CA refuses the server (and so sends it nothing)."""
    address, probe = server
    other = CertificateAuthority(tmp_path / "other-ca", common_name="not-the-cluster-ca")
    pair = pki.client_pair(f"test:nobody-{rand()}")
    security = ClientSecurity(
        ca_file=str(other.pair.cert), cert_file=str(pair.cert), key_file=str(pair.key)
    )
    with security.sync_channel(address) as channel:
        err = rpc_error(lambda: probe(channel))
    assert err.code() == grpc.StatusCode.UNAVAILABLE, err.details()


def test_a_server_without_tls_or_explicit_plaintext_does_not_start(
    cluster: LocalCluster,
) -> None:
    kubeconfig = informer_kubeconfig(cluster)
    with pytest.raises(SecurityConfigError, match="--insecure-plaintext"):
        InformerServer(
            InformerOptions(
                listen="127.0.0.1:0", kubeconfig=kubeconfig, security=ServingSecurity()
            ),
            load_access(kubeconfig),
        )
    kubeconfig = str(cluster.component_kubeconfig("manager"))
    with pytest.raises(SecurityConfigError, match="--insecure-plaintext"):
        ManagerServer(
            ManagerOptions(listen="127.0.0.1:0", kubeconfig=kubeconfig, security=ServingSecurity()),
            load_access(kubeconfig),
        )


@pytest.mark.parametrize("command", ["informer", "manager"])
def test_the_command_line_refuses_to_serve_without_tls(
    command: str,
    cluster: LocalCluster,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    prefix = f"STEWARD_{command.upper()}_"
    for flag in ("TLS_CERT_FILE", "TLS_KEY_FILE", "CLIENT_CA_FILE", "INSECURE_PLAINTEXT"):
        monkeypatch.delenv(prefix + flag, raising=False)
    kubeconfig = str(cluster.component_kubeconfig(command))
    assert cli.main([command, "--kubeconfig", kubeconfig, "--listen", "127.0.0.1:0"]) == 2
    err = capsys.readouterr().err
    assert f"steward {command}: error: no TLS files" in err, err
    assert "--insecure-plaintext" in err and "--tls-cert-file" in err, err

    only_cert = [command, "--kubeconfig", kubeconfig, "--tls-cert-file", kubeconfig]
    assert cli.main(only_cert) == 2
    err = capsys.readouterr().err
    assert "TLS needs all of" in err, err


def served_common_name(port: int, pki: Pki, client_pair: KeyPair) -> str:
    """The common name of the certificate a new TLS connection to ``port`` is served,
    verified against the cluster's CA, with ``client_pair`` as the client certificate."""
    context = ssl.create_default_context(cafile=pki.ca_file)
    context.load_cert_chain(str(client_pair.cert), str(client_pair.key))
    context.set_alpn_protocols(["h2"])
    with (
        socket.create_connection(("127.0.0.1", port), timeout=10) as raw,
        context.wrap_socket(raw, server_hostname="localhost") as tls,
    ):
        der = tls.getpeercert(binary_form=True)
    assert der is not None
    names = x509.load_der_x509_certificate(der).subject.get_attributes_for_oid(NameOID.COMMON_NAME)
    return str(names[0].value)


def test_a_rotated_serving_certificate_is_served_without_a_restart(
    cluster: LocalCluster, pki: Pki, tmp_path: Path
) -> None:
    tls = pki.server("serving", "steward-informer-first", directory=tmp_path)
    running = RunningInformer(
        InformerOptions(
            listen="127.0.0.1:0",
            kubeconfig=informer_kubeconfig(cluster),
            idle_grace=2.0,
            security=serving_security(tls),
        )
    )
    try:
        client_pair = pki.client_pair(f"test:nobody-{rand()}")
        security = ClientSecurity(
            ca_file=pki.ca_file, cert_file=str(client_pair.cert), key_file=str(client_pair.key)
        )

        def healthy() -> bool:
            with security.sync_channel(running.address) as channel:
                reply = health_pb2_grpc.HealthStub(channel).Check(
                    health_pb2.HealthCheckRequest(service=""), timeout=10
                )
            return bool(reply.status == health_pb2.HealthCheckResponse.SERVING)

        assert served_common_name(running.port, pki, client_pair) == "steward-informer-first"
        assert healthy()

        # Same paths, new certificate and key.
        rotated = pki.server("serving", "steward-informer-second", directory=tmp_path)
        assert rotated == tls
        deadline = time.monotonic() + 30
        while served_common_name(running.port, pki, client_pair) != "steward-informer-second":
            assert time.monotonic() < deadline, "the old certificate is still served"
            time.sleep(0.2)
        assert healthy()  # gRPC clients verify and use it too

        # A broken file is not taken: the current certificate stays in service.
        Path(tls.cert_file).write_text("not a certificate\n")
        assert served_common_name(running.port, pki, client_pair) == "steward-informer-second"
        assert healthy()
    finally:
        running.stop()
