"""An unclean leader election on a three-broker source, with the worker stopped across it: the
new leader lacks records the mirror had copied, then takes new ones at those offsets and past
the mirror's position. Judged from Kafka alone: every record the source holds afterwards is on
the target once, nothing is copied twice, and the only target records the source no longer has
are the copies of the records it lost (docs/reliability.md)."""

from __future__ import annotations

import re
import time

import pytest
from confluent_kafka import ElectionType, TopicPartition

from kafka_mirror.kafka.coordinator import GroupCoordinator
from kafka_mirror_dev.kafka import LocalKafka
from tests.helpers.content import check_content
from tests.helpers.faults import committed_through
from tests.helpers.kafka import Record, admin_for, create_topics, produce, unique
from tests.helpers.worker import StartWorker, wait_for, worker_config, worker_group

pytestmark = [pytest.mark.kafka]


def batch(name: str, count: int) -> list[Record]:
    now = int(time.time() * 1000)
    return [
        Record(key=f"{name}-{i}".encode(), value=f"{name} {i}".encode(), timestamp=now, partition=0)
        for i in range(count)
    ]


def leader_of(cluster: LocalKafka, topic: str) -> int:
    metadata = admin_for(cluster.bootstrap_servers).list_topics(topic, timeout=10)
    return int(metadata.topics[topic].partitions[0].leader)


def test_an_unclean_leader_election_on_the_source_skips_nothing_and_copies_nothing_twice(
    kafka_b3: LocalKafka, kafka_b: LocalKafka, start_worker: StartWorker
) -> None:
    source, topic = kafka_b3, unique("unclean")
    create_topics(
        source.bootstrap_servers,
        [topic],
        config={"min.insync.replicas": "1", "unclean.leader.election.enable": "true"},
        replica_assignment=[[2, 3]],
    )
    produce(source.bootstrap_servers, topic, batch("both", 1_000))  # on brokers 2 and 3
    source.stop_broker(3)
    produce(source.bootstrap_servers, topic, batch("lost", 1_000))  # offsets 1,000-1,999 on 2
    config = worker_config(source, kafka_b, [re.escape(topic)])
    group = worker_group(config)
    first = start_worker(config, "worker-before")
    wait_for(committed_through(source, group, {(topic, 0): 2_000}), 90, "the mirror's commit")
    first.stop()
    coordinator = GroupCoordinator({"bootstrap.servers": source.bootstrap_servers})
    (committed,) = coordinator.committed(group, 10).values()
    assert (committed.offset, committed.leader_epoch is not None) == (2_000, True), committed

    # Broker 2, the only in-sync replica, goes; broker 3, which has the first 1,000, leads.
    source.stop_broker(2)
    source.start_broker(3)
    admin = admin_for(source.bootstrap_servers)
    wait_for(
        lambda: (
            admin.elect_leaders(ElectionType.UNCLEAN, [TopicPartition(topic, 0)]).result(10)
            is not None
            and leader_of(source, topic) == 3
        ),
        90,
        "broker 3 elected uncleanly",
    )
    # New records at the lost offsets and past the mirror's position (2,000).
    produce(source.bootstrap_servers, topic, batch("new", 1_500))
    source.start_broker(2)  # it truncates its log to broker 3's and follows

    again = start_worker(config, "worker-after")
    wait_for(committed_through(source, group, {(topic, 0): 2_500}), 120, "the new records")
    report = check_content(
        source.bootstrap_servers, kafka_b.bootstrap_servers, {topic: f"{topic}.A"}
    )
    print(report)
    assert (report.source_records, report.missing, report.duplicates) == (2_500, 0, 0), report
    # What the target holds that the source lost: the copies of offsets 1,000-1,999, counted.
    assert report.unexpected == 1_000, report
    assert again.metric("kafka_mirror_records_lost_to_truncation_total") == 1_000
    assert "the source's log was truncated at offset 1000, below the mirror's position 2000" in (
        again.log()
    )
