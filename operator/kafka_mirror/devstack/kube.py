"""A real kube-apiserver with etcd (envtest style): no controllers, no kubelet.

Certificates are made here: a CA, the server's certificate for 127.0.0.1, and the service-account
signing key (TokenRequest works). The admin identity is a bearer token in the `system:masters`
group, written into a kubeconfig for kubectl, the kubernetes client and kopf.
"""

from __future__ import annotations

import datetime
import ipaddress
import secrets
import shutil
import ssl
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import rsa
from cryptography.x509.oid import NameOID

from kafka_mirror.devstack.builds import ETCD, KUBE_APISERVER
from kafka_mirror.devstack.processes import ServerProcess, free_port, port_open


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


def _pem_key(key: rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.TraditionalOpenSSL,
        serialization.NoEncryption(),
    )


def _certificate(
    subject: str, key: rsa.RSAPrivateKey, issuer: tuple[x509.Certificate, rsa.RSAPrivateKey] | None
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer[0].subject if issuer else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=365))
    )
    if issuer is None:
        builder = builder.add_extension(x509.BasicConstraints(ca=True, path_length=None), True)
    else:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return builder.sign(issuer[1] if issuer else key, hashes.SHA256())


@dataclass
class KubeApiServer:
    """etcd and kube-apiserver in `workdir`, with `kubeconfig` for an admin."""

    workdir: Path
    port: int = field(default_factory=free_port)
    etcd_port: int = field(default_factory=free_port)
    etcd_peer_port: int = field(default_factory=free_port)
    etcd: ServerProcess | None = None
    apiserver: ServerProcess | None = None

    @property
    def url(self) -> str:
        return f"https://127.0.0.1:{self.port}"

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def pki(self) -> Path:
        return self.workdir / "pki"

    def _write_credentials(self) -> None:
        if (self.pki / "token.csv").exists():
            return
        self.pki.mkdir(parents=True, exist_ok=True)
        ca_key = _key()
        ca = _certificate("kafka-mirror-dev-ca", ca_key, None)
        server_key = _key()
        server = _certificate("kube-apiserver", server_key, (ca, ca_key))
        (self.pki / "ca.crt").write_bytes(ca.public_bytes(serialization.Encoding.PEM))
        (self.pki / "server.crt").write_bytes(server.public_bytes(serialization.Encoding.PEM))
        (self.pki / "server.key").write_bytes(_pem_key(server_key))
        (self.pki / "sa.key").write_bytes(_pem_key(_key()))
        token = secrets.token_hex(24)
        (self.pki / "token.csv").write_text(f'{token},admin,admin,"system:masters"\n')
        self.kubeconfig.write_text(
            yaml.safe_dump(
                {
                    "apiVersion": "v1",
                    "kind": "Config",
                    "clusters": [
                        {
                            "name": "dev",
                            "cluster": {
                                "server": self.url,
                                "certificate-authority": str(self.pki / "ca.crt"),
                            },
                        }
                    ],
                    "users": [{"name": "admin", "user": {"token": token}}],
                    "contexts": [
                        {
                            "name": "dev",
                            "context": {"cluster": "dev", "user": "admin", "namespace": "default"},
                        }
                    ],
                    "current-context": "dev",
                }
            )
        )

    def _etcd_command(self) -> list[str]:
        client = f"http://127.0.0.1:{self.etcd_port}"
        peer = f"http://127.0.0.1:{self.etcd_peer_port}"
        return [
            str(ETCD.ensure()),
            "--name=dev",
            f"--data-dir={self.workdir / 'etcd'}",
            f"--listen-client-urls={client}",
            f"--advertise-client-urls={client}",
            f"--listen-peer-urls={peer}",
            f"--initial-advertise-peer-urls={peer}",
            f"--initial-cluster=dev={peer}",
            "--unsafe-no-fsync=true",
            "--log-level=warn",
        ]

    def _apiserver_command(self) -> list[str]:
        return [
            str(KUBE_APISERVER.ensure()),
            f"--etcd-servers=http://127.0.0.1:{self.etcd_port}",
            f"--cert-dir={self.pki}",
            f"--tls-cert-file={self.pki / 'server.crt'}",
            f"--tls-private-key-file={self.pki / 'server.key'}",
            f"--client-ca-file={self.pki / 'ca.crt'}",
            f"--token-auth-file={self.pki / 'token.csv'}",
            f"--secure-port={self.port}",
            "--bind-address=127.0.0.1",
            "--advertise-address=127.0.0.1",
            "--service-cluster-ip-range=10.0.0.0/24",
            "--allow-privileged=true",
            "--authorization-mode=RBAC",
            "--disable-admission-plugins=ServiceAccount",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={self.pki / 'sa.key'}",
            f"--service-account-signing-key-file={self.pki / 'sa.key'}",
            "--v=0",
        ]

    def _healthy(self) -> bool:
        context = ssl.create_default_context(cafile=str(self.pki / "ca.crt"))
        try:
            with urllib.request.urlopen(f"{self.url}/readyz", context=context, timeout=2) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    def start(self, timeout: float = 120.0) -> None:
        for tool in (ETCD, KUBE_APISERVER):
            tool.ensure()  # build first, so a first-run build does not eat the start-up timeout
        self.workdir.mkdir(parents=True, exist_ok=True)
        self._write_credentials()
        self.etcd = ServerProcess("etcd", self._etcd_command(), self.workdir / "etcd.log")
        self.etcd.start()
        self.etcd.wait_until(lambda: port_open(self.etcd_port), timeout, "listening")
        self.apiserver = ServerProcess(
            "kube-apiserver", self._apiserver_command(), self.workdir / "kube-apiserver.log"
        )
        self.apiserver.start()
        self.apiserver.wait_until(self._healthy, timeout, "ready")

    def restart_apiserver(self, down_seconds: float, timeout: float = 120.0) -> None:
        """Stop kube-apiserver (etcd keeps the objects), wait, start it again on the same port."""
        assert self.apiserver is not None
        self.apiserver.stop()
        time.sleep(down_seconds)
        self.apiserver.start()
        self.apiserver.wait_until(self._healthy, timeout, "ready")

    def stop(self) -> None:
        for process in (self.apiserver, self.etcd):
            if process is not None:
                process.stop()

    def remove(self) -> None:
        self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)
