"""What tests do with pods on the real node (devstack/node.py): list a mirror's worker pods,
read a pod's log, run a CronJob's job now, and kill pods the way a cluster does (a container
killed under the kubelet, a pod deleted)."""

from __future__ import annotations

from typing import Any

from kubernetes import client

from kafka_mirror.devstack import pods
from kafka_mirror.devstack.node import KubeNode
from kafka_mirror.render import label_selector

CONTAINER_ID_SCHEME = "containerd://"


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

    def kill_container(self, pod: Any) -> None:
        """SIGKILL the pod's container through containerd, under the kubelet (which restarts it,
        as after an out-of-memory kill)."""
        assert self.node.containerd is not None
        for container in pod.status.container_statuses:
            task = container.container_id.removeprefix(CONTAINER_ID_SCHEME)
            self.node.containerd.ctr("tasks", "kill", "--signal", "SIGKILL", task)

    def delete(self, pod: Any, grace_seconds: int | None = None) -> None:
        self.core.delete_namespaced_pod(
            pod.metadata.name, self.namespace, grace_period_seconds=grace_seconds
        )

    def diagnostics(self) -> str:
        """Every pod's state and log tail, and the namespace's events: shown after a test."""
        return pods.diagnostics(self.api, self.namespace)
