"""Development certificates: a CA per dev-stack Kafka cluster for its TLS listeners (and the
helpers the kube-apiserver's certificates are made with).

Each cluster gets its own CA, a broker certificate for 127.0.0.1 and localhost, and a client
certificate for mutual TLS, all PEM: Kafka reads PEM key and trust stores directly (no keytool,
no JKS) and librdkafka takes PEM text, as the worker gets it from a Secret. EC P-256 keys take
milliseconds to generate, so a fresh cluster starts as quickly as before.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

VALIDITY = datetime.timedelta(days=3650)  # a dev stack's data directory can live for years
CLOCK_SKEW = datetime.timedelta(hours=1)
# What a server on this machine is reached by.
LOOPBACK: list[x509.GeneralName] = [
    x509.DNSName("localhost"),
    x509.IPAddress(ipaddress.IPv4Address("127.0.0.1")),
]


@dataclass(frozen=True)
class ClusterCertificates:
    """The PEM files of one cluster's development TLS, in `directory`."""

    directory: Path

    @property
    def ca_certificate(self) -> Path:
        return self.directory / "ca.crt"

    @property
    def broker_keystore(self) -> Path:
        """The broker's private key followed by its certificate (Kafka's PEM key store)."""
        return self.directory / "broker.pem"

    @property
    def client_certificate(self) -> Path:
        return self.directory / "client.crt"

    @property
    def client_key(self) -> Path:
        return self.directory / "client.key"

    def complete(self) -> bool:
        files = (self.ca_certificate, self.broker_keystore, self.client_certificate)
        return all(path.exists() for path in (*files, self.client_key))


def ensure_cluster_certificates(
    directory: Path, alias: str, host: str = "127.0.0.1"
) -> ClusterCertificates:
    """The cluster's certificates, generated on first use and kept, so that a restarted broker
    serves the certificates its clients already trust. The broker's names `host` too."""
    files = ClusterCertificates(directory)
    if files.complete():
        return files
    directory.mkdir(parents=True, exist_ok=True)
    ca_key, ca = certificate_authority(f"kafka-mirror dev CA {alias}")
    address = x509.IPAddress(ipaddress.IPv4Address(host))
    names = LOOPBACK if address in LOOPBACK else [*LOOPBACK, address]
    broker_key, broker = issue_certificate(
        ca, ca_key, f"kafka-{alias.lower()} broker", ExtendedKeyUsageOID.SERVER_AUTH, names
    )
    client_key, client = issue_certificate(
        ca, ca_key, "kafka-mirror dev client", ExtendedKeyUsageOID.CLIENT_AUTH, []
    )
    _write(files.ca_certificate, certificate_pem(ca))
    _write(
        files.broker_keystore,
        key_pem(broker_key) + certificate_pem(broker) + certificate_pem(ca),
        private=True,
    )
    _write(files.client_certificate, certificate_pem(client))
    _write(files.client_key, key_pem(client_key), private=True)
    return files


def new_key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def certificate_authority(
    common_name: str,
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A self-signed CA that may sign leaf certificates only."""
    key = new_key()
    name = _name(common_name)
    certificate = (
        _builder(name, name, key.public_key())
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(_key_usage(cert_sign=True), critical=True)
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), False)
        .sign(key, hashes.SHA256())
    )
    return key, certificate


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    """A subject: Kubernetes takes a client certificate's CN as the user name and each O as one
    of its groups."""
    return x509.Name(
        [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
        + [x509.NameAttribute(NameOID.COMMON_NAME, common_name)]
    )


def _builder(
    subject: x509.Name, issuer: x509.Name, public_key: ec.EllipticCurvePublicKey
) -> x509.CertificateBuilder:
    now = datetime.datetime.now(datetime.UTC)
    return (
        x509.CertificateBuilder()
        .subject_name(subject)
        .issuer_name(issuer)
        .public_key(public_key)
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - CLOCK_SKEW)
        .not_valid_after(now + VALIDITY)
    )


def _key_usage(cert_sign: bool) -> x509.KeyUsage:
    return x509.KeyUsage(
        digital_signature=not cert_sign,
        content_commitment=False,
        key_encipherment=False,
        data_encipherment=False,
        key_agreement=not cert_sign,
        key_cert_sign=cert_sign,
        crl_sign=cert_sign,
        encipher_only=False,
        decipher_only=False,
    )


def issue_certificate(
    ca: x509.Certificate,
    ca_key: ec.EllipticCurvePrivateKey,
    common_name: str,
    usage: x509.ObjectIdentifier,
    alternative_names: list[x509.GeneralName],
    organizations: tuple[str, ...] = (),
) -> tuple[ec.EllipticCurvePrivateKey, x509.Certificate]:
    """A key and a certificate for it, signed by the CA, for one use (server or client)."""
    key = new_key()
    builder = (
        _builder(_name(common_name, organizations), ca.subject, key.public_key())
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(_key_usage(cert_sign=False), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
    )
    if alternative_names:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(alternative_names), critical=False
        )
    return key, builder.sign(ca_key, hashes.SHA256())


def certificate_pem(certificate: x509.Certificate) -> str:
    return certificate.public_bytes(serialization.Encoding.PEM).decode()


def key_pem(key: ec.EllipticCurvePrivateKey) -> str:
    """Unencrypted PKCS#8 ("PRIVATE KEY"): what Kafka's PEM key store and librdkafka read."""
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    ).decode()


def _write(path: Path, text: str, private: bool = False) -> None:
    """Write through a temporary file, so an interrupted run never leaves half a PEM file."""
    partial = path.with_name(path.name + ".partial")
    partial.write_text(text)
    if private:
        os.chmod(partial, 0o600)
    partial.replace(path)
