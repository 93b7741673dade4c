"""A mirror's progress outlives its source consumer group: Kafka deletes an empty group's offsets
after `offsets.retention.minutes` (7 days), so a mirror stopped longer (a failover, a failback
period, a long pause) finds no commit. It resumes after its last copies on the target, never
from the log start of a topic it mirrored before, and counts what left the source meanwhile."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from confluent_kafka import TopicPartition

from kafka_mirror.kafka.client import GROUP_REQUEST_LIMIT
from kafka_mirror_dev.clients import DetachedAdmin
from tests.helpers.kafka import create_topics, produce, records, unique
from tests.helpers.stack import MirrorStack
from tests.helpers.worker import (
    copies,
    group_offsets,
    wait_until_mirrored,
    worker_config,
    worker_group,
)

pytestmark = [pytest.mark.kafka]


def test_a_mirror_whose_source_group_expired_resumes_after_its_last_copies(
    stack: MirrorStack,
) -> None:
    topic = unique("expired")
    remote = f"{topic}.A"
    create_topics(stack.kafka_a.bootstrap_servers, [topic], partitions=2)
    written = records(1000, partitions=2)
    produce(stack.kafka_a.bootstrap_servers, topic, written[:600])  # 300 a partition
    config = worker_config(stack.kafka_a, stack.kafka_b, [re.escape(topic)])
    group = worker_group(config)
    before = stack.start_worker(config, name="before")
    wait_until_mirrored(stack.kafka_a, config, topic)
    before.stop()
    # While the mirror stands stopped, its group's offsets expire on A, 400 more records come,
    # and A's retention removes 50 of them before anything mirrored them.
    with DetachedAdmin(stack.kafka_a.bootstrap_servers) as admin:
        deleted = admin.client.delete_consumer_groups([group], request_timeout=GROUP_REQUEST_LIMIT)
        deleted[group].result(timeout=30)
    assert group_offsets(stack.kafka_a, group) == {}
    produce(stack.kafka_a.bootstrap_servers, topic, written[600:])  # offsets 300-499 a partition
    with DetachedAdmin(stack.kafka_a.bootstrap_servers) as admin:
        deleted = admin.client.delete_records([TopicPartition(topic, 0, 350)], request_timeout=30)
        next(iter(deleted.values())).result(timeout=30)

    after = stack.start_worker(config, name="after")
    wait_until_mirrored(stack.kafka_a, config, topic)
    # Every record once: nothing copied again from the log start (partition 1 still has its
    # first 300 on A), nothing skipped but what retention took before it was mirrored.
    assert copies(stack.kafka_b, remote, 1) == Counter(range(500))
    assert copies(stack.kafka_b, remote, 0) == Counter([*range(300), *range(350, 500)])
    metrics = after.get("/metrics") or ""
    lost = f'kafka_mirror_records_lost_to_retention_total{{partition="0",topic="{topic}"}} 50.0'
    assert lost in metrics, [m for m in metrics.splitlines() if "lost_to_retention" in m]
    assert "resuming after the last copy on the target" in after.log()
