"""The fault matrix's instruments, checked against the real clusters: the traffic generator
streams while a worker mirrors it, and writes records it can regenerate (up to the size
limit); the content check finds a missing record, a duplicate and a record the source never
had; a three-broker cluster stalls acks=all writes to the partitions that need a stopped broker
while the others flow, and takes them once the broker is back; the check reads on when a
partition's leadership moves under its reader."""

from __future__ import annotations

import re
import time
from dataclasses import replace
from pathlib import Path

import pytest
from confluent_kafka import ElectionType, KafkaError, Message, Producer, TopicPartition

from kafka_mirror.kafka.client import GROUP_REQUEST_LIMIT
from kafka_mirror.kafka.formats import PROVENANCE_HEADER, Provenance
from kafka_mirror_dev.coordinators import coordinator_partition, probe_groups
from kafka_mirror_dev.kafka import LocalKafka
from tests.helpers.content import (
    ContentReport,
    Place,
    check_content,
    check_copies,
    reader_for,
    watermarks,
)
from tests.helpers.kafka import (
    Record,
    admin_for,
    consume,
    create_topics,
    end_offsets,
    produce,
    records,
    unique,
)
from tests.helpers.stack import MirrorStack
from tests.helpers.traffic import NEAR_LIMIT_VALUE_SIZE, TrafficGenerator, TrafficSpec
from tests.helpers.worker import wait_for, wait_until_mirrored, worker_config

pytestmark = pytest.mark.kafka

RATE = 20_000  # records a second: the fault matrix's steady traffic


@pytest.mark.long  # a stream at the fault matrix's rate
def test_the_traffic_streams_while_a_worker_mirrors_it_and_the_copy_is_exact(
    stack: MirrorStack,
    tmp_path: Path,
) -> None:
    topic = unique("traffic")
    create_topics(stack.kafka_a.bootstrap_servers, [topic], partitions=8)
    config = worker_config(stack.kafka_a, stack.kafka_b, [re.escape(topic)])
    stack.start_worker(config)
    spec = TrafficSpec.for_topics(
        stack.kafka_a.bootstrap_servers, [topic], rate=RATE, count=RATE * 20
    )
    generator = TrafficGenerator(spec, tmp_path).start()
    # What the fault matrix rests on, as events rather than a rate (a rate in a window depends
    # on what else the machine runs; the suite runs three test processes): the records stream
    # while the mirror copies them, and every one is acknowledged.
    copying: dict[str, int] = {}

    def copied_while_streaming() -> bool:
        copying["on B"] = sum(end_offsets(stack.kafka_b.bootstrap_servers, f"{topic}.A").values())
        copying["produced"] = generator.stats().produced
        return copying["on B"] >= RATE and copying["produced"] < spec.count

    wait_for(copied_while_streaming, 60, lambda: f"B to copy while A streams: {copying}")
    stats = generator.finish()
    rate = stats.acked_total / stats.elapsed  # to the last acknowledgement
    print(f"traffic: {rate:,.0f} records/s acknowledged, at most {stats.max_behind:,} behind")
    assert stats.failed == 0 and stats.acked_total == spec.count, stats.errors

    wait_until_mirrored(stack.kafka_a, config, topic)
    report = check_content(
        stack.kafka_a.bootstrap_servers, stack.kafka_b.bootstrap_servers, {topic: f"{topic}.A"}
    )
    print(f"content check: {report}")
    assert report.source_records == spec.count
    assert report.lossless, report


def test_the_traffic_is_what_its_spec_regenerates_up_to_near_the_size_limit(
    kafka_a: LocalKafka, tmp_path: Path
) -> None:
    topics = [unique("regen"), unique("regen")]
    create_topics(kafka_a.bootstrap_servers, topics, partitions=3)
    spec = TrafficSpec.for_topics(
        kafka_a.bootstrap_servers, topics, rate=2_000, count=1_000, large_every=250
    )
    stats = TrafficGenerator(spec, tmp_path).start().finish()
    assert stats.failed == 0, stats.errors
    assert stats.acked == {topics[0]: 500, topics[1]: 500}
    sizes = []
    for topic in topics:
        for read in consume(kafka_a.bootstrap_servers, topic, 500):
            assert read.key is not None and read.value is not None
            assert spec.record(spec.sequence(read.key)) == (topic, replace(read, offset=None))
            sizes.append(len(read.value))
    assert sorted(sizes)[-4:] == [NEAR_LIMIT_VALUE_SIZE] * 4  # records 0, 250, 500 and 750


