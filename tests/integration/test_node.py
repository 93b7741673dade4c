"""The real node (kafka_mirror_dev/node.py): our image runs under the securityContext the operator
renders, and the parts the stand-in kubelet imitated — the Deployment, ReplicaSet, CronJob and
Job controllers, the garbage collector, ServiceAccount tokens and in-cluster configuration, the
pod network to Kafka — are the real ones."""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable
from typing import Any, TypeVar

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient, NewTopic
from kubernetes import client

from kafka_mirror.api.models import KafkaMirrorSpec
from kafka_mirror.render import IMAGE_USER, build_deployment, build_worker_config
from kafka_mirror_dev.kafka import LocalKafka
from kafka_mirror_dev.node import GATEWAY, KubeNode

pytestmark = [pytest.mark.kube, pytest.mark.node]

T = TypeVar("T")

# What a container of the image reports about itself: who it runs as, its capabilities, and
# whether it can write its root filesystem and /tmp (the rendered emptyDir).
_SELF_REPORT = """
import json, os
def writable(path):
    try:
        open(path, "w").close()
    except OSError:
        return False
    return True
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
print(json.dumps({
    "uid": os.getuid(), "gid": os.getgid(),
    "capabilities": [int(status[k], 16) for k in ("CapEff", "CapPrm", "CapBnd")],
    "no_new_privileges": status["NoNewPrivs"].strip() == "1",
    "root_writable": writable("/probe"), "tmp_writable": writable("/tmp/probe"),
}))
"""


def _eventually(probe: Callable[[], T | None], timeout: float, what: str) -> T:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if (found := probe()) is not None:
            return found
        time.sleep(0.5)
    raise AssertionError(f"not within {timeout:.0f}s: {what}")


def _rendered_pod(node: KubeNode, namespace: str) -> dict[str, Any]:
    """The pod template of a worker Deployment as the operator renders it, with our image."""
    spec = KafkaMirrorSpec.model_validate(
        {
            "source": {"alias": "A", "bootstrapServers": f"{GATEWAY}:9092"},
            "target": {"alias": "B", "bootstrapServers": f"{GATEWAY}:9093"},
            "worker": {"image": node.image, "imagePullPolicy": "Never"},
        }
    )
    _, envs = build_worker_config(namespace, "m", spec, [])
    pod: dict[str, Any] = build_deployment(namespace, "m", spec, envs, "checksum")["spec"][
        "template"
    ]["spec"]
    # No worker configuration here: the commands below need none.
    pod["volumes"] = [v for v in pod["volumes"] if v["name"] != "config"]
    for container in pod["containers"]:
        container["volumeMounts"] = [m for m in container["volumeMounts"] if m["name"] == "tmp"]
    return pod


def _with_command(pod: dict[str, Any], *commands: tuple[str, list[str]]) -> dict[str, Any]:
    """The pod with one container per (name, command), each like the rendered one but for the
    worker's probes (these commands serve no /readyz)."""
    template = {
        key: value
        for key, value in pod["containers"][0].items()
        if key not in ("livenessProbe", "readinessProbe")
    }
    containers = [
        {**template, "name": name, "command": command, "args": []} for name, command in commands
    ]
    return {**pod, "containers": containers}


def _run_pod(api: client.ApiClient, namespace: str, spec: dict[str, Any]) -> dict[str, str]:
    """Run a pod to completion; each container's log."""
    core = client.CoreV1Api(api)
    name = f"p-{uuid.uuid4().hex[:8]}"
    body = {"metadata": {"name": name}, "spec": {**spec, "restartPolicy": "Never"}}
    core.create_namespaced_pod(namespace, body)

    def finished() -> str | None:
        phase = core.read_namespaced_pod(name, namespace).status.phase
        return phase if phase in ("Succeeded", "Failed") else None

    phase = _eventually(finished, 120, f"pod {name} finished")
    logs = {
        c["name"]: core.read_namespaced_pod_log(name, namespace, container=c["name"])
        for c in spec["containers"]
    }
    assert phase == "Succeeded", logs
    return logs


