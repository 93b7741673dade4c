"""What the operator reads from Kafka for the status, against a real cluster."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest
from confluent_kafka import Consumer, TopicPartition

from kafka_mirror.kafka.client import ClusterUnavailable
from kafka_mirror.kafka.observe import ClusterReader
from kafka_mirror_dev.kafka import LocalKafka
from tests.helpers.kafka import create_topics, open_transaction, produce, records, unique
from tests.helpers.worker import wait_for

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


def test_the_lag_ends_where_a_read_committed_reader_stops_before_an_open_transaction(
    kafka_a: LocalKafka,
) -> None:
    """The workers read committed records only: an open transaction's records are not lag (a
    promote would wait on them for as long as the transaction stays open)."""
    topic = unique()
    create_topics(kafka_a.bootstrap_servers, [topic], partitions=1)
    produce(kafka_a.bootstrap_servers, topic, records(10, partitions=1))
    open_tx = open_transaction(kafka_a.bootstrap_servers, topic, 0, 5)
    reader = ClusterReader("A", {"bootstrap.servers": kafka_a.bootstrap_servers})
    try:
        assert reader.log_ranges({topic: 1}) == {(topic, 0): (0, 10)}
        open_tx.commit_transaction(30)
        reader.close()
        reader = ClusterReader("A", {"bootstrap.servers": kafka_a.bootstrap_servers})
        wait_for(
            lambda: reader.log_ranges({topic: 1}) == {(topic, 0): (0, 16)},
            30,
            "the committed transaction's records and marker to count",
        )
    finally:
        reader.close()


def test_a_reader_reads_again_once_a_restarted_broker_is_back(kafka_a: LocalKafka) -> None:
    """librdkafka's admin client can go on failing after a broker restart (group offsets time
    out, offsets are refused for the leader epoch it remembers) where a new client answers: a
    mirror's status would stay stale for good after its source came back."""
    topic = unique()
    create_topics(kafka_a.bootstrap_servers, [topic], partitions=3)
    produce(kafka_a.bootstrap_servers, topic, records(30, partitions=3))
    reader = ClusterReader("A", {"bootstrap.servers": kafka_a.bootstrap_servers})
    ends: list[int] = []

    def read() -> bool:
        try:
            ends[:] = [p.end for p in reader.progress("g", {topic: 3})]
        except ClusterUnavailable:
            return False  # a new topic's leaders, a broker coming back: not yet
        return ends == [10, 10, 10]

    try:
        wait_for(read, 30, lambda: f"the reader to read the new topic (read {ends})")
        kafka_a.stop()
        kafka_a.start()
        wait_for(read, 90, lambda: f"the reader to read A again (read {ends})", every=2)
    finally:
        reader.close()
