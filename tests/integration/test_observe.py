"""What the operator reads from Kafka for the status, against a real cluster."""

from __future__ import annotations

import pytest

from kafka_mirror.devstack.kafka import KafkaCluster
from kafka_mirror.kafka.observe import ClusterReader
from tests.helpers.kafka import create_topics, produce, records, unique

pytestmark = [pytest.mark.kafka]


def test_the_latency_probe_finds_the_oldest_pending_record_on_every_refresh(
    kafka_a: KafkaCluster,
) -> None:
    topic = unique()
    create_topics(kafka_a.bootstrap_servers, [topic], partitions=3)
    produce(kafka_a.bootstrap_servers, topic, records(30, partitions=3))
    reader = ClusterReader("A", {"bootstrap.servers": kafka_a.bootstrap_servers})
    try:
        probes = [
            reader.oldest_pending_timestamps(reader.progress("nobody", {topic: 3}))
            for _ in range(3)
        ]
    finally:
        reader.close()
    # The same three partitions each time (the probe once paused them for good after the first).
    assert all(sorted(found) == [(topic, p) for p in range(3)] for found in probes), probes
    assert probes[0] == probes[1] == probes[2]