def test_the_image_runs_under_the_rendered_security_context(
    kube_node: KubeNode, node_api: client.ApiClient, node_namespace: str
) -> None:
    pod = _rendered_pod(kube_node, node_namespace)
    assert pod["securityContext"]["runAsUser"] == IMAGE_USER
    logs = _run_pod(
        node_api,
        node_namespace,
        _with_command(
            pod, ("help", ["kafka-mirror", "--help"]), ("self", ["python3", "-c", _SELF_REPORT])
        ),
    )
    assert "usage: kafka-mirror" in logs["help"]
    report = json.loads(logs["self"])
    assert report == {
        "uid": IMAGE_USER,
        "gid": IMAGE_USER,
        "capabilities": [0, 0, 0],
        "no_new_privileges": True,
        "root_writable": False,
        "tmp_writable": True,
    }


def test_the_namespaces_refuse_a_pod_below_the_restricted_level(
    kube_node: KubeNode, node_api: client.ApiClient, node_namespace: str
) -> None:
    """Every node test's namespace enforces the restricted level, as the plain manifests' does:
    the pods the operator and the chart make there pass it because they meet it (this pod,
    the rendered worker pod without its security context, is refused)."""
    pod = _rendered_pod(kube_node, node_namespace)
    pod.pop("securityContext")
    for container in pod["containers"]:
        container.pop("securityContext")
    body = {"metadata": {"name": "below-restricted"}, "spec": pod}
    with pytest.raises(client.ApiException) as refused:
        client.CoreV1Api(node_api).create_namespaced_pod(node_namespace, body)
    message = json.loads(refused.value.body)["message"]
    assert refused.value.status == 403 and 'violates PodSecurity "restricted:' in message, message


def _owned_by(items: list[Any], uid: str) -> list[Any]:
    return [i for i in items if any(o.uid == uid for o in i.metadata.owner_references or [])]


def test_a_deployment_becomes_ready_and_its_deletion_collects_replicaset_and_pods(
    kube_node: KubeNode, node_api: client.ApiClient, node_namespace: str
) -> None:
    apps, core = client.AppsV1Api(node_api), client.CoreV1Api(node_api)
    labels = {"app": "sleeper"}
    pod = _with_command(_rendered_pod(kube_node, node_namespace), ("sleep", ["sleep", "3600"]))
    # `sleep` ignores SIGTERM and would hold each pod its whole grace period: the garbage
    # collection is the subject, not the kubelet's grace.
    pod["terminationGracePeriodSeconds"] = 1
    deployment = apps.create_namespaced_deployment(
        node_namespace,
        {
            "metadata": {"name": "sleeper"},
            "spec": {
                "replicas": 2,
                "selector": {"matchLabels": labels},
                "template": {"metadata": {"labels": labels}, "spec": pod},
            },
        },
    )
    _eventually(
        lambda: (
            apps.read_namespaced_deployment("sleeper", node_namespace).status.ready_replicas == 2
            or None
        ),
        90,
        "the Deployment's two replicas Ready",
    )
    replica_sets = _owned_by(
        apps.list_namespaced_replica_set(node_namespace).items, deployment.metadata.uid
    )
    assert len(replica_sets) == 1
    pods = _owned_by(core.list_namespaced_pod(node_namespace).items, replica_sets[0].metadata.uid)
    assert len(pods) == 2

    apps.delete_namespaced_deployment("sleeper", node_namespace)  # background propagation

    def left() -> list[str]:
        replica_sets = apps.list_namespaced_replica_set(node_namespace).items
        pods = core.list_namespaced_pod(node_namespace, label_selector="app=sleeper").items
        return [f"{type(o).__name__} {o.metadata.name}" for o in (*replica_sets, *pods)]

    _eventually(lambda: not left() or None, 90, "the garbage collector removing them")