def mirrored(record: Record) -> Record:
    """`record` as a mirror from A would write it: the provenance header appended."""
    assert record.partition is not None and record.offset is not None
    provenance = Provenance("A", record.partition, record.offset).encode()
    return replace(record, headers=(*record.headers, (PROVENANCE_HEADER, provenance)), offset=None)


def test_the_content_check_finds_missing_duplicated_and_unexpected_records(
    stack: MirrorStack,
) -> None:
    topic = unique("content")
    remote = f"{topic}.A"
    create_topics(stack.kafka_a.bootstrap_servers, [topic], partitions=3)
    twin = f"{topic}.T"  # a second mirror's exact copy, left as it is
    create_topics(stack.kafka_b.bootstrap_servers, [remote, twin], partitions=3)
    produce(stack.kafka_a.bootstrap_servers, topic, records(300, partitions=3))  # record i on i % 3
    source = {read.key: read for read in consume(stack.kafka_a.bootstrap_servers, topic, 300)}
    for copy in (remote, twin):
        produce(stack.kafka_b.bootstrap_servers, copy, [mirrored(r) for r in source.values()])

    def check() -> ContentReport:
        report = check_content(
            stack.kafka_a.bootstrap_servers, stack.kafka_b.bootstrap_servers, {topic: remote}
        )
        print(report)
        return report

    exact = check()
    assert (exact.source_records, exact.target_records) == (300, 300)
    assert (exact.missing, exact.duplicates, exact.unexpected) == (0, 0, 0)

    # On A: a record never copied (partition 1), and a twin of k0 (partition 0; equal content,
    # so k0's one copy on B covers only one of the two). On B: a second copy of k5 (partition
    # 2), and a copy of k7 (partition 1) with its value changed. Each partition held 100.
    k0, k5, k7 = source[b"k0"], source[b"k5"], source[b"k7"]
    never_copied = Record(b"never-copied", b"v", (), k0.timestamp, partition=1)
    produce(stack.kafka_a.bootstrap_servers, topic, [never_copied, replace(k0, offset=None)])
    changed = replace(mirrored(k7), value=b"changed")
    produce(stack.kafka_b.bootstrap_servers, remote, [mirrored(k5), changed])
    report = check()
    assert (report.source_records, report.target_records) == (302, 302)
    assert (report.missing, report.duplicates, report.unexpected) == (2, 1, 1)
    # Of equal records, the first is named.
    assert set(report.first_missing) == {Place(topic, 1, 100), Place(topic, 0, k0.offset or 0)}
    assert report.first_duplicates == [Place(remote, 2, 100)]
    assert report.first_unexpected == [Place(remote, 1, 100)]

    # Both copies checked with the source read once: each judged on its own, as if alone.
    both = check_copies(
        stack.kafka_a.bootstrap_servers, stack.kafka_b.bootstrap_servers, topic, [remote, twin]
    )
    faults = {name: (r.missing, r.duplicates, r.unexpected) for name, r in both.items()}
    assert faults == {remote: (2, 1, 1), twin: (2, 0, 0)}, both
    assert both[remote].first_missing == report.first_missing
    assert [(r.source_records, r.target_records) for r in both.values()] == [(302, 302), (302, 300)]


