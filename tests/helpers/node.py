"""What tests do with pods on the real node (kafka_mirror_dev/node.py): list a mirror's worker pods,
read a pod's log, run a CronJob's job now, and kill pods the way a cluster does (a container
killed through the runtime, its process killed on the node, a pod deleted)."""

from __future__ import annotations

import os
import signal
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Any

from kubernetes import client

from kafka_mirror.render import label_selector
from kafka_mirror_dev import pods
from kafka_mirror_dev.kafka import LocalKafka
from kafka_mirror_dev.node import KubeNode
from kafka_mirror_dev.operator import OperatorProcess

CONTAINER_ID_SCHEME = "containerd://"
# The node's tests share one node, one after another: the suite's longest line. Its processes
# (the node's parts, their pods, the brokers its tests start) inherit a lower nice value from
# the line's test process, and so a larger share of the cores: beside a CPU hog the three lines
# then ended within 0.2 min of each other. On a quiet machine the line is bound by its own
# waits instead (49.7 min with it, 49.8 without).
NODE_LINE_NICENESS = -5


def favour_the_node_line() -> None:
    """The calling test process, and every process it starts from now on, at
    NODE_LINE_NICENESS (the node's tests run as root, which may lower it)."""
    with suppress(PermissionError):
        os.setpriority(os.PRIO_PROCESS, 0, NODE_LINE_NICENESS)


class NodePods:
    """The pods of one namespace on the node."""

    def __init__(self, node: KubeNode, api: client.ApiClient, namespace: str) -> None:
        self.node, self.api, self.namespace = node, api, namespace
        self.core = client.CoreV1Api(api)

    def workers(self, mirror: str) -> list[Any]:
        """The mirror's worker pods that run and are not being deleted."""
        return [
            pod
            for pod in self.core.list_namespaced_pod(
                self.namespace, label_selector=label_selector(mirror)
            ).items
            if pod.metadata.deletion_timestamp is None and pod.status.phase == "Running"
        ]

    @staticmethod
    def running_containers(pod: Any) -> bool:
        """Whether every container of the pod runs now (none restarting)."""
        statuses = pod.status.container_statuses or []
        return bool(statuses) and all(s.state.running for s in statuses)

    def any_workers(self, mirror: str) -> bool:
        """Whether any pod of the mirror's workers is left, stopping ones included."""
        found = self.core.list_namespaced_pod(self.namespace, label_selector=label_selector(mirror))
        return bool(found.items)

    def worker_logs(self, mirror: str) -> str:
        """The logs of the mirror's worker pods, each container's previous run's too (a worker
        that exits is restarted: its own log would be lost)."""
        found = self.core.list_namespaced_pod(self.namespace, label_selector=label_selector(mirror))
        return "\n".join(
            self.log(pod.metadata.name, previous)
            for pod in found.items
            for previous in (True, False)
        )

    def log(self, pod: str, previous: bool = False) -> str:
        return pods.log_of(self.core, self.namespace, pod, previous)

    def run_cronjob(self, cronjob: str, timeout: float = 600) -> tuple[bool, str]:
        """Run the CronJob's job now and wait for it: whether it succeeded, and its log."""
        return pods.run_now(self.api, self.namespace, cronjob, timeout)

    def _tasks(self, pod: Any) -> list[str]:
        """The containerd tasks of the pod's containers."""
        statuses = pod.status.container_statuses or []
        return [
            s.container_id.removeprefix(CONTAINER_ID_SCHEME) for s in statuses if s.container_id
        ]

    def kill_container(self, pod: Any) -> None:
        """SIGKILL the pod's containers through containerd (as the kubelet's runtime kills a
        container); the kubelet restarts them in the same pod."""
        assert self.node.containerd is not None
        for task in self._tasks(pod):
            self.node.containerd.ctr("tasks", "kill", "--signal", "SIGKILL", task)

    def kill_process(self, pod: Any) -> None:
        """SIGKILL the containers' processes from the host, by pid, as the kernel's OOM killer
        does: the runtime only sees them exit."""
        assert self.node.containerd is not None
        pids = {}  # task → its process on the host
        for line in self.node.containerd.ctr("tasks", "list").splitlines()[1:]:
            task, pid = line.split()[:2]
            pids[task] = int(pid)
        for task in self._tasks(pod):
            os.kill(pids[task], signal.SIGKILL)

    def delete(self, pod: Any, grace_seconds: int | None = None) -> None:
        self.core.delete_namespaced_pod(
            pod.metadata.name, self.namespace, grace_period_seconds=grace_seconds
        )

    def diagnostics(self) -> str:
        """Every pod's state and log tail, and the namespace's events: shown after a test."""
        return pods.diagnostics(self.api, self.namespace)


@dataclass
class NodeStack:
    """What a test of mirrors on the node works with: Kafka A and B on the bridge address, an
    admin client of the node's API server, a fresh namespace, the operator watching it, and the
    namespace's pods."""

    kafka_a: LocalKafka
    kafka_b: LocalKafka
    api: client.ApiClient
    namespace: str
    operator: OperatorProcess
    pods: NodePods


@contextmanager
def region_gone(cluster: LocalKafka) -> Iterator[None]:
    """Every packet to the cluster's client ports dropped by the host's firewall, as when its
    region is gone: connections hang until their timeouts instead of being refused at once (a
    stopped broker refuses them). The rule goes when the block ends."""
    ports = ",".join(
        str(port)
        for node in cluster.nodes
        for port in (node.port, node.sasl_port, node.ssl_port, node.sasl_ssl_port)
    )
    rule = ["INPUT", "-d", cluster.host, "-p", "tcp", "-m", "multiport", "--dports", ports]
    subprocess.run(["iptables", "-I", *rule, "-j", "DROP"], check=True)
    try:
        yield
    finally:
        subprocess.run(["iptables", "-D", *rule, "-j", "DROP"], check=True)