def test_a_cronjob_fires_a_job_that_completes(
    kube_node: KubeNode, node_api: client.ApiClient, node_namespace: str
) -> None:
    batch = client.BatchV1Api(node_api)
    pod = _with_command(_rendered_pod(kube_node, node_namespace), ("run", ["kafka-mirror", "-h"]))
    batch.create_namespaced_cron_job(
        node_namespace,
        {
            "metadata": {"name": "every-minute"},
            "spec": {
                "schedule": "* * * * *",
                "jobTemplate": {"spec": {"template": {"spec": {**pod, "restartPolicy": "Never"}}}},
            },
        },
    )

    def completed() -> str | None:
        jobs = batch.list_namespaced_job(node_namespace).items
        done = [j.metadata.name for j in jobs if (j.status.succeeded or 0) >= 1]
        return done[0] if done else None

    job = _eventually(completed, 150, "a Job of the CronJob completing")
    _eventually(
        lambda: (
            batch.read_namespaced_cron_job(
                "every-minute", node_namespace
            ).status.last_successful_time
        ),
        30,
        "the CronJob recording its successful run",
    )
    assert job.startswith("every-minute-")


_PRODUCE = """
import sys
from confluent_kafka import Producer
producer = Producer({"bootstrap.servers": sys.argv[1]})
for n in range(10):
    producer.produce("from-pod", value=f"record {n}".encode())
assert producer.flush(30) == 0
print("produced 10")
"""


def test_a_pod_reaches_kafka_on_the_bridge_address(
    kube_node: KubeNode,
    node_api: client.ApiClient,
    node_namespace: str,
    node_kafka_a: LocalKafka,
) -> None:
    admin = AdminClient({"bootstrap.servers": node_kafka_a.bootstrap_servers})
    admin.create_topics([NewTopic("from-pod", 1, 1)])["from-pod"].result(30)
    pod = _rendered_pod(kube_node, node_namespace)
    command = ["python3", "-c", _PRODUCE, node_kafka_a.bootstrap_servers]
    logs = _run_pod(node_api, node_namespace, _with_command(pod, ("produce", command)))
    assert "produced 10" in logs["produce"]

    consumer = Consumer(
        {
            "bootstrap.servers": node_kafka_a.bootstrap_servers,
            "group.id": "check",
            "auto.offset.reset": "earliest",
        }
    )
    consumer.subscribe(["from-pod"])
    values: list[bytes] = []
    deadline = time.monotonic() + 30
    while len(values) < 10 and time.monotonic() < deadline:
        if (message := consumer.poll(1)) is not None and message.error() is None:
            values.append(message.value())
    consumer.close()
    assert sorted(values) == sorted(f"record {n}".encode() for n in range(10))


_LIST_CONFIG_MAPS = """
from pathlib import Path
from kubernetes import client, config
config.load_incluster_config()
namespace = Path("/var/run/secrets/kubernetes.io/serviceaccount/namespace").read_text()
found = client.CoreV1Api().list_namespaced_config_map(namespace).items
print(sorted(c.metadata.name for c in found))
"""


def test_in_cluster_configuration_reaches_the_api_server_with_the_pods_token(
    kube_node: KubeNode, node_api: client.ApiClient, node_namespace: str
) -> None:
    core, rbac = client.CoreV1Api(node_api), client.RbacAuthorizationV1Api(node_api)
    core.create_namespaced_service_account(node_namespace, {"metadata": {"name": "reader"}})
    rbac.create_namespaced_role(
        node_namespace,
        {
            "metadata": {"name": "reader"},
            "rules": [{"apiGroups": [""], "resources": ["configmaps"], "verbs": ["list"]}],
        },
    )
    rbac.create_namespaced_role_binding(
        node_namespace,
        {
            "metadata": {"name": "reader"},
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "reader"},
            "subjects": [{"kind": "ServiceAccount", "name": "reader"}],
        },
    )
    pod = _rendered_pod(kube_node, node_namespace)
    pod |= {"serviceAccountName": "reader", "automountServiceAccountToken": True}
    command = ["python3", "-c", _LIST_CONFIG_MAPS]
    logs = _run_pod(node_api, node_namespace, _with_command(pod, ("list", command)))
    # kube-root-ca.crt: published in every namespace by the controller manager.
    assert logs["list"].strip() == "['kube-root-ca.crt']"
