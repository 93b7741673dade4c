"""The worker's tail of an internal topic (`kafka_mirror.kafka.tail.TopicTail`) on real Kafka:
each record read once across calls, the end reported, and the consumer assigned only while a
call reads (left assigned, it fetched every 10 ms: about 13 % of a broker's core per idle
worker, docs/performance.md)."""

from __future__ import annotations

import pytest
from confluent_kafka import Producer

from kafka_mirror.kafka.client import reader
from kafka_mirror.kafka.tail import TopicTail
from kafka_mirror_dev.kafka import LocalKafka
from tests.helpers.kafka import create_topics, unique

pytestmark = pytest.mark.kafka


def test_a_tail_reads_each_record_once_and_is_unassigned_between_reads(
    kafka_a: LocalKafka,
) -> None:
    topic = unique("tail")
    consumer = reader({"bootstrap.servers": kafka_a.bootstrap_servers}, unique("tail-reader"))
    tail = TopicTail(consumer, topic)
    try:
        assert tail.read_new(timeout=2) == [] and not tail.caught_up  # no topic yet
        create_topics(kafka_a.bootstrap_servers, [topic], partitions=1)
        producer = Producer({"bootstrap.servers": kafka_a.bootstrap_servers})

        def write(*values: bytes) -> None:
            for value in values:
                producer.produce(topic, value, b"key")
            producer.flush(30)

        write(b"1", b"2", b"3")
        producer.produce(topic, None, b"deleted")  # a tombstone: read past, not returned
        producer.flush(30)
        assert [v for _, v in tail.read_new()] == [b"1", b"2", b"3"] and tail.caught_up
        assert consumer.assignment() == []
        assert tail.read_new() == [] and tail.caught_up
        write(b"4", b"5")
        assert [v for _, v in tail.read_new()] == [b"4", b"5"] and tail.caught_up
        assert consumer.assignment() == []
    finally:
        consumer.close()
