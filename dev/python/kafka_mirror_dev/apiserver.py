"""A real kube-apiserver with etcd (envtest style): no controllers, no kubelet.

Certificates are made here: a CA, the server's certificate for 127.0.0.1, and the service-account
signing key (TokenRequest works). The admin identity is a bearer token in the `system:masters`
group, written into a kubeconfig for kubectl, the kubernetes client and kopf.

With `for_node`, the same API server is configured as a cluster's (node.py): it listens
on the node's bridge address (pods reach it there, through the `kubernetes` Service), admits
pods with their ServiceAccount's token, authorizes kubelets with the Node authorizer, and issues
client certificates for the node's components (`component_kubeconfig`).
"""

from __future__ import annotations

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
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID

from kafka_mirror_dev.builds import ETCD, KUBE_APISERVER
from kafka_mirror_dev.certificates import (
    LOOPBACK,
    certificate_authority,
    certificate_pem,
    issue_certificate,
    key_pem,
    new_key,
)
from kafka_mirror_dev.processes import ServerProcess, free_port, port_open

# Room for a thousand mirrors' metrics Services (a /24 held 253: bench/operator_scale.py).
SERVICE_CLUSTER_IP_RANGE = "10.0.0.0/16"
# The `kubernetes` Service's cluster IP (the range's first address): in-cluster clients connect
# to it, so the node's API server certificate names it.
KUBERNETES_SERVICE_IP = "10.0.0.1"
_SERVICE_NAMES = ("kubernetes", "kubernetes.default", "kubernetes.default.svc")


def _kubeconfig(server: str, ca: Path, user: dict[str, str], name: str) -> str:
    return yaml.safe_dump(
        {
            "apiVersion": "v1",
            "kind": "Config",
            "clusters": [
                {"name": "dev", "cluster": {"server": server, "certificate-authority": str(ca)}}
            ],
            "users": [{"name": name, "user": user}],
            "contexts": [
                {"name": "dev", "context": {"cluster": "dev", "user": name, "namespace": "default"}}
            ],
            "current-context": "dev",
        }
    )


# On by default in OpenShift: setting blockOwnerDeletion (kopf.adopt does) needs update on the
# owner's finalizers, so the chart's RBAC is checked for it.
OWNER_REFERENCES_ENFORCED = "OwnerReferencesPermissionEnforcement"


@dataclass
class KubeApiServer:
    """etcd and kube-apiserver in `workdir`, with `kubeconfig` for an admin."""

    workdir: Path
    address: str = "127.0.0.1"
    for_node: bool = False
    port: int = field(default_factory=free_port)
    etcd_port: int = field(default_factory=free_port)
    etcd_peer_port: int = field(default_factory=free_port)
    etcd: ServerProcess | None = None
    apiserver: ServerProcess | None = None

    @property
    def url(self) -> str:
        return f"https://{self.address}:{self.port}"

    @property
    def kubeconfig(self) -> Path:
        return self.workdir / "kubeconfig"

    @property
    def pki(self) -> Path:
        return self.workdir / "pki"

    def _server_names(self) -> list[x509.GeneralName]:
        names = list(LOOPBACK)
        if self.for_node:
            addresses = {self.address, KUBERNETES_SERVICE_IP}
            names += [x509.IPAddress(ipaddress.IPv4Address(a)) for a in sorted(addresses)]
            names += [x509.DNSName(name) for name in _SERVICE_NAMES]
        return names

    def _write_credentials(self) -> None:
        if (self.pki / "token.csv").exists() and (self.pki / "sa.pub").exists():
            return  # kept across restarts (a stack from before sa.pub is given new ones)
        self.pki.mkdir(parents=True, exist_ok=True)
        ca_key, ca = certificate_authority("kafka-mirror dev kube CA")
        server_key, server = issue_certificate(
            ca, ca_key, "kube-apiserver", ExtendedKeyUsageOID.SERVER_AUTH, self._server_names()
        )
        (self.pki / "ca.crt").write_text(certificate_pem(ca))
        (self.pki / "server.crt").write_text(certificate_pem(server))
        (self.pki / "server.key").write_text(key_pem(server_key))
        if self.for_node:  # the node's components get client certificates from it
            (self.pki / "ca.key").write_text(key_pem(ca_key))
        # The service-account key pair: tokens signed with ES256, checked with the public half.
        service_accounts = new_key()
        (self.pki / "sa.key").write_text(key_pem(service_accounts))
        (self.pki / "sa.pub").write_bytes(
            service_accounts.public_key().public_bytes(
                serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
            )
        )
        token = secrets.token_hex(24)
        (self.pki / "token.csv").write_text(f'{token},admin,admin,"system:masters"\n')
        self.kubeconfig.write_text(
            _kubeconfig(self.url, self.pki / "ca.crt", {"token": token}, "admin")
        )

    def client_certificate(self, user: str, groups: tuple[str, ...]) -> tuple[Path, Path]:
        """A client certificate (and its key) for `user` in `groups`, signed by the API
        server's client CA (an API server `for_node` only)."""
        ca_key = serialization.load_pem_private_key((self.pki / "ca.key").read_bytes(), None)
        ca = x509.load_pem_x509_certificate((self.pki / "ca.crt").read_bytes())
        assert isinstance(ca_key, ec.EllipticCurvePrivateKey)
        key, certificate = issue_certificate(
            ca, ca_key, user, ExtendedKeyUsageOID.CLIENT_AUTH, [], organizations=groups
        )
        stem = self.pki / "clients" / user.replace(":", "-")
        stem.parent.mkdir(exist_ok=True)
        stem.with_suffix(".crt").write_text(certificate_pem(certificate))
        stem.with_suffix(".key").write_text(key_pem(key))
        return stem.with_suffix(".crt"), stem.with_suffix(".key")

    def component_kubeconfig(self, user: str, groups: tuple[str, ...] = ()) -> Path:
        """A kubeconfig for one of the node's components, as `user` (its client certificate)."""
        certificate, key = self.client_certificate(user, groups)
        path = certificate.with_suffix(".kubeconfig")
        credentials = {"client-certificate": str(certificate), "client-key": str(key)}
        path.write_text(_kubeconfig(self.url, self.pki / "ca.crt", credentials, user))
        return path

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
            f"--bind-address={self.address}",
            f"--advertise-address={self.address}",
            f"--service-cluster-ip-range={SERVICE_CLUSTER_IP_RANGE}",
            "--allow-privileged=true",
            "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
            f"--service-account-key-file={self.pki / 'sa.pub'}",
            f"--service-account-signing-key-file={self.pki / 'sa.key'}",
            "--v=0",
            *(self._node_flags() if self.for_node else self._apiserver_only_flags()),
        ]

    @staticmethod
    def _apiserver_only_flags() -> list[str]:
        # No controller manager creates the `default` ServiceAccounts the admission plugin
        # would require of every pod.
        return [
            "--authorization-mode=RBAC",
            "--disable-admission-plugins=ServiceAccount",
            f"--enable-admission-plugins={OWNER_REFERENCES_ENFORCED}",
        ]

    def _node_flags(self) -> list[str]:
        kubelet_certificate, kubelet_key = self.client_certificate(
            "kube-apiserver-kubelet-client", ("system:masters",)
        )
        return [
            "--authorization-mode=Node,RBAC",
            f"--enable-admission-plugins=NodeRestriction,{OWNER_REFERENCES_ENFORCED}",
            f"--kubelet-client-certificate={kubelet_certificate}",
            f"--kubelet-client-key={kubelet_key}",
            # For logs and exec: the node's name resolves nowhere.
            "--kubelet-preferred-address-types=InternalIP",
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
