"""The certificates and keys of a throw-away Kubernetes control plane, generated per run.

One CA signs the API server's serving certificate (127.0.0.1, localhost and the in-cluster
names) and a client certificate per identity (the admin in ``system:masters``, the
controller-manager, the scheduler). The ServiceAccount token issuer gets its own RSA key pair.
Everything is written as PEM files into one directory (keys mode 0600).
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

SERVING_NAMES = (
    "localhost",
    "kubernetes",
    "kubernetes.default",
    "kubernetes.default.svc",
    "kubernetes.default.svc.cluster.local",
)
SERVING_IPS = ("127.0.0.1", "10.96.0.1")


@dataclass(frozen=True)
class Pair:
    cert: Path
    key: Path


@dataclass(frozen=True)
class ClusterPki:
    ca: Pair
    serving: Pair
    clients: dict[str, Pair]
    service_account_key: Path
    service_account_pub: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(path: Path, key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> None:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    path.chmod(0o600)


def _name(common_name: str, organization: str | None = None) -> x509.Name:
    attributes = [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    if organization:
        attributes.append(x509.NameAttribute(NameOID.ORGANIZATION_NAME, organization))
    return x509.Name(attributes)


def _builder(subject: x509.Name, issuer: x509.Name, public_key: object) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)  # type: ignore[arg-type]
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=2))
    )


def generate(directory: Path, clients: dict[str, tuple[str, str | None]]) -> ClusterPki:
    """Write a CA, the serving pair and one client pair per ``name: (CN, O)`` into directory."""
    directory.mkdir(parents=True, exist_ok=True)
    ca_key = _key()
    ca_name = _name("proxima-test-cluster-ca")
    ca_cert = (
        _builder(ca_name, ca_name, ca_key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(ca_key, hashes.SHA256())
    )
    ca = _store(directory, "ca", ca_cert, ca_key)

    def issue(
        file: str, subject: x509.Name, usage: x509.ObjectIdentifier, sans: list[x509.GeneralName]
    ) -> Pair:
        key = _key()
        builder = _builder(subject, ca_name, key.public_key()).add_extension(
            x509.ExtendedKeyUsage([usage]), critical=False
        )
        if sans:
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        return _store(directory, file, builder.sign(ca_key, hashes.SHA256()), key)

    sans: list[x509.GeneralName] = [x509.DNSName(n) for n in SERVING_NAMES]
    sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in SERVING_IPS]
    serving = issue("apiserver", _name("kube-apiserver"), ExtendedKeyUsageOID.SERVER_AUTH, sans)
    client_pairs = {
        name: issue(name, _name(cn, org), ExtendedKeyUsageOID.CLIENT_AUTH, [])
        for name, (cn, org) in clients.items()
    }
    sa_key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    _write_key(directory / "sa.key", sa_key)
    (directory / "sa.pub").write_bytes(
        sa_key.public_key().public_bytes(
            serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
        )
    )
    return ClusterPki(ca, serving, client_pairs, directory / "sa.key", directory / "sa.pub")


def _store(
    directory: Path, file: str, cert: x509.Certificate, key: ec.EllipticCurvePrivateKey
) -> Pair:
    pair = Pair(directory / f"{file}.crt", directory / f"{file}.key")
    pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    _write_key(pair.key, key)
    return pair
