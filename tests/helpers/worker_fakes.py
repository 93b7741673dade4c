"""Fakes of the worker's Kafka clients for unit tests of its logic (the commit model, the
permanent refusals): one source topic TOPIC of PARTITIONS partitions mirrored to REMOTE.

They stand in for librdkafka with the guarantees the worker relies on and no more: the
consumer's position runs ahead of what the loop handled (as librdkafka's does), reports of a
partition come in order, the producer never acknowledges a record after failing an earlier one
of its partition (the gapless guarantee), a failed producer loses what it held, and a topic it
is denied fails every record of it that it held, reported or not.
"""

from __future__ import annotations

import random
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from confluent_kafka import KafkaError, KafkaException, TopicPartition

from kafka_mirror.kafka.formats import PROVENANCE_HEADER, Provenance
from kafka_mirror.topics import TopicPlan
from kafka_mirror.worker.at_least_once import AtLeastOnceWorker
from kafka_mirror.worker.exactly_once import ExactlyOnceWorker
from kafka_mirror.worker.metrics import WorkerMetrics
from kafka_mirror.worker.mirror import MirrorWorker

TOPIC, REMOTE, PARTITIONS = "orders", "orders.A", 3
# The configuration files of every fake worker in the session: one directory, removed at exit
# (the property tests make thousands of workers).
CONFIG_FILES = tempfile.TemporaryDirectory(prefix="kafka-mirror-fake-workers-")
DENIED = KafkaError.TOPIC_AUTHORIZATION_FAILED  # write denied on the target (an ACL)
Callback = Callable[[KafkaError | None, Any], None]


@dataclass
class Message:
    topic_: str
    partition_: int
    offset_: int
    error_: KafkaError | None = None

    def error(self) -> KafkaError | None:
        return self.error_

    def topic(self) -> str:
        return self.topic_

    def partition(self) -> int:
        return self.partition_

    def offset(self) -> int:
        return self.offset_

    def key(self) -> bytes:
        return b"k"

    def value(self) -> bytes:
        return self.value_ if self.value_ is not None else b"v%d" % self.offset_

    headers_: list[tuple[str, bytes]] = field(default_factory=list)
    value_: bytes | None = None  # None: b"v<offset>"

    def headers(self) -> list[tuple[str, bytes]]:
        return self.headers_  # confluent-kafka hands out the same list on every call

    def timestamp(self) -> tuple[int, int]:
        return (1, 1_700_000_000_000)

    leader_epoch_: int | None = 0

    def leader_epoch(self) -> int | None:
        return self.leader_epoch_


@dataclass
class Source:
    """Each partition's log: True for a record, False for a transaction marker; the headers of
    the records that have any, by (partition, offset)."""

    logs: list[list[bool]] = field(default_factory=lambda: [[] for _ in range(PARTITIONS)])
    committed: dict[int, int] = field(default_factory=dict)
    headers: dict[tuple[int, int], list[tuple[str, bytes]]] = field(default_factory=dict)


@dataclass
class Target:
    """Upstream offsets acknowledged per partition; whether it denies the mirror the topic;
    which run of each partition copies it now (a new one each time it is given up) and the
    records of an earlier run it acknowledged after that (two runs interleaved)."""

    acknowledged: list[set[int]] = field(default_factory=lambda: [set() for _ in range(PARTITIONS)])
    denied: bool = False
    runs: list[int] = field(default_factory=lambda: [0] * PARTITIONS)
    interleaved: list[tuple[int, int]] = field(default_factory=list)  # partition, upstream


