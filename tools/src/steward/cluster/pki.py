"""Fresh PKI for one local cluster: a CA, serving and client certificates, the SA key pair.

Everything is generated anew for each ``steward cluster up`` and lives in the cluster's
state directory (``pki/``, mode 0600 for keys); nothing is reused between clusters.
:meth:`CertificateAuthority.load` reopens a running cluster's CA to issue more client
certificates (e.g. a test's throwaway identity).
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=365)
"""A leaf certificate's validity (kubeadm's)."""
_CA_VALIDITY = datetime.timedelta(days=3650)
"""A CA's validity (kubeadm's): a certificate the cluster's signer issues for its
default year is then never cut short by the CA's own end."""

PrivateKey = ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey


@dataclass(frozen=True)
class KeyPair:
    """A certificate and its key, as files."""

    cert: Path
    key: Path


def _write_key(path: Path, key: PrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(common_name: str, orgs: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in orgs]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


class CertificateAuthority:
    """A self-signed CA that issues the cluster's certificates."""

    def __init__(self, directory: Path, common_name: str = "steward-local-ca") -> None:
        self.directory = directory
        directory.mkdir(parents=True, exist_ok=True)
        self._key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        subject = _name(common_name)
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(subject)
            .issuer_name(subject)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _CA_VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False
            )
            .sign(self._key, hashes.SHA256())
        )
        self.pair = KeyPair(directory / "ca.crt", directory / "ca.key")
        self.pair.cert.write_bytes(self._cert.public_bytes(serialization.Encoding.PEM))
        _write_key(self.pair.key, self._key)

    @classmethod
    def load(cls, directory: Path) -> CertificateAuthority:
        """The CA already in ``directory`` (``ca.crt``, ``ca.key``), to issue more leaves.

        Raises:
            OSError: the files cannot be read.
            ValueError: they do not hold a certificate and an EC private key.
        """
        ca = cls.__new__(cls)
        ca.directory = directory
        ca.pair = KeyPair(directory / "ca.crt", directory / "ca.key")
        ca._cert = x509.load_pem_x509_certificate(ca.pair.cert.read_bytes())
        key = serialization.load_pem_private_key(ca.pair.key.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise ValueError(f"{ca.pair.key} does not hold the CA's EC private key")
        ca._key = key
        return ca

    def issue(
        self,
        name: str,
        common_name: str,
        *,
        orgs: tuple[str, ...] = (),
        dns: tuple[str, ...] = (),
        ips: tuple[str, ...] = (),
        server: bool = False,
        client: bool = False,
        directory: Path | None = None,
    ) -> KeyPair:
        """Issue a leaf certificate into ``<name>.crt``/``<name>.key`` of ``directory``
        (default: the CA's). For a client certificate kube-apiserver takes the user name
        from ``common_name`` and the groups from ``orgs``."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        usages = []
        if server:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        if client:
            usages.append(ExtendedKeyUsageOID.CLIENT_AUTH)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, orgs))
            .issuer_name(self._cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
        )
        sans: list[x509.GeneralName] = [x509.DNSName(d) for d in dns]
        sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in ips]
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        into = directory if directory is not None else self.directory
        pair = KeyPair(into / f"{name}.crt", into / f"{name}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_key(pair.key, key)
        return pair


def service_account_keys(directory: Path) -> KeyPair:
    """An RSA key pair for signing service-account tokens (``sa.pub`` stands as 'cert')."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    pair = KeyPair(directory / "sa.pub", directory / "sa.key")
    pair.cert.write_bytes(
        key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    _write_key(pair.key, key)
    return pair


def front_proxy(directory: Path, client_name: str) -> tuple[CertificateAuthority, KeyPair]:
    """The aggregation layer's PKI: a CA of its own (``--requestheader-client-ca-file``)
    and kube-apiserver's client certificate ``client_name`` (``--proxy-client-cert-file``)
    that it presents to aggregated API servers, which believe its ``X-Remote-*`` headers
    on that certificate alone. A separate CA, so that no client certificate of the
    cluster CA can pass for the front proxy."""
    ca = CertificateAuthority(directory, common_name="steward-front-proxy-ca")
    return ca, ca.issue("front-proxy-client", client_name, client=True)
