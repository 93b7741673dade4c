"""Committing translated offsets to a group on the target, against a real cluster: the workers'
continuous sync only moves a group forward; a hand-over (failover, promote, return) commits
exactly what the checkpoints say, backwards too; a group with members is left alone."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from confluent_kafka import Consumer
from confluent_kafka.admin import AdminClient

from kafka_mirror.controller.operation_kafka import ConfluentCluster
from kafka_mirror.kafka.groups import commit_to_idle_group, committed_offsets
from kafka_mirror_dev.kafka import LocalKafka
from tests.helpers.kafka import create_topics, open_transaction, produce, records, unique
from tests.helpers.worker import commit_group, wait_for

pytestmark = [pytest.mark.kafka]


def test_a_hand_over_moves_a_rewound_group_back_and_the_sync_never_does(
    kafka_b: LocalKafka,
) -> None:
    topic, group = unique("t.A"), unique("rewound")
    create_topics(kafka_b.bootstrap_servers, [topic], partitions=2)
    produce(kafka_b.bootstrap_servers, topic, records(400, partitions=2))
    commit_group(kafka_b, group, topic, {0: 150, 1: 120})  # synced before the rewind on A
    admin = AdminClient({"bootstrap.servers": kafka_b.bootstrap_servers})
    rewound = {(topic, 0): 50, (topic, 1): 120}
    forward = commit_to_idle_group(admin, group, rewound)
    assert not forward.active and forward.offsets == {}
    assert committed_offsets(admin, group) == {(topic, 0): 150, (topic, 1): 120}
    exact = commit_to_idle_group(admin, group, rewound, exact=True)
    assert not exact.active and exact.offsets == {(topic, 0): 50}  # the other one held already
    assert committed_offsets(admin, group) == rewound


def test_a_group_with_members_on_the_target_gets_nothing(kafka_b: LocalKafka) -> None:
    topic, group = unique("t.A"), unique("busy")
    create_topics(kafka_b.bootstrap_servers, [topic], partitions=1)
    member = Consumer({"bootstrap.servers": kafka_b.bootstrap_servers, "group.id": group})
    member.subscribe([topic])
    admin = AdminClient({"bootstrap.servers": kafka_b.bootstrap_servers})

    def joined() -> bool:
        member.poll(0.2)  # the join happens while polling
        return bool(member.assignment())

    try:
        wait_for(joined, 60, "the member to join its group")
        committed = commit_to_idle_group(admin, group, {(topic, 0): 0}, exact=True)
        assert committed.active and committed.offsets == {}
    finally:
        member.close()


def test_records_in_an_open_transaction_are_counted_per_partition(kafka_a: LocalKafka) -> None:
    """What a promote's hand-over reports it leaves on the source (it does not wait for them)."""
    topic = unique("tx")
    create_topics(kafka_a.bootstrap_servers, [topic], partitions=2)
    produce(kafka_a.bootstrap_servers, topic, records(10, partitions=1))
    source = ConfluentCluster({"bootstrap.servers": kafka_a.bootstrap_servers})
    assert source.in_open_transactions([topic]) == {}
    began = datetime.now(UTC)
    open_tx = open_transaction(kafka_a.bootstrap_servers, topic, 1, 5)
    pending = source.in_open_transactions([topic, "no-such-topic"])
    assert list(pending) == [(topic, 1)] and pending[(topic, 1)].records == 5
    since = pending[(topic, 1)].since  # when the open transaction wrote its first record
    assert since is not None and began - timedelta(milliseconds=1) <= since <= datetime.now(UTC)
    open_tx.commit_transaction(30)
    wait_for(lambda: source.in_open_transactions([topic]) == {}, 30, "the commit's marker")
