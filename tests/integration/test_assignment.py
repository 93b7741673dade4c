"""The worker's assignment callback (`worker/resume_points.assign_at_resume_points`) in a real
group: a partition it had paused, revoked and handed back, is consumed again."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from confluent_kafka import Consumer, TopicPartition

from kafka_mirror.worker.resume_points import assign_at_resume_points
from kafka_mirror_dev.kafka import LocalKafka
from tests.helpers.kafka import create_topics, group_member, produce, records, unique
from tests.helpers.worker import wait_for

pytestmark = [pytest.mark.kafka]


def held(consumer: Consumer) -> set[int]:
    return {tp.partition for tp in consumer.assignment()}


def polling(consumers: list[Consumer], condition: Callable[[], bool]) -> Callable[[], bool]:
    """`condition`, after the consumers have polled (which serves their rebalances)."""

    def check() -> bool:
        for consumer in consumers:
            consumer.poll(0.05)
        return condition()

    return check


def test_a_partition_paused_when_it_was_revoked_is_consumed_once_handed_back(
    kafka_a: LocalKafka,
) -> None:
    """librdkafka keeps an application's pause through a revocation and a new assignment
    (librdkafka#1849; checked with 2.16: nothing was consumed of the partitions handed back):
    the worker pauses what it holds for the target, and in busy run 45 five partitions lost
    while held and handed back 44 ms later were never consumed again."""
    topic, group = unique("paused"), unique("paused")
    create_topics(kafka_a.bootstrap_servers, [topic], partitions=4)
    produce(kafka_a.bootstrap_servers, topic, records(400, partitions=4))
    worker = group_member(kafka_a.bootstrap_servers, group)

    def on_assign(consumer: Consumer, partitions: list[TopicPartition]) -> None:
        at_start = [TopicPartition(tp.topic, tp.partition, 0) for tp in partitions]
        assign_at_resume_points(consumer, at_start, {}, "A", {topic: f"{topic}.A"}, {})

    worker.subscribe([topic], on_assign=on_assign)
    wait_for(polling([worker], lambda: len(held(worker)) == 4), 30, "the worker holding all four")
    worker.pause(worker.assignment())
    other = group_member(kafka_a.bootstrap_servers, group)
    other.subscribe([topic])
    wait_for(polling([worker, other], lambda: len(held(other)) > 0), 30, "a second member's share")
    handed_back = {0, 1, 2, 3} - held(worker)
    assert handed_back, "the worker gave nothing up"
    other.close()
    wait_for(polling([worker], lambda: len(held(worker)) == 4), 30, "all four handed back")
    consumed: set[int] = set()
    deadline = time.monotonic() + 30
    while not handed_back <= consumed and time.monotonic() < deadline:
        message = worker.poll(0.1)
        if message is not None and message.error() is None:
            consumed.add(message.partition())
    worker.close()
    assert handed_back <= consumed, f"handed back {handed_back}, consumed {consumed}"
