"""The real Kafka clusters A and B of the dev stack: produce, consume and admin work on both."""

from __future__ import annotations

import time
import uuid

import pytest
from confluent_kafka.admin import AdminClient, ConfigResource

from kafka_mirror.devstack.kafka import KafkaCluster
from tests.helpers.kafka import Record, consume, create_topics, produce

pytestmark = pytest.mark.kafka


@pytest.fixture(params=["A", "B"])
def cluster(request: pytest.FixtureRequest) -> KafkaCluster:
    return request.getfixturevalue(f"kafka_{request.param.lower()}")  # type: ignore[no-any-return]


def test_clusters_are_distinct(kafka_a: KafkaCluster, kafka_b: KafkaCluster) -> None:
    # Keep each admin client referenced until its future resolves.
    admins = [AdminClient({"bootstrap.servers": c.bootstrap_servers}) for c in (kafka_a, kafka_b)]
    ids = {admin.describe_cluster().result(timeout=10).cluster_id for admin in admins}
    assert len(ids) == 2


def test_produce_then_consume_keeps_every_record_field(cluster: KafkaCluster) -> None:
    topic = f"roundtrip-{uuid.uuid4().hex[:8]}"
    create_topics(cluster.bootstrap_servers, [topic], partitions=3)
    now_ms = int(time.time() * 1000)
    sent = [
        Record(
            key=f"k{i}".encode(),
            value=f"v{i}".encode(),
            headers=(("h", f"{i}".encode()),),
            timestamp=now_ms - 1000 + i,  # recent: older records fall to retention
            partition=i % 3,
        )
        for i in range(30)
    ]
    produce(cluster.bootstrap_servers, topic, sent)
    received = consume(cluster.bootstrap_servers, topic, len(sent))
    strip = {(r.key, r.value, r.headers, r.timestamp, r.partition) for r in received}
    assert strip == {(r.key, r.value, r.headers, r.timestamp, r.partition) for r in sent}


def test_admin_creates_and_describes_topics_and_configs(cluster: KafkaCluster) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    topic = f"admin-{uuid.uuid4().hex[:8]}"
    create_topics(
        cluster.bootstrap_servers,
        [topic],
        partitions=4,
        config={"cleanup.policy": "compact", "retention.ms": "3600000"},
    )
    metadata = admin.list_topics(topic, timeout=10)
    assert len(metadata.topics[topic].partitions) == 4
    resource = ConfigResource(ConfigResource.Type.TOPIC, topic)
    configs = admin.describe_configs([resource])[resource].result(timeout=10)
    assert configs["cleanup.policy"].value == "compact"
    assert configs["retention.ms"].value == "3600000"