class FakeConsumer:
    def __init__(self, source: Source, rng: random.Random) -> None:
        self.source, self.rng = source, rng
        self.position: dict[int, int] = {}
        self.paused: set[int] = set()
        self.eof_sent: set[int] = set()
        self.on_revoke: Callable[[Any, list[TopicPartition]], None] | None = None

    def assign(self, partitions: list[int]) -> None:
        for p in partitions:
            self.position[p] = self.source.committed.get(p, 0)
            self.eof_sent.discard(p)

    def consume(self, num_messages: int = 1, timeout: float = 0) -> list[Message]:
        batch: list[Message] = []
        wanted = min(self.rng.randint(0, 12), num_messages)
        for p in self.rng.sample(sorted(self.position), len(self.position)):
            if p in self.paused:
                continue
            log = self.source.logs[p]
            while len(batch) < wanted and self.position[p] < len(log):
                offset = self.position[p]
                self.position[p] += 1  # ahead of the loop, as librdkafka's position is
                self.eof_sent.discard(p)
                if log[offset]:
                    headers = list(self.source.headers.get((p, offset), []))
                    batch.append(Message(TOPIC, p, offset, headers_=headers))
            if self.position[p] == len(log) and p not in self.eof_sent and len(batch) < wanted:
                self.eof_sent.add(p)
                eof = KafkaError(KafkaError._PARTITION_EOF)
                batch.append(Message(TOPIC, p, len(log), eof))
        return batch

    def poll(self, timeout: float = 0) -> Message | None:
        batch = self.consume(1)
        return batch[0] if batch else None

    def seek(self, tp: TopicPartition) -> None:
        assert tp.partition in self.position, "seek on a partition not assigned"
        self.position[tp.partition] = tp.offset
        self.eof_sent.discard(tp.partition)

    def pause(self, tps: list[TopicPartition]) -> None:
        self.paused |= {tp.partition for tp in tps}

    def resume(self, tps: list[TopicPartition]) -> None:
        self.paused -= {tp.partition for tp in tps}

    def commit(self, offsets: list[TopicPartition], asynchronous: bool = True) -> None:
        for tp in offsets:
            assert tp.partition in self.position, "commit for a partition not assigned"
            self.source.committed[tp.partition] = tp.offset

    def assignment(self) -> list[TopicPartition]:
        return [TopicPartition(TOPIC, p) for p in sorted(self.position)]

    def get_watermark_offsets(self, tp: TopicPartition, cached: bool = False) -> tuple[int, int]:
        return 0, len(self.source.logs[tp.partition])

    def subscribe(self, topics: list[str], **callbacks: Any) -> None:
        self.on_revoke = callbacks["on_revoke"]

    def unsubscribe(self) -> None:
        self.position.clear()

    def close(self) -> None:
        if self.on_revoke is not None and self.position:
            self.on_revoke(self, self.assignment())
        self.position.clear()


class FakeProducer:
    """In-order, gapless; a failed producer loses what it held and refuses everything."""

    def __init__(self, target: Target, capacity: int, remote: str = REMOTE) -> None:
        self.target, self.capacity, self.remote = target, capacity, remote
        # partition, upstream, callback, the partition's run when queued
        self.queue: list[tuple[int, int, Callback | None, int]] = []
        self.reports: list[tuple[Callback, KafkaError | None, int]] = []
        self.failed = False
        self.fatal = "fatal: gapless guarantee"  # the fatal error's message, once failed
        self.refuse_next: int | None = None
        self.unknown: set[int] = set()  # partitions refused until the metadata is refreshed
        self.downstream = 0
        self.sent: dict[tuple[int, int], list[tuple[str, bytes]]] = {}  # headers, as queued

    def produce(self, topic: str, *args: Any, **kwargs: Any) -> None:
        if self.failed:
            raise KafkaException(KafkaError(KafkaError._FATAL))
        if topic != self.remote:
            return  # offset syncs, heartbeats
        _value, _key, partition, callback, _, _timestamp, headers = args
        if self.target.denied:
            raise KafkaException(KafkaError(DENIED))
        if partition in self.unknown:
            raise KafkaException(KafkaError(KafkaError._UNKNOWN_PARTITION))
        if self.refuse_next is not None:
            code, self.refuse_next = self.refuse_next, None
            raise KafkaException(KafkaError(code))
        if len(self.queue) >= self.capacity:
            raise BufferError("queue full")
        # Copied, as librdkafka copies them (the worker reuses one dict for a record's headers).
        headers = list(headers.items()) if isinstance(headers, dict) else list(headers)
        # Ours, last, once (the record's own headers may hold an earlier hop's).
        name, ours = headers[-1]
        assert name == PROVENANCE_HEADER and [v for _, v in headers].count(ours) == 1, headers
        upstream = Provenance.decode(ours).offset
        self.sent[(partition, upstream)] = headers
        self.queue.append((partition, upstream, callback, self.target.runs[partition]))

    def deliver(self, count: int) -> None:
        """The target acknowledges the oldest `count` records (in order)."""
        for partition, upstream, callback, run in self.queue[:count]:
            self.target.acknowledged[partition].add(upstream)
            if run != self.target.runs[partition]:
                self.target.interleaved.append((partition, upstream))
            if callback is not None:
                self.downstream += 1
                self.reports.append((callback, None, self.downstream))
        del self.queue[:count]

    def refuse_partition(self, partition: int) -> None:
        """Every record of `partition` held now fails, reported or not, and new ones are
        refused until the metadata is read again (its remote topic was deleted, re-created)."""
        self.unknown.add(partition)
        self.fail_held({partition}, KafkaError._UNKNOWN_PARTITION)

    def fail_held(self, partitions: set[int], code: int) -> None:
        error = KafkaError(code)
        for _p, _u, callback, _run in [q for q in self.queue if q[0] in partitions]:
            if callback is not None:
                self.reports.append((callback, error, -1))
        self.queue = [q for q in self.queue if q[0] not in partitions]

    def poll(self, timeout: float = 0) -> int:
        if self.failed and self.queue:
            self.queue.clear()  # lost with the producer
            raise KafkaException(KafkaError(KafkaError._GAPLESS_GUARANTEE, self.fatal, fatal=True))
        served, self.reports = self.reports, []
        for callback, error, downstream in served:
            callback(error, Message(REMOTE, 0, downstream))
        return len(served)

    def flush(self, timeout: float = 0) -> int:
        if timeout and not self.failed:
            self.deliver(len(self.queue))
        self.poll()
        return len(self.queue)

    def purge(self) -> None:
        error = KafkaError(KafkaError._PURGE_QUEUE)
        self.reports += [(c, error, -1) for _p, _u, c, _run in self.queue if c is not None]
        self.queue.clear()

    # A transactional producer's (exactly once): aborting purges what it held.
    def begin_transaction(self) -> None:
        pass

    def abort_transaction(self, timeout: float = 0) -> None:
        self.purge()

    def list_topics(self, *args: Any, **kwargs: Any) -> None:
        self.unknown.clear()


