"""The audit on topics as production runs them, against real Kafka, the real worker and real
PySpark, each case with exact counts: retention on the target (unverifiable, not missing),
compaction and aborted transactions on the source, identity naming both ways (cycle skips), a
re-created source topic, a record altered on the target, and records that left the source
before they were mirrored (lost: in the audit, the worker's metrics and the mirror's status)."""

from __future__ import annotations

import re
import time
from pathlib import Path

import pytest
from confluent_kafka import Consumer, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, AlterConfigOpType, ConfigEntry, ConfigResource

from kafka_mirror.api.status import KafkaMirrorStatus
from kafka_mirror.api.worker_config import WorkerConfig
from kafka_mirror.audit.main import audit
from kafka_mirror.kafka.admin import topic_ids
from kafka_mirror.kafka.formats import (
    PROVENANCE_HEADER,
    OffsetSync,
    Provenance,
    offset_syncs_topic,
)
from kafka_mirror.kafka.observe import ClusterReader
from kafka_mirror.topics import plan_topics
from kafka_mirror_dev.kafka import LocalKafka
from tests.helpers.audit import (
    commit,
    committed_everything,
    delete_before,
    mirror_everything,
    mirror_new_topic,
    status_from,
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
from tests.helpers.worker import WorkerProcess, wait_for, worker_config

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def syncs_below(kafka_a: LocalKafka, topic: str, limits: dict[int, int]) -> int:
    """Offset syncs of `topic` (read straight from their topic on A, where the workers keep
    them by default) whose target record lies below `limits` (partition → offset)."""
    syncs_topic = offset_syncs_topic("A", "B", "source")
    count = sum(end_offsets(kafka_a.bootstrap_servers, syncs_topic).values())
    syncs = [
        OffsetSync.decode(r.key or b"", r.value or b"")
        for r in consume(kafka_a.bootstrap_servers, syncs_topic, count)
    ]
    return sum(
        1 for s in syncs if s.topic == topic and s.downstream_offset < limits.get(s.partition, -1)
    )


def test_records_expired_on_either_side_are_unverifiable_not_missing(
    stack: MirrorStack,
    tmp_path: Path,
) -> None:
    """The remote topic's retention removed the first 40 records of partitions 0 and 1; the
    source's removed the first 30 of partition 2 after they were mirrored."""
    topic, config = mirror_new_topic(
        stack.kafka_a, stack.kafka_b, tmp_path, partitions=3, count=300
    )
    remote = f"{topic}.A"
    delete_before(stack.kafka_b, remote, {0: 40, 1: 40})
    delete_before(stack.kafka_a, topic, {2: 30})
    report = audit(WorkerConfig.model_validate(config), stack.spark)
    assert report.result == "Passed", report
    assert (report.records_checked, report.missing, report.altered) == (60 + 60 + 70, 0, 0)
    assert (report.expired_on_target, report.expired_on_source) == (80, 30)
    expired = {(f.partition, f.expired_on_target, f.expired_on_source) for f in report.findings}
    assert expired == {(0, 40, 0), (1, 40, 0), (2, 0, 30)}
    unverifiable_syncs = syncs_below(stack.kafka_a, topic, {0: 40, 1: 40})
    assert unverifiable_syncs >= 2
    assert (report.offset_syncs_unverifiable, report.bad_offset_syncs) == (unverifiable_syncs, 0)
    assert report.summary().message.endswith(
        "; 110 records unverifiable (30 expired on the source, 80 on the target)"
    )
    assert report.summary().unverifiable == 110


def test_a_compacted_source_topic_passes(stack: MirrorStack, tmp_path: Path) -> None:
    """30 records over 10 keys, compacted by the source's log cleaner to the newest of each
    (offset gaps the workers and the audit cross), then mirrored."""
    topic = unique("compacted")
    create_topics(
        stack.kafka_a.bootstrap_servers,
        [topic],
        config={
            "cleanup.policy": "compact",
            "segment.ms": "100",
            "min.cleanable.dirty.ratio": "0.01",
            "min.compaction.lag.ms": "0",
        },
    )
    versions = [
        Record(f"k{i % 10}".encode(), f"v{i}".encode(), timestamp=int(time.time() * 1000))
        for i in range(30)
    ]
    produce(stack.kafka_a.bootstrap_servers, topic, versions)
    time.sleep(0.2)
    # Rolls the segment that holds the 30 (older than segment.ms), so the cleaner may take it;
    # nothing is written after, so nothing else is compacted (the active segment never is).
    produce(stack.kafka_a.bootstrap_servers, topic, [Record(b"last", b"rolls the segment")])
    wait_for(
        lambda: len(read_all(stack.kafka_a, topic)) == 11,
        90,
        "the log cleaner to compact the source topic",
        every=2,
    )
    left = read_all(stack.kafka_a, topic)
    config = worker_config(stack.kafka_a, stack.kafka_b, [re.escape(topic)])
    mirror_everything(config, topic, tmp_path, stack.kafka_b)
    report = audit(WorkerConfig.model_validate(config), stack.spark)
    assert report.result == "Passed", report
    assert left == [*range(20, 30), 30]  # gaps: offsets 0 to 19 compacted away
    assert (report.records_checked, report.missing, report.altered) == (11, 0, 0)
    assert (report.expired_on_target, report.bad_offset_syncs) == (0, 0)


def test_a_remote_topic_compacted_on_the_target_passes(stack: MirrorStack, tmp_path: Path) -> None:
    """30 records over 10 keys mirrored; then the remote topic is made compacted on the target
    (the source is not), and the cleaner keeps the newest copy of each key: the 20 older
    copies are gone while the source still holds their records, unverifiable rather than
    missing."""
    topic = unique()
    create_topics(stack.kafka_a.bootstrap_servers, [topic])
    versions = [Record(f"k{i % 10}".encode(), f"v{i}".encode()) for i in range(30)]
    produce(stack.kafka_a.bootstrap_servers, topic, versions)
    config = worker_config(stack.kafka_a, stack.kafka_b, [re.escape(topic)])
    mirror_everything(config, topic, tmp_path, stack.kafka_b)
    remote = f"{topic}.A"
    compact = {
        "cleanup.policy": "compact",
        "segment.ms": "100",
        "min.cleanable.dirty.ratio": "0.01",
        "min.compaction.lag.ms": "0",
    }
    resource = ConfigResource(
        ConfigResource.Type.TOPIC,
        remote,
        incremental_configs=[
            ConfigEntry(k, v, incremental_operation=AlterConfigOpType.SET)
            for k, v in compact.items()
        ],
    )
    for future in (
        admin_for(stack.kafka_b.bootstrap_servers).incremental_alter_configs([resource]).values()
    ):
        future.result(timeout=30)
    time.sleep(0.2)
    produce(stack.kafka_b.bootstrap_servers, remote, [Record(b"other", b"rolls the segment")])
    wait_for(
        lambda: len(read_all(stack.kafka_b, remote)) == 11,
        90,
        "the log cleaner to compact the remote topic",
        every=2,
    )
    report = audit(WorkerConfig.model_validate(config), stack.spark)
    assert report.result == "Passed", report
    assert (report.records_checked, report.expired_on_target, report.missing) == (10, 20, 0)


def read_all(cluster: LocalKafka, topic: str) -> list[int]:
    """The offsets of every record in the topic's partition 0, read straight from Kafka."""
    end = end_offsets(cluster.bootstrap_servers, topic)[0]
    consumer = Consumer(
        {"bootstrap.servers": cluster.bootstrap_servers, "group.id": unique("reader")}
    )
    consumer.assign([TopicPartition(topic, 0, 0)])
    offsets: list[int] = []
    deadline = time.monotonic() + 20
    while (not offsets or offsets[-1] < end - 1) and time.monotonic() < deadline:
        offsets += [m.offset() or 0 for m in consumer.consume(500, 0.5) if m.error() is None]
    consumer.close()
    return offsets


def test_a_source_with_an_aborted_transaction_passes(stack: MirrorStack, tmp_path: Path) -> None:
    """10 records of an aborted transaction between 20 committed ones: the workers never mirror
    them (they read committed), and the audit does not miss them."""
    topic = unique("transactional")
    create_topics(stack.kafka_a.bootstrap_servers, [topic])
    producer = Producer(
        {"bootstrap.servers": stack.kafka_a.bootstrap_servers, "transactional.id": unique("tx")}
    )
    producer.init_transactions(30)
    for batch, outcome in ((0, "commit"), (1, "abort"), (2, "commit")):
        producer.begin_transaction()
        for i in range(10):
            producer.produce(topic, f"v{batch}-{i}".encode(), f"k{i}".encode(), 0)
        producer.flush(30)
        if outcome == "commit":
            producer.commit_transaction(30)
        else:
            producer.abort_transaction(30)
    config = worker_config(stack.kafka_a, stack.kafka_b, [re.escape(topic)])
    mirror_everything(config, topic, tmp_path, stack.kafka_b)
    report = audit(WorkerConfig.model_validate(config), stack.spark)
    assert report.result == "Passed", report
    assert (report.records_checked, report.missing, report.duplicates) == (20, 0, 0)


def test_identity_both_ways_passes_with_the_cycle_skips_counted(
    stack: MirrorStack,
    tmp_path: Path,
) -> None:
    """`t` on A and on B, mirrored A → B and B → A under identity naming: A's `t` holds its own
    20 records and B's 30 copied back, which the A → B workers skip as cycles."""
    topic = unique("identity")
    for cluster in (stack.kafka_a, stack.kafka_b):
        create_topics(cluster.bootstrap_servers, [topic])
    # Each side's `t` is its applications' own: both mirrors adopt it.
    naming = {"policy": "identity", "adopt": [re.escape(topic)]}
    forward = worker_config(stack.kafka_a, stack.kafka_b, [re.escape(topic)], topicNaming=naming)
    backward = worker_config(stack.kafka_b, stack.kafka_a, [re.escape(topic)], topicNaming=naming)
    backward["source"]["alias"], backward["target"]["alias"] = "B", "A"  # type: ignore[index]
    produce(stack.kafka_a.bootstrap_servers, topic, records(20, 1))
    produce(stack.kafka_b.bootstrap_servers, topic, records(30, 1))
    workers = [
        WorkerProcess(forward, tmp_path, "a-to-b").start(),
        WorkerProcess(backward, tmp_path, "b-to-a").start(),
    ]
    try:
        wait_for(
            lambda: (
                end_offsets(stack.kafka_a.bootstrap_servers, topic)[0] == 50
                and end_offsets(stack.kafka_b.bootstrap_servers, topic)[0] == 50
                and committed_everything(forward, topic)
                and committed_everything(backward, topic)
            ),
            90,
            "both directions to mirror everything",
        )
    finally:
        for worker in workers:
            assert worker.stop() == 0
    report = audit(WorkerConfig.model_validate(forward), stack.spark)
    assert report.result == "Passed", report
    assert (report.records_checked, report.skipped_cycles, report.missing) == (20, 30, 0)


def source_id(cluster: LocalKafka, topic: str) -> bytes | None:
    return topic_ids(AdminClient({"bootstrap.servers": cluster.bootstrap_servers}), [topic])[topic]


def test_a_recreated_source_topic_cannot_hide_a_missing_copy(
    stack: MirrorStack,
    tmp_path: Path,
) -> None:
    """100 records mirrored; the topic deleted and created again on A with 50 records, mirrored
    after the first 100 copies; then one more record that the workers' group commits though
    the target never got it. Its offset (50) has a copy of the old topic's record 50 on the
    target: only the provenance header's topic ID tells them apart."""
    topic, config = mirror_new_topic(stack.kafka_a, stack.kafka_b, tmp_path)
    admin = admin_for(stack.kafka_a.bootstrap_servers)
    for future in admin.delete_topics([topic]).values():
        future.result(timeout=30)
    wait_for(lambda: topic not in admin.list_topics().topics, 30, "the topic to go")
    create_topics(stack.kafka_a.bootstrap_servers, [topic])
    produce(stack.kafka_a.bootstrap_servers, topic, records(50, 1))
    mirror_everything(config, topic, tmp_path, stack.kafka_b, name="worker-again")
    assert end_offsets(stack.kafka_b.bootstrap_servers, f"{topic}.A")[0] == 150
    produce(stack.kafka_a.bootstrap_servers, topic, records(1, 1))
    commit(stack.kafka_a, WorkerConfig.model_validate(config).consumer_group, topic, {0: 51})
    report = audit(WorkerConfig.model_validate(config), stack.spark)
    assert report.result == "Failed"
    assert (report.records_checked, report.missing, report.altered) == (51, 1, 0)
    (finding,) = report.findings
    assert (finding.topic, finding.partition, finding.missing_offsets) == (topic, 0, [50])
    assert f"1 records missing on the target ({topic}/0 offsets [50])" in report.summary().message


def test_a_record_altered_on_the_target_fails_naming_it(
    stack: MirrorStack,
    tmp_path: Path,
) -> None:
    """Record 100 of A's topic reaches B with another value (its only copy there): present, but
    not what the source holds."""
    topic, config = mirror_new_topic(stack.kafka_a, stack.kafka_b, tmp_path)
    (original,) = records(1, 1)
    produce(stack.kafka_a.bootstrap_servers, topic, [original])
    header = Provenance("A", 0, 100, source_id(stack.kafka_a, topic)).encode()
    altered = Record(
        original.key,
        b"not what A holds",
        (*original.headers, (PROVENANCE_HEADER, header)),
        original.timestamp,
        0,
    )
    produce(stack.kafka_b.bootstrap_servers, f"{topic}.A", [altered])
    commit(stack.kafka_a, WorkerConfig.model_validate(config).consumer_group, topic, {0: 101})
    report = audit(WorkerConfig.model_validate(config), stack.spark)
    assert report.result == "Failed"
    assert (report.records_checked, report.missing, report.altered, report.duplicates) == (
        101,
        0,
        1,
        0,
    )
    (finding,) = report.findings
    assert (finding.partition, finding.altered_offsets) == (0, [100])
    assert f"1 records altered on the target ({topic}/0 offsets [100])" in report.summary().message


def status_of(config: dict[str, object], topic: str) -> KafkaMirrorStatus:
    """The mirror's status as the operator computes it from what the source says now."""
    parsed = WorkerConfig.model_validate(config)
    reader = ClusterReader("A", parsed.source.client_config())
    try:
        progress = reader.progress(parsed.consumer_group, {topic: 1})
    finally:
        reader.close()
    plan = plan_topics({topic: 1}, parsed.compiled_selections()[0], parsed.namer(), "B")
    return status_from(plan, progress)


def test_records_that_left_the_source_before_they_were_mirrored_are_lost(
    stack: MirrorStack,
    tmp_path: Path,
) -> None:
    """100 records mirrored; the mirror stopped; 50 more produced, and the source's retention
    removes offsets up to 130 before the mirror runs again: 100 to 129 are lost, shown in the
    status while the mirror is stopped, counted by the worker when it goes on from 130, and
    failed by the audit both times."""
    topic, config = mirror_new_topic(stack.kafka_a, stack.kafka_b, tmp_path)
    produce(stack.kafka_a.bootstrap_servers, topic, records(50, 1))
    delete_before(stack.kafka_a, topic, {0: 130})

    def check(status: KafkaMirrorStatus, checked: int) -> None:
        (shown,) = status.topics
        assert (shown.lost_to_retention, status.total_lost_to_retention) == (30, 30)
        degraded = next(c for c in status.conditions if c.type == "Degraded")
        assert (degraded.status, degraded.reason) == ("True", "RecordsLostToRetention")
        assert degraded.message.startswith(
            f"30 records left the source before they were mirrored ({topic} (30)): the mirror "
            "fell behind the source's retention. Raise the source topics' retention.ms"
        )
        report = audit(WorkerConfig.model_validate(config), stack.spark)
        assert report.result == "Failed"
        assert (report.lost_to_retention, report.records_checked, report.missing) == (
            30,
            checked,
            0,
        )
        (finding,) = report.findings
        assert (finding.lost_to_retention, finding.lost_offsets) == (30, [100, 130])
        assert (
            f"30 records left the source before they were mirrored ({topic}/0 offsets 100-129)"
            in (report.summary().message)
        )

    check(status_of(config, topic), checked=0)  # the mirror stopped: the source shows it
    worker = stack.start_worker(config, "worker-again")
    wait_for(lambda: committed_everything(config, topic), 60, "the worker to go on")
    labels = {"topic": topic, "partition": "0"}
    assert worker.metric("kafka_mirror_records_lost_to_retention_total", **labels) == 30
    assert worker.stop() == 0
    assert "offsets 100 to 129 left the source before they were mirrored" in worker.log()
    copied = consume(stack.kafka_b.bootstrap_servers, f"{topic}.A", 120)
    assert [r.value for r in copied[100:]] == [r.value for r in records(50, 1)[30:]]
    check(status_of(config, topic), checked=20)  # counted by the worker, in its commits
