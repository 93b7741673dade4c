"""The operator end to end: real kube-apiserver, real Kafka A and B, the real operator process,
and the worker pods run as local processes exactly as the Deployments it wrote say."""

from __future__ import annotations

import base64
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client

from kafka_mirror.api.models import API_VERSION
from kafka_mirror.devstack.kafka import SCRAM_MECHANISM, SCRAM_PASSWORD, SCRAM_USER, KafkaCluster
from kafka_mirror.devstack.kube import KubeApiServer
from kafka_mirror.devstack.kubelet import LocalKubelet
from kafka_mirror.kube import apply
from tests.helpers.kafka import consume, create_topics, end_offsets, produce, records, unique
from tests.helpers.kubectl import kubectl as run_kubectl
from tests.helpers.operator import OperatorProcess, condition, exists, get_custom
from tests.helpers.worker import wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.kube]


@pytest.fixture
def operator(
    kube_apiserver: KubeApiServer, namespace: str, tmp_path: Path
) -> Iterator[OperatorProcess]:
    process = OperatorProcess(kube_apiserver.kubeconfig, namespace, tmp_path).start()
    yield process
    if process.running():
        process.stop()
    print(f"----- operator log -----\n{process.log()[-6000:]}")


@pytest.fixture
def kubelet(kube_api: client.ApiClient, namespace: str, tmp_path: Path) -> Iterator[LocalKubelet]:
    local = LocalKubelet(kube_api, namespace, tmp_path / "pods").start()
    yield local
    pods = [pod for pods in local.pods.values() for pod in pods]
    local.stop()
    for pod in pods:
        print(f"----- pod {pod.name} (restarts {pod.restarts}) -----\n{pod.log()[-3000:]}")


class Kubectl:
    def __init__(self, binary: Path, kubeconfig: Path, namespace: str) -> None:
        self.binary, self.kubeconfig, self.namespace = binary, kubeconfig, namespace

    def __call__(self, *args: str, timeout: float = 120) -> str:
        result = run_kubectl(
            self.binary, self.kubeconfig, "-n", self.namespace, *args, timeout=timeout
        )
        return result.stdout


@pytest.fixture
def kc(kubectl: Path, kube_apiserver: KubeApiServer, namespace: str) -> Kubectl:
    return Kubectl(kubectl, kube_apiserver.kubeconfig, namespace)


def mirror(
    name: str, namespace: str, source: dict[str, Any], target: dict[str, Any], **spec: Any
) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "KafkaMirror",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "source": {
                "alias": "A",
                # Fast rebalances between replicas in tests.
                "config": {"session.timeout.ms": "6000", "heartbeat.interval.ms": "500"},
                **source,
            },
            "target": {"alias": "B", **target},
            "refreshTopicsIntervalSeconds": 1,
            "checkpoints": {"intervalSeconds": 1},
            **spec,
        },
    }


def selection(
    name: str, namespace: str, mirror_name: str, includes: list[str], excludes: tuple[str, ...] = ()
) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "MirrorTopicSelection",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"mirror": mirror_name, "includes": includes, "excludes": list(excludes)},
    }


def secret(name: str, namespace: str, **data: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": name, "namespace": namespace},
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in data.items()},
    }


def status_of(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return dict(get_custom(api, namespace, "kafkamirrors", name).get("status", {}))


def remote_end(cluster: KafkaCluster, topic: str) -> int:
    return sum(end_offsets(cluster.bootstrap_servers, topic).values())


# --- the main path --------------------------------------------------------------------------


def test_a_mirror_and_its_selection_run_workers_that_mirror_and_report_status(
    kafka_a: KafkaCluster,
    kafka_b: KafkaCluster,
    kube_api: client.ApiClient,
    namespace: str,
    operator: OperatorProcess,
    kubelet: LocalKubelet,
    kc: Kubectl,
) -> None:
    p = unique()
    topics = [f"{p}.orders", f"{p}.payments"]
    create_topics(kafka_a.bootstrap_servers, topics, partitions=3)
    create_topics(kafka_a.bootstrap_servers, [f"{p}.scratch"])
    apply(kube_api, secret("source-login", namespace, password=SCRAM_PASSWORD))
    source = {
        "bootstrapServers": kafka_a.sasl_bootstrap_servers,
        "sasl": {
            "mechanism": SCRAM_MECHANISM,
            "username": SCRAM_USER,
            "passwordSecret": {"name": "source-login", "key": "password"},
        },
    }
    target = {"bootstrapServers": kafka_b.bootstrap_servers}
    apply(kube_api, mirror("a-to-b", namespace, source, target, replicas=2))
    apply(
        kube_api,
        selection("orders", namespace, "a-to-b", [f"{re.escape(p)}\\..*"], [".*\\.scratch"]),
    )

    apps, core = client.AppsV1Api(kube_api), client.CoreV1Api(kube_api)
    wait_for(
        lambda: exists(apps.read_namespaced_deployment, "a-to-b-worker", namespace),
        30,
        "the worker Deployment",
    )
    for topic in topics:
        produce(kafka_a.bootstrap_servers, topic, records(300, partitions=3))
    produce(kafka_a.bootstrap_servers, f"{p}.scratch", records(5, partitions=1))
    for topic in topics:
        assert len(consume(kafka_b.bootstrap_servers, f"{topic}.A", 300, timeout=90)) == 300

    kc("wait", "--for=condition=Ready", "kafkamirror/a-to-b", "--timeout=60s")
    wait_for(
        lambda: (
            status_of(kube_api, namespace, "a-to-b").get("activeTopics") == topics
            and status_of(kube_api, namespace, "a-to-b").get("totalLag") == 0
        ),
        30,
        "status to list the active topics with no lag",
    )
    status = status_of(kube_api, namespace, "a-to-b")
    assert {t["name"]: t["lag"] for t in status["topics"]} == dict.fromkeys(topics, 0)
    assert all(t["latencySeconds"] == 0 for t in status["topics"])
    assert (status["replicas"], status["readyReplicas"]) == (2, 2)
    assert len(kubelet.pods_of("a-to-b-worker")) == 2
    assert (
        condition(get_custom(kube_api, namespace, "kafkamirrors", "a-to-b"), "Ready")["reason"]
        == "Mirroring"
    )

    table = kc("get", "kafkamirrors")
    header, row = table.splitlines()[:2]
    assert header.split()[:4] == ["NAME", "READY", "REPLICAS", "ACTIVE"]
    assert row.split()[:5] == ["a-to-b", "True", "2", "2", "0"]

    chosen = get_custom(kube_api, namespace, "mirrortopicselections", "orders")
    assert chosen["status"]["matchedTopics"] == topics
    assert condition(chosen, "Ready")["status"] == "True"

    # Credentials stay in their Secret: the pods reference it, nothing else holds the value.
    config_map = core.read_namespaced_config_map("a-to-b-worker-config", namespace)
    assert SCRAM_PASSWORD not in yaml.safe_dump(config_map.data)
    deployment = apps.read_namespaced_deployment("a-to-b-worker", namespace)
    env = deployment.spec.template.spec.containers[0].env
    assert [e.value_from.secret_key_ref.name for e in env] == ["source-login"]
    assert SCRAM_PASSWORD not in str(status) and SCRAM_PASSWORD not in operator.log()
    for child in ("a-to-b-metrics",):
        assert exists(core.read_namespaced_service, child, namespace)
    assert exists(client.BatchV1Api(kube_api).read_namespaced_cron_job, "a-to-b-audit", namespace)
