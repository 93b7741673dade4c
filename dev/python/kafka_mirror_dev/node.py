"""A real single-node Kubernetes cluster on this machine, with no image registry.

etcd and kube-apiserver (apiserver.py, configured `for_node`), the kubelet,
kube-controller-manager, kube-scheduler and kube-proxy (built from the API server's pinned
k8s.io/kubernetes), a containerd of the node's own with runc and the CNI bridge, host-local and
loopback plugins (Debian's packages), and images made here (images.py).

The pods' network is a bridge whose address is the node's InternalIP: the API server (and a
Kafka cluster started with `host=GATEWAY`) listen there, so pods reach them directly, and
in-cluster configuration reaches the API server through the `kubernetes` Service, which
kube-proxy (iptables mode) maps to that address. Pod traffic stays on the machine: nothing is
masqueraded, an iptables rule drops what pods send anywhere but the bridge, and pods get no DNS
server. What the node changes on the host is recorded first and restored by `stop`
(hoststate.py).
"""

from __future__ import annotations

import fcntl
import shutil
import signal
import subprocess
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, TextIO

import yaml
from kubernetes import client
from pydantic import BaseModel

from kafka_mirror.kube import api_client
from kafka_mirror_dev import hoststate, images
from kafka_mirror_dev.apiserver import KubeApiServer
from kafka_mirror_dev.builds import (
    KUBE_CONTROLLER_MANAGER,
    KUBE_PROXY,
    KUBE_SCHEDULER,
    KUBELET,
    NODE_TOOLS,
    cache_dir,
    progress,
)
from kafka_mirror_dev.containerd import Containerd, cni_config
from kafka_mirror_dev.prerequisites import install_prerequisites
from kafka_mirror_dev.processes import ServerProcess, free_port, stop_pid

NODE_NAME = "kafka-mirror-node"
BRIDGE = "kmirror0"
POD_SUBNET = "10.244.0.0/24"
GATEWAY = "10.244.0.1"  # the bridge's address: the node's InternalIP, the host as pods see it
_EGRESS_RULE = ["FORWARD", "-s", POD_SUBNET, "!", "-o", BRIDGE, "-j", "DROP"]


def prepare() -> tuple[str, images.ProjectImages]:
    """Install and build what a node needs (first run only): the packages, the tools, and the
    images; returns the sandbox image and the project's images."""
    install_prerequisites()
    for tool in NODE_TOOLS:
        tool.ensure()
    return images.pause_image(), images.project_images()


def _node_dir() -> Path:
    return cache_dir() / "node"


def _executable(pid: int) -> str | None:
    try:
        return (Path("/proc") / str(pid) / "cmdline").read_bytes().split(b"\0")[0].decode()
    except OSError:
        return None


class _Running(BaseModel):
    """What a node has running, so that the next start stops it if this one never stops
    (its process was killed)."""

    workdir: Path
    processes: dict[int, str]  # pid → its executable


