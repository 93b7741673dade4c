"""Test helpers to create topics, produce and consume on the real clusters."""

from __future__ import annotations

import subprocess
import time
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicCollection, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from kafka_mirror_dev.builds import kafka_libs
from kafka_mirror_dev.clients import destroy_in_background
from kafka_mirror_dev.kafka import DEV_JVM, LocalKafka, java_command


@dataclass(frozen=True)
class Record:
    """What a user checks of a record: key, value, headers, timestamp and partition."""

    key: bytes | None
    value: bytes | None
    headers: tuple[tuple[str, bytes | None], ...] = ()
    timestamp: int | None = None
    partition: int | None = None
    offset: int | None = None


_ADMINS: dict[str, AdminClient] = {}


def admin_for(bootstrap: str) -> AdminClient:
    """One admin client per cluster for the whole session (clients are costly to make)."""
    if bootstrap not in _ADMINS:
        _ADMINS[bootstrap] = AdminClient({"bootstrap.servers": bootstrap})
    return _ADMINS[bootstrap]


def release_admins() -> None:
    """At the session's end: some clusters' brokers restarted (see kafka_mirror_dev.clients)."""
    owned = list(_ADMINS.values())
    _ADMINS.clear()
    destroy_in_background(owned)


def end_offsets(bootstrap: str, topic: str, admin: AdminClient | None = None) -> dict[int, int]:
    """Each partition's end offset (the high watermark), asked through `admin` or the session's
    client of the cluster."""
    admin = admin or admin_for(bootstrap)
    partitions = admin.list_topics(topic, timeout=10).topics[topic].partitions
    request = {TopicPartition(topic, p): OffsetSpec.latest() for p in partitions}
    return {
        tp.partition: result.result(timeout=10).offset
        for tp, result in admin.list_offsets(request, request_timeout=10).items()
    }


def topic_id(bootstrap: str, topic: str) -> str:
    """The topic's ID (its incarnation), as Kafka prints it and writes it on the brokers' disks."""
    described = admin_for(bootstrap).describe_topics(TopicCollection([topic]))[topic]
    return str(described.result(timeout=10).topic_id)


def incarnation_on_disk(cluster: LocalKafka, topic: str, incarnation: str) -> bool:
    """Whether a broker of `cluster` still holds a partition of `topic`'s incarnation (its ID)
    in its log directory. A broker renames a deleted partition's directory once it stopped
    taking records into it: the brokers' own evidence that a deletion is complete."""
    for node in cluster.nodes:
        for metadata in (node.directory / "data").glob(f"{topic}-*/partition.metadata"):
            if metadata.parent.name.rpartition("-")[0] != topic:
                continue  # another topic whose name starts with this one's
            if f"topic_id: {incarnation}" in metadata.read_text():
                return True
    return False


def create_topics(
    bootstrap: str,
    names: Sequence[str],
    partitions: int = 1,
    config: dict[str, str] | None = None,
    replication_factor: int = 1,
    replica_assignment: Sequence[Sequence[int]] | None = None,
) -> None:
    """Create topics; `replica_assignment` (each partition's brokers, the preferred leader
    first) replaces `partitions` and `replication_factor`."""
    layout: dict[str, Any] = (
        # librdkafka wants the partition count with an assignment (not its replica count).
        {
            "num_partitions": len(replica_assignment),
            "replica_assignment": [list(brokers) for brokers in replica_assignment],
        }
        if replica_assignment is not None
        else {"num_partitions": partitions, "replication_factor": replication_factor}
    )
    futures = admin_for(bootstrap).create_topics(
        [NewTopic(n, config=config or {}, **layout) for n in names]
    )
    for future in futures.values():
        future.result(timeout=30)
    _wait_until_visible(bootstrap, names)


def _wait_until_visible(bootstrap: str, names: Sequence[str], timeout: float = 30) -> None:
    """The controller acknowledges a creation before every broker has applied it: a metadata
    request to a lagging broker of a multi-broker cluster still says "unknown topic" (seen in
    CI on B3)."""
    deadline = time.monotonic() + timeout
    pending = list(names)
    while pending:
        known = admin_for(bootstrap).list_topics(timeout=10).topics
        pending = [n for n in pending if n not in known or known[n].error is not None]
        if pending and time.monotonic() > deadline:
            raise TimeoutError(f"{pending} not in the metadata {timeout:.0f}s after creation")
        if pending:
            time.sleep(0.1)