class AckedWrites:
    """Records written with acks=all, one per partition asked for, and which were taken."""

    def __init__(self, bootstrap: str) -> None:
        self.producer = Producer(
            {"bootstrap.servers": bootstrap, "acks": "all", "enable.idempotence": True}
        )
        self.acknowledged: set[tuple[str, int]] = set()
        self.errors: list[KafkaError] = []

    def send(self, partitions: list[tuple[str, int]]) -> None:
        self.acknowledged.clear()
        for topic, partition in partitions:
            self.producer.produce(topic, b"v", b"k", partition=partition, on_delivery=self._done)

    def _done(self, error: KafkaError | None, message: Message) -> None:
        if error is not None:
            self.errors.append(error)
        else:
            self.acknowledged.add((str(message.topic()), message.partition() or 0))

    def wait(self, seconds: float) -> int:
        """Serve acknowledgements for `seconds`; the records still waiting for theirs."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and len(self.producer):
            self.producer.poll(0.2)
        assert not self.errors, self.errors
        return len(self.producer)


def test_three_brokers_stall_the_partitions_a_stopped_broker_is_needed_for(
    kafka_b3: LocalKafka,
) -> None:
    bootstrap = kafka_b3.bootstrap_servers
    nodes = admin_for(bootstrap).describe_cluster().result(10).nodes
    assert sorted(node.id for node in nodes) == [1, 2, 3]
    assert len({node.port for node in nodes}) == 3

    # `split`: partitions 0 and 1 have a replica on broker 3 and need two in sync; 2 and 3 live
    # on brokers 1 and 2. `everywhere`: three replicas, all needed. `default`: the brokers'
    # replication factor, which the worker's remote topics get: three.
    split, everywhere, default = unique("split"), unique("everywhere"), unique("default")
    create_topics(
        bootstrap,
        [split],
        config={"min.insync.replicas": "2"},
        replica_assignment=[[3, 1], [1, 3], [1, 2], [2, 1]],
    )
    create_topics(bootstrap, [everywhere], 2, {"min.insync.replicas": "3"}, replication_factor=3)
    create_topics(bootstrap, [default], replication_factor=-1)

    def replicas(topic: str) -> int:
        listed = admin_for(bootstrap).list_topics(topic, timeout=10).topics[topic]
        return len(listed.partitions[0].replicas) if listed.error is None else 0

    wait_for(lambda: replicas(default) == 3, 30, "a topic of the default replication factor")

    writes = AckedWrites(bootstrap)
    every = [(split, p) for p in range(4)] + [(everywhere, p) for p in range(2)]
    writes.send(every)
    assert writes.wait(30) == 0

    kafka_b3.stop_broker(3)
    stopped = time.monotonic()
    try:
        writes.send(every)
        assert writes.wait(10) == 4  # the four partitions that need broker 3
        assert writes.acknowledged == {(split, 2), (split, 3)}
    finally:
        kafka_b3.start_broker(3)
    restarted = time.monotonic()
    assert writes.wait(120) == 0, "the stalled writes were not taken after the restart"
    print(
        f"broker 3 away {restarted - stopped:.1f} s; the stalled writes taken "
        f"{time.monotonic() - restarted:.1f} s after it was back"
    )
    for topic in (split, everywhere):
        assert set(end_offsets(bootstrap, topic).values()) == {2}

    # The preferred leader (broker 3) takes partition 0 back, as the brokers' own rebalance does
    # minutes after a restart: the content check's reader, which knew broker 1 as its leader,
    # is refused by it and reads on once its metadata is refreshed.
    reader = reader_for(bootstrap)
    try:
        point = TopicPartition(split, 0)
        assert watermarks(reader, point) == (0, 2)
        moved = admin_for(bootstrap).elect_leaders(ElectionType.PREFERRED, [point]).result(30)
        assert moved[point] is None, moved
        assert watermarks(reader, point) == (0, 2)
    finally:
        reader.close()

    # What the next test gets: every leader back on its preferred replica, and each probe group
    # coordinated, as Kafka places it, by the leader of the partition the harness computed.
    kafka_b3.stop_broker(2)
    kafka_b3.restore_leaders()
    groups = probe_groups()

    def placement() -> tuple[dict[int, tuple[int, int]], dict[str, tuple[int, int]]]:
        """Each partition's (leader, preferred replica); each group's (coordinator, leader of
        its computed partition). A broker's metadata may lag the election by a moment."""
        offsets = admin_for(bootstrap).list_topics("__consumer_offsets", timeout=10)
        partitions = offsets.topics["__consumer_offsets"].partitions
        described = admin_for(bootstrap).describe_consumer_groups(
            groups, request_timeout=GROUP_REQUEST_LIMIT
        )
        return {p: (m.leader, m.replicas[0]) for p, m in partitions.items()}, {
            g: (described[g].result(10).coordinator.id, partitions[coordinator_partition(g)].leader)
            for g in groups
        }

    def settled() -> bool:
        leaders, coordinators = placement()
        return all(a == b for a, b in [*leaders.values(), *coordinators.values()])

    wait_for(settled, 30, lambda: f"leaders preferred and groups placed: {placement()}")