class FakeReader:
    """The tails' reader: the fake workers make their checkpoint task but run no pass of it."""


class FakeAdmin:
    def describe_configs(self, resources: list[Any]) -> dict[Any, Any]:
        return {}  # no size limit known: the loop checks none


class FakeMembers:
    """The exactly-once workers' group on the target, as a worker that is never rebalanced
    sees it."""

    def subscribe(self, topics: list[str], **callbacks: Any) -> None:
        pass

    def poll(self, timeout: float = 0) -> None:
        pass


class FakeClients:
    def __init__(
        self,
        source: Source,
        target: Target,
        rng: random.Random,
        capacity: int,
        remote: str = REMOTE,
    ) -> None:
        self.consumer = FakeConsumer(source, rng)
        self.target, self.capacity, self.remote = target, capacity, remote
        self.producer = FakeProducer(target, capacity, remote)
        self.replaced: list[FakeProducer] = []  # they send on what they hold unless purged
        self.syncs_producer = self.checkpoints_producer = self.producer
        self.syncs_reader = self.checkpoints_reader = FakeReader()
        self.source_admin = self.target_admin = FakeAdmin()
        self.source_groups = self.target_groups = None  # not reached: no group is listed
        self.admin_settings: dict[str, dict[str, Any]] = {"target": {}}  # never connected
        self.members: FakeMembers | None = None  # the exactly-once workers' group on the target

    @property
    def group_consumer(self) -> FakeConsumer | FakeMembers:
        return self.consumer if self.members is None else self.members

    def group_session_seconds(self) -> float:
        return 45.0

    def renew_group_consumer(self) -> FakeConsumer:
        assert self.members is None, "the fake renews the source consumer only"
        old, self.consumer = self.consumer, FakeConsumer(self.consumer.source, self.consumer.rng)
        return old

    def renew_producer(self, linger_ms: int | None = None) -> FakeProducer:
        old, self.producer = self.producer, FakeProducer(self.target, self.capacity, self.remote)
        self.syncs_producer = self.producer
        self.replaced.append(old)
        return old

    def close(self) -> None:
        self.consumer.close()


def fake_worker(
    clients: FakeClients, worker_class: type[MirrorWorker] = AtLeastOnceWorker, **settings: Any
) -> MirrorWorker:
    """A worker from A to B on `clients`, mirroring TOPIC to `clients.remote`, every partition
    assigned; `settings` add to (or replace) its configuration file's."""
    with tempfile.NamedTemporaryFile(dir=CONFIG_FILES.name, suffix=".yaml", delete=False) as file:
        path = Path(file.name)
    config = {
        "mirror": "model/m",
        "source": {"alias": "A", "bootstrapServers": "a:9092"},
        "target": {"alias": "B", "bootstrapServers": "b:9092"},
        "selections": [{"includes": [TOPIC]}],
        **settings,
    }
    path.write_text(yaml.safe_dump(config))
    if issubclass(worker_class, ExactlyOnceWorker):
        clients.members = FakeMembers()
    worker = worker_class(path, WorkerMetrics(), lambda *_args: clients)  # type: ignore[arg-type]
    worker.topics.plan = TopicPlan({TOPIC: clients.remote}, [])
    worker.topics.remote_partitions = {clients.remote: PARTITIONS}
    worker._subscribe([TOPIC])
    clients.consumer.assign(list(range(PARTITIONS)))
    return worker


def loop_once(worker: MirrorWorker) -> None:
    """One round of the worker's loop, as `MirrorWorker.run` goes round."""
    if worker.producer_failure is not None:
        worker._replace_producer()
    if worker.partitions.backlog:
        batch, worker.partitions.backlog = worker.partitions.backlog, []
        worker.sender.send(batch)
    else:
        worker.sender.send(worker._next_batch())
    worker._serve_reports(0)


def unacknowledged_below_commits(source: Source, target: Target) -> dict[int, list[int]]:
    """Per partition, the records before its committed offset the target never acknowledged."""
    missing = {
        partition: [
            offset
            for offset in range(min(committed, len(source.logs[partition])))
            if source.logs[partition][offset] and offset not in target.acknowledged[partition]
        ]
        for partition, committed in source.committed.items()
    }
    return {partition: offsets for partition, offsets in missing.items() if offsets}