def produce(
    bootstrap: str,
    topic: str,
    records: Sequence[Record],
    security: Mapping[str, str] | None = None,
    timeout: float = 30,
) -> None:
    """Write `records`, each acknowledged within `timeout` seconds of the last one's send;
    `security` holds the client's TLS or SASL settings, if any."""
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, **(security or {})})
    failures: list[str] = []

    def on_delivery(error: object, _message: object) -> None:
        if error is not None:
            failures.append(str(error))

    for record in records:
        kwargs = {"timestamp": record.timestamp} if record.timestamp is not None else {}
        if record.partition is not None:
            kwargs["partition"] = record.partition
        while True:
            try:
                producer.produce(
                    topic,
                    key=record.key,
                    value=record.value,
                    headers=list(record.headers),
                    on_delivery=on_delivery,
                    **kwargs,
                )
                break
            except BufferError:
                producer.poll(0.1)  # local queue full: wait for deliveries
        producer.poll(0)
    remaining = producer.flush(timeout)
    assert remaining == 0 and not failures, f"produce failed: {failures or remaining}"


def consume(
    bootstrap: str,
    topic: str,
    count: int,
    timeout: float = 30.0,
    security: Mapping[str, str] | None = None,
) -> list[Record]:
    """Read `count` records from the start of `topic` (all partitions), or fail on timeout."""
    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": f"test-reader-{time.monotonic_ns()}",
            "auto.offset.reset": "earliest",
            # Notice a topic created after subscribing (librdkafka waits 5 minutes otherwise).
            "topic.metadata.refresh.interval.ms": 1000,
            "enable.auto.commit": False,
            **(security or {}),
        }
    )
    consumer.subscribe([topic])
    records: list[Record] = []
    deadline = time.monotonic() + timeout
    try:
        while len(records) < count and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=500, timeout=0.5):
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                        continue  # not created yet: keep waiting
                    raise RuntimeError(error)
                records.append(
                    Record(
                        key=message.key(),
                        value=message.value(),
                        headers=tuple(message.headers() or ()),
                        timestamp=message.timestamp()[1],
                        partition=message.partition(),
                        offset=message.offset(),
                    )
                )
    finally:
        consumer.close()
    assert len(records) >= count, f"read {len(records)} of {count} records from {topic}"
    return records


def group_member(bootstrap: str, group: str) -> Consumer:
    """A consumer for `group` with the worker's group settings (cooperative, no auto-commit),
    its session short enough for a test; subscribe it yourself."""
    return Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "enable.auto.commit": False,
            "partition.assignment.strategy": "cooperative-sticky",
            "session.timeout.ms": 6000,
            "heartbeat.interval.ms": 500,
        }
    )


def unique(prefix: str = "t") -> str:
    return f"{prefix}{uuid.uuid4().hex[:8]}"


def records(count: int, partitions: int, size: int = 20) -> list[Record]:
    # Recent timestamps: records older than the topic's retention (7 days) are deleted by the
    # broker's retention check, which looks like loss to a reader that started before it.
    recent_ms = int(time.time() * 1000) - 60_000
    return [
        Record(
            key=f"k{i}".encode(),
            value=f"v{i}".encode().ljust(size, b"."),
            headers=(("app-header", f"h{i}".encode()),),
            timestamp=recent_ms + i,
            partition=i % partitions,
        )
        for i in range(count)
    ]


def client_quota(cluster: LocalKafka, setting: str | None) -> None:
    """Set (or, with None, delete) a default producer byte-rate quota on every broker of the
    cluster, with Kafka's own kafka-configs tool."""
    change = ["--add-config", setting] if setting else ["--delete-config", "producer_byte_rate"]
    subprocess.run(
        java_command(
            kafka_libs(),
            "kafka.admin.ConfigCommand",
            "--bootstrap-server",
            cluster.bootstrap_servers,
            "--alter",
            *change,
            "--entity-type",
            "clients",
            "--entity-default",
            heap="256m",
            jvm=DEV_JVM,
        ),
        check=True,
        capture_output=True,
        text=True,
    )


def transactions_seen(cluster: LocalKafka) -> str:
    """What the cluster's transaction coordinators hold, in Kafka's own kafka-transactions tool's
    words: every transactional id with its state, and the transactions hanging on a partition
    (a failure's evidence, not ours to interpret)."""
    found = []
    for command in (["list"], ["find-hanging", "--broker-id", "1"]):
        done = subprocess.run(
            java_command(
                kafka_libs(),
                "org.apache.kafka.tools.TransactionsCommand",
                "--bootstrap-server",
                cluster.bootstrap_servers,
                *command,
                heap="256m",
                jvm=DEV_JVM,
            ),
            capture_output=True,
            text=True,
            timeout=120,
        )
        found.append(
            f"kafka-transactions {command[0]}: {done.stdout.strip()} {done.stderr.strip()}"
        )
    return "; ".join(found)


def open_transaction(bootstrap: str, topic: str, partition: int, count: int) -> Producer:
    """A transactional producer whose open transaction holds `count` records of
    `topic[partition]`, on the log (an abort drops what is still queued): the caller ends it."""
    producer = Producer({"bootstrap.servers": bootstrap, "transactional.id": unique("tx")})
    producer.init_transactions(30)
    producer.begin_transaction()
    for i in range(count):
        producer.produce(topic, value=f"in a transaction {i}".encode(), partition=partition)
    producer.flush(30)
    return producer