@dataclass
class KubeNode:
    """A node and its control plane, its state in `workdir` (one run's); its containerd's
    image store is kept in the cache."""

    workdir: Path
    apiserver: KubeApiServer = field(init=False)
    containerd: Containerd | None = None
    image: str = ""  # the project's operator and worker image, in the node's store
    audit_image: str = ""  # the project's audit image, in the node's store
    processes: dict[str, ServerProcess] = field(default_factory=dict)
    _lock: IO[str] | None = None

    def __post_init__(self) -> None:
        self.apiserver = KubeApiServer(self.workdir / "kube", address=GATEWAY, for_node=True)

    @property
    def kubeconfig(self) -> Path:
        """The admin's kubeconfig."""
        return self.apiserver.kubeconfig

    @property
    def record(self) -> Path:
        return _node_dir() / "host-record.json"

    @property
    def running(self) -> Path:
        return _node_dir() / "running.json"

    def _remember(self) -> None:
        started = [
            self.apiserver.etcd,
            self.apiserver.apiserver,
            self.containerd.process if self.containerd else None,
            *self.processes.values(),
        ]
        processes = {p.pid: p.command[0] for p in started if p is not None and p.pid}
        state = _Running(workdir=self.workdir, processes=processes)
        self.running.write_text(state.model_dump_json())

    def _stop_leftovers(self) -> None:
        """Stop what a node that never stopped left running (its processes, by pid while they
        run the same executable, and its containers' shims) and unmount what it mounted."""
        if not self.running.exists():
            return
        left = _Running.model_validate_json(self.running.read_text())
        for pid, executable in left.processes.items():
            if _executable(pid) == executable:
                stop_pid(pid)
        Containerd(_node_dir() / "containerd", left.workdir, "").stop_shims()
        hoststate.unmount_below(left.workdir)
        self.running.unlink()

    def _take_lock(self) -> None:
        """One node per machine: the bridge, the egress rule and the fixed paths are shared."""
        path = cache_dir() / "locks" / "node.lock"
        path.parent.mkdir(parents=True, exist_ok=True)
        lock = path.open("a+")
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.close()
            raise RuntimeError(f"another node runs on this machine (it holds {path})") from None
        self._lock = lock

    def start(self, timeout: float = 180.0) -> KubeNode:
        sandbox, project = prepare()  # before any timer starts
        self.image, self.audit_image = project.operator, project.audit
        self._take_lock()
        self._stop_leftovers()  # of a node that did not stop cleanly
        for problem in hoststate.restore(self.record):
            progress(f"not restored after the last node: {problem}")
        hoststate.record(self.record, BRIDGE)
        started = time.monotonic()
        try:
            self._network()
            self.apiserver.start(timeout)
            self._remember()
            self.containerd = Containerd(_node_dir() / "containerd", self.workdir, sandbox)
            ipam = self.workdir / "ipam"
            self.containerd.start(cni_config(BRIDGE, POD_SUBNET, GATEWAY, ipam))
            self._remember()
            for image in (sandbox, self.image, self.audit_image):
                images.load(self.containerd, image)
            self.containerd.keep_only((sandbox, self.image, self.audit_image))
            self._start("kubelet", self._kubelet_command())
            self._start("kube-controller-manager", self._controller_manager_command())
            self._start("kube-scheduler", self._scheduler_command())
            health = free_port()
            self._start("kube-proxy", self._proxy_command(health))
            self._wait_ready(health, timeout)
        except BaseException:
            self.stop()
            raise
        progress(f"node {NODE_NAME} ready in {time.monotonic() - started:.1f}s")
        return self

    def _network(self) -> None:
        """The pods' bridge, made before the API server starts, so it can listen there."""
        for command in (
            ["ip", "link", "add", BRIDGE, "type", "bridge"],
            ["ip", "addr", "add", f"{GATEWAY}/24", "dev", BRIDGE],
            ["ip", "link", "set", BRIDGE, "up"],
            ["iptables", "-I", *_EGRESS_RULE],
        ):
            subprocess.run(command, check=True, capture_output=True)

    def _start(self, name: str, command: list[str]) -> None:
        process = ServerProcess(name, command, self.workdir / "logs" / f"{name}.log")
        process.start()
        self.processes[name] = process
        self._remember()

    def _write(self, name: str, document: dict[str, Any]) -> Path:
        path = self.workdir / "config" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(yaml.safe_dump(document))
        return path

    def _kubelet_command(self) -> list[str]:
        assert self.containerd is not None
        resolv = self.workdir / "config" / "resolv.conf"
        resolv.parent.mkdir(parents=True, exist_ok=True)
        # No DNS server for pods (their own loopback, where none listens): without a
        # nameserver here containerd would give them the host's, unreachable from the bridge.
        resolv.write_text("nameserver 127.0.0.1\n")
        config = self._write(
            "kubelet.yaml",
            {
                "apiVersion": "kubelet.config.k8s.io/v1beta1",
                "kind": "KubeletConfiguration",
                "failCgroupV1": False,  # this machine's cgroups are v1 (hybrid)
                "cgroupDriver": "cgroupfs",
                "failSwapOn": False,
                "containerRuntimeEndpoint": self.containerd.endpoint,
                "address": GATEWAY,
                "port": free_port(),
                "readOnlyPort": 0,
                "healthzPort": 0,
                "authentication": {
                    "anonymous": {"enabled": False},
                    "webhook": {"enabled": True},
                    "x509": {"clientCAFile": str(self.apiserver.pki / "ca.crt")},
                },
                "authorization": {"mode": "Webhook"},
                "resolvConf": str(resolv),
                "podLogsDir": str(self.workdir / "pod-logs"),
                # The images are imported, not pulled: never collect them; and a full disk of
                # the machine's is not the pods' doing.
                "imageGCHighThresholdPercent": 100,
                "imageGCLowThresholdPercent": 99,
                "evictionHard": {
                    "memory.available": "100Mi",
                    "nodefs.available": "1%",
                    "imagefs.available": "1%",
                    "nodefs.inodesFree": "1%",
                },
            },
        )
        kubeconfig = self.apiserver.component_kubeconfig(
            f"system:node:{NODE_NAME}", ("system:nodes",)
        )
        return [
            str(KUBELET.ensure()),
            f"--config={config}",
            f"--kubeconfig={kubeconfig}",
            f"--root-dir={self.workdir / 'kubelet'}",
            f"--cert-dir={self.workdir / 'kubelet' / 'pki'}",  # not under --root-dir by default
            f"--hostname-override={NODE_NAME}",
            f"--node-ip={GATEWAY}",
        ]

    def _controller_manager_command(self) -> list[str]:
        pki = self.apiserver.pki
        return [
            str(KUBE_CONTROLLER_MANAGER.ensure()),
            f"--kubeconfig={self.apiserver.component_kubeconfig('system:kube-controller-manager')}",
            "--secure-port=0",
            "--leader-elect=false",
            # Each controller acts with its own ServiceAccount's token (signed with the key the
            # API server checks), and pods' tokens come with the CA that verifies the server.
            "--use-service-account-credentials=true",
            f"--service-account-private-key-file={pki / 'sa.key'}",
            f"--root-ca-file={pki / 'ca.crt'}",
            f"--cluster-signing-cert-file={pki / 'ca.crt'}",
            f"--cluster-signing-key-file={pki / 'ca.key'}",
        ]

    def _scheduler_command(self) -> list[str]:
        return [
            str(KUBE_SCHEDULER.ensure()),
            f"--kubeconfig={self.apiserver.component_kubeconfig('system:kube-scheduler')}",
            "--secure-port=0",
            "--leader-elect=false",
        ]

    def _proxy_command(self, health_port: int) -> list[str]:
        config = self._write(
            "kube-proxy.yaml",
            {
                "apiVersion": "kubeproxy.config.k8s.io/v1alpha1",
                "kind": "KubeProxyConfiguration",
                "clientConnection": {
                    "kubeconfig": str(self.apiserver.component_kubeconfig("system:kube-proxy"))
                },
                "hostnameOverride": NODE_NAME,
                "mode": "iptables",
                "clusterCIDR": POD_SUBNET,
                "healthzBindAddress": f"127.0.0.1:{health_port}",
                "metricsBindAddress": f"127.0.0.1:{free_port()}",
                # Leave the host's conntrack settings and route_localnet as they are.
                "conntrack": {
                    "maxPerCore": 0,
                    "tcpEstablishedTimeout": "0s",
                    "tcpCloseWaitTimeout": "0s",
                },
                "iptables": {"localhostNodePorts": False},
            },
        )
        return [str(KUBE_PROXY.ensure()), f"--config={config}"]

    def _wait_ready(self, proxy_health: int, timeout: float) -> None:
        """Until the node is Ready, kube-proxy has written the Services' rules and the
        `default` ServiceAccount exists (a pod is refused without it)."""
        api = api_client(self.kubeconfig)
        core = client.CoreV1Api(api)

        def ready() -> bool:
            try:
                node = core.read_node(NODE_NAME)
                core.read_namespaced_service_account("default", "default")
                url = f"http://127.0.0.1:{proxy_health}/healthz"
                with urllib.request.urlopen(url, timeout=2) as response:
                    synced = response.status == 200
            except Exception:
                return False
            status = node.status.conditions if node.status else None
            conditions = {c.type: c.status for c in status or []}
            return synced and conditions.get("Ready") == "True"

        try:
            self.processes["kubelet"].wait_until(ready, timeout, "a Ready node")
        finally:
            api.close()

    def stop(self) -> list[str]:
        """Stop everything and restore the host; returns what could not be restored."""
        self._delete_pods()
        for name in ("kube-controller-manager", "kube-scheduler", "kube-proxy", "kubelet"):
            if process := self.processes.pop(name, None):
                process.stop()
        if self.record.exists():  # kube-proxy's own rules, before the record's check
            subprocess.run([str(KUBE_PROXY.ensure()), "--cleanup"], capture_output=True)
        if self.containerd is not None:
            self.containerd.stop()
        self.apiserver.stop()
        hoststate.unmount_below(self.workdir)
        self.running.unlink(missing_ok=True)
        problems = hoststate.restore(self.record)
        if self._lock is not None:
            self._lock.close()
            self._lock = None
        for problem in problems:
            progress(f"not restored: {problem}")
        return problems

    def _delete_pods(self, timeout: float = 60.0) -> None:
        """Delete every pod through the API (the controllers stopped first, so none comes
        back) and wait until the kubelet has stopped them: their sandboxes' network goes with
        them."""
        if "kubelet" not in self.processes:
            return
        for name in ("kube-controller-manager", "kube-scheduler"):
            if process := self.processes.pop(name, None):
                process.stop()
        api = api_client(self.kubeconfig)
        core = client.CoreV1Api(api)
        try:
            for pod in core.list_pod_for_all_namespaces().items:
                meta = pod.metadata
                assert meta is not None and meta.name and meta.namespace
                core.delete_namespaced_pod(meta.name, meta.namespace, grace_period_seconds=1)
            deadline = time.monotonic() + timeout
            while core.list_pod_for_all_namespaces().items and time.monotonic() < deadline:
                time.sleep(0.5)
        except Exception as error:  # the API server may be gone already
            progress(f"could not delete the pods: {error}")
        finally:
            api.close()

    def remove(self) -> list[str]:
        problems = self.stop()
        shutil.rmtree(self.workdir, ignore_errors=True)
        return problems


def run_until_stopped(out: TextIO) -> None:
    """`kafka-mirror dev node`: a node in the foreground, its exports printed, until Ctrl-C or
    SIGTERM; then the host is restored."""
    node = KubeNode(_node_dir() / "run")
    shutil.rmtree(node.workdir, ignore_errors=True)  # a run that did not stop cleanly

    def interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    signal.signal(signal.SIGTERM, interrupt)
    node.start()
    try:
        print(f"export KUBECONFIG={node.kubeconfig}", file=out)
        print(f"export KAFKA_MIRROR_NODE_IMAGE={node.image}", file=out)
        print(f"export KAFKA_MIRROR_NODE_AUDIT_IMAGE={node.audit_image}", file=out, flush=True)
        progress(f"node {NODE_NAME} runs (pods reach this host at {GATEWAY}); Ctrl-C stops it")
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        pass
    finally:
        node.remove()
        progress("node stopped, host restored")
