"""What the operator reads from Kafka for the status, against a real cluster."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import Consumer, TopicPartition

from kafka_mirror.kafka.observe import ClusterReader
from kafka_mirror_dev.kafka import LocalKafka
from tests.helpers.kafka import create_topics, produce, records, unique

pytestmark = [pytest.mark.kafka]


def test_the_latency_probe_finds_the_oldest_pending_record_on_every_refresh(
    kafka_a: LocalKafka,
) -> None:
    topic = unique()
    create_topics(kafka_a.bootstrap_servers, [topic], partitions=3)
    produce(kafka_a.bootstrap_servers, topic, records(30, partitions=3))
    reader = ClusterReader("A", {"bootstrap.servers": kafka_a.bootstrap_servers})
    committer = Consumer({"bootstrap.servers": kafka_a.bootstrap_servers, "group.id": topic})
    probes = []
    try:
        # A new position each time: a position probed before is remembered, not read again.
        for position in range(3):
            committer.commit(
                offsets=[TopicPartition(topic, p, position) for p in range(3)],
                asynchronous=False,
            )
            probes.append(reader.oldest_pending_timestamps(reader.progress(topic, {topic: 3})))
        again = reader.oldest_pending_timestamps(reader.progress(topic, {topic: 3}))
    finally:
        committer.close()
        reader.close()
    # The same three partitions each time (the probe once paused them for good after the first).
    assert all(sorted(found) == [(topic, p) for p in range(3)] for found in probes), probes
    assert again == probes[-1]


def test_reads_of_many_mirrors_at_once_each_get_their_own_partitions_right(
    kafka_a: LocalKafka,
) -> None:
    topics = [unique() for _ in range(8)]
    create_topics(kafka_a.bootstrap_servers, topics, partitions=2)
    for count, topic in enumerate(topics, start=1):
        produce(kafka_a.bootstrap_servers, topic, records(count * 2, partitions=2))
    reader = ClusterReader("A", {"bootstrap.servers": kafka_a.bootstrap_servers})
    try:
        with ThreadPoolExecutor(8) as pool:  # one reader, as mirrors on one cluster share it
            ranges = list(pool.map(lambda t: reader.log_ranges({t: 2}), topics * 4))
    finally:
        reader.close()
    for count, found in enumerate(ranges, start=1):
        topic = topics[(count - 1) % len(topics)]
        expected = (count - 1) % len(topics) + 1
        assert found == {(topic, 0): (0, expected), (topic, 1): (0, expected)}, found
