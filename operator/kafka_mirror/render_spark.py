"""The audit on Spark on Kubernetes (`spec.audit.spark.master: k8s://…`), as pure builders.

The audit job's pod is Spark's driver in client mode: it asks the API server for executor pods
of the audit image in the mirror's namespace (`kafka-mirror executor`, audit/executor.py), from
a pod template in the mirror's ConfigMap that gives them the same security context as every
other pod of the mirror, its labels and no service-account token. The executors reach the driver
at its pod IP on two fixed ports; each is owned by the driver's pod, so however the job ends,
Kubernetes' garbage collector removes them with it (and Spark deletes them itself when it stops).
The audit's ServiceAccount may then manage pods in the namespace, nothing else more (and the
chart's admission policy bounds which pods: its own executors).

Spark's RPC is authenticated and encrypted (`spark.authenticate`, `spark.network.crypto`): the
driver makes a secret per run and gives it to the executor pods it creates, so a process that
reaches the driver's ports without it cannot register as an executor and be sent tasks, which
carry the Kafka credentials; nor can it read them on the wire.
"""

from __future__ import annotations

from typing import Any

from kafka_mirror.api.models import KafkaMirrorSpec
from kafka_mirror.api.worker_config import yaml_text

EXECUTOR_TEMPLATE = "executor-pod.yaml"  # its key in the mirror's ConfigMap
EXECUTOR_CONTAINER = "executor"
EXECUTOR_COMPONENT = "audit-executor"  # the executor pods' app.kubernetes.io/component
DRIVER_PORT, BLOCK_MANAGER_PORT = 7078, 7079
ACCOUNT = "/var/run/secrets/kubernetes.io/serviceaccount"
# Where the driver finds itself (the downward API); audit/spark.py reads them.
POD_ENV = {
    "KAFKA_MIRROR_POD_NAME": "metadata.name",
    "KAFKA_MIRROR_POD_NAMESPACE": "metadata.namespace",
    "KAFKA_MIRROR_POD_IP": "status.podIP",
}


def on_kubernetes(spec: KafkaMirrorSpec) -> bool:
    return spec.audit.spark.master.startswith("k8s://")


def driver_conf(spec: KafkaMirrorSpec, image: str, config_dir: str) -> dict[str, str]:
    """What the CronJob tells the driver: the executors' image, count, size and template."""
    executors = spec.audit.spark.executors
    conf = {
        "spark.kubernetes.container.image": image,
        "spark.kubernetes.container.image.pullPolicy": spec.worker.image_pull_policy,
        "spark.kubernetes.executor.podTemplateFile": f"{config_dir}/{EXECUTOR_TEMPLATE}",
        "spark.kubernetes.executor.podTemplateContainerName": EXECUTOR_CONTAINER,
        "spark.executor.instances": str(executors.instances),
        "spark.executor.cores": str(executors.cores),
        "spark.executor.memory": executors.memory,
        "spark.authenticate": "true",
        "spark.network.crypto.enabled": "true",
        # No fallback to SASL (DIGEST-MD5, unencrypted here): a peer that makes the handshake
        # fail could otherwise have the tasks, and their Kafka credentials, sent in the clear.
        "spark.network.crypto.saslFallback": "false",
    }
    if executors.cpu_request is not None:  # else Spark requests `cores` whole CPUs
        conf["spark.kubernetes.executor.request.cores"] = executors.cpu_request
    return conf


def pod_conf(environ: dict[str, str]) -> dict[str, str]:
    """What the driver learns in its pod: where executors reach it, and who it is (its
    ServiceAccount's token, the only credential it has; no ConfigMap nor volume claims of its
    own, so it needs rights on pods alone)."""
    return {
        "spark.driver.host": environ["KAFKA_MIRROR_POD_IP"],
        "spark.driver.bindAddress": "0.0.0.0",
        "spark.driver.port": str(DRIVER_PORT),
        "spark.driver.blockManager.port": str(BLOCK_MANAGER_PORT),
        "spark.kubernetes.namespace": environ["KAFKA_MIRROR_POD_NAMESPACE"],
        "spark.kubernetes.driver.pod.name": environ["KAFKA_MIRROR_POD_NAME"],
        "spark.kubernetes.authenticate.caCertFile": f"{ACCOUNT}/ca.crt",
        "spark.kubernetes.authenticate.oauthTokenFile": f"{ACCOUNT}/token",
        "spark.kubernetes.executor.disableConfigMap": "true",
        "spark.kubernetes.driver.ownPersistentVolumeClaim": "false",
        "spark.kubernetes.driver.reusePersistentVolumeClaim": "false",
    }


def pod_env() -> list[dict[str, Any]]:
    return [
        {"name": name, "valueFrom": {"fieldRef": {"fieldPath": path}}}
        for name, path in POD_ENV.items()
    ]


def executor_template(pod: dict[str, Any], labels: dict[str, str], scratch: str) -> str:
    """The executors' pod template, from the audit pod (`pod`): its security context, node
    placement and scratch space, and the executors' `labels`; Spark adds its own labels, the
    image, command arguments, environment and resources."""
    audit = pod["containers"][0]
    container = {
        "name": EXECUTOR_CONTAINER,
        "command": audit["command"],
        "securityContext": audit["securityContext"],
        "volumeMounts": [{"name": "tmp", "mountPath": "/tmp"}],
    }
    spec: dict[str, Any] = {
        "automountServiceAccountToken": False,
        "securityContext": pod["securityContext"],
        "containers": [container],
        "volumes": [{"name": "tmp", "emptyDir": {"sizeLimit": scratch}}],
    }
    for placement in ("nodeSelector", "tolerations"):
        if placement in pod:
            spec[placement] = pod[placement]
    template = {"apiVersion": "v1", "kind": "Pod", "metadata": {"labels": labels}, "spec": spec}
    return yaml_text(template, sort_keys=True)


def driver_rule() -> dict[str, Any]:
    """The driver's rights beyond the audit's: its executor pods (and its own pod, read)."""
    return {
        "apiGroups": [""],
        "resources": ["pods"],
        "verbs": ["create", "get", "list", "watch", "delete", "deletecollection"],
    }
