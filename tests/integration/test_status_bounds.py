"""A mirror over 5,000 topics, run by the real operator and a worker pod on the real node, on a
pair of Kafka clusters of its own: the status counts every topic exactly while its lists stay
bounded, so the object stays far below what the API server accepts."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from confluent_kafka import Producer
from kubernetes import client

from kafka_mirror.api.models import MAX_TOPIC_NAME_LENGTH
from kafka_mirror.controller.status import MAX_TOPIC_NAMES, MAX_TOPIC_STATUSES
from kafka_mirror.kube import apply
from kafka_mirror_dev.kafka import LocalKafka
from kafka_mirror_dev.node import GATEWAY, KubeNode
from kafka_mirror_dev.operator import OperatorProcess
from tests.helpers.kafka import create_topics
from tests.helpers.objects import get_custom, mirror, selection, status_of
from tests.helpers.worker import wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.kube, pytest.mark.node]
TOPICS = 5_000
# etcd's default request limit, which bounds every object the API server stores.
API_SERVER_OBJECT_LIMIT = 1_572_864


@pytest.fixture(scope="module")
def wide_clusters(
    kube_node: KubeNode, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[tuple[LocalKafka, LocalKafka]]:
    """Clusters of their own, so 5,000 topics do not slow the session's other tests; on the
    node's bridge address, where the worker pod reaches them."""
    clusters = [
        LocalKafka(a, tmp_path_factory.mktemp(f"wide-{a}"), host=GATEWAY) for a in ("A", "B")
    ]
    for cluster in clusters:
        cluster.start()
    yield clusters[0], clusters[1]
    for cluster in clusters:
        cluster.remove()


def size_of(obj: object) -> int:
    return len(json.dumps(obj).encode())


def test_a_mirror_of_5000_topics_keeps_its_status_small_and_its_counts_exact(
    wide_clusters: tuple[LocalKafka, LocalKafka],
    node_api: client.ApiClient,
    node_namespace: str,
    node_operator: OperatorProcess,
    tmp_path: Path,
) -> None:
    kafka_a, kafka_b = wide_clusters
    # Names as long as a remote name (`<name>.A`) can be: the worst case for the status size.
    names = [f"wide.{i:04d}.".ljust(MAX_TOPIC_NAME_LENGTH - 2, "x") for i in range(TOPICS)]
    for start in range(0, TOPICS, 500):
        create_topics(kafka_a.bootstrap_servers, names[start : start + 500])
    producer = Producer({"bootstrap.servers": kafka_a.bootstrap_servers, "linger.ms": 50})
    for name in names:
        producer.produce(name, value=b"one record per topic")
    assert producer.flush(120) == 0

    plain = {"bootstrapServers": kafka_a.bootstrap_servers}
    target = {"bootstrapServers": kafka_b.bootstrap_servers}
    apply(node_api, mirror("wide", node_namespace, plain, target))
    apply(node_api, selection("wide", node_namespace, "wide", ["wide\\..*"]))
    wait_for(
        lambda: status_of(node_api, node_namespace, "wide").get("activeTopicCount") == TOPICS,
        600,
        f"all {TOPICS} topics active",
        every=5,
    )
    found = get_custom(node_api, node_namespace, "kafkamirrors", "wide")
    status = found["status"]
    assert len(status["activeTopics"]) == MAX_TOPIC_NAMES
    assert len(status["topics"]) <= MAX_TOPIC_STATUSES
    chosen = get_custom(node_api, node_namespace, "mirrortopicselections", "wide")
    assert chosen["status"]["matchedTopicCount"] == TOPICS
    assert len(chosen["status"]["matchedTopics"]) == MAX_TOPIC_NAMES
    for obj in (found, chosen):
        assert size_of(obj) < API_SERVER_OBJECT_LIMIT // 5
    print(
        f"{TOPICS} topics of {len(names[0])} characters: KafkaMirror {size_of(found):,} bytes, "
        f"MirrorTopicSelection {size_of(chosen):,} bytes "
        f"(limit {API_SERVER_OBJECT_LIMIT:,})"
    )
