"""What the operator reads from Kafka for a mirror's status: topics, progress, lag and latency.

Lag is the source's end offset minus what the workers' group committed there; latency is the age
of the oldest record not yet mirrored (0 when caught up), read from the source itself. Records
lost to retention are what the workers counted (in their commits' metadata) plus what left the
source since, below its log start, while nothing consumed it (a stopped mirror). All of it
goes through confluent-kafka's admin API plus one assign-only consumer that never commits.

One reader serves every mirror on its cluster connection: concurrent reads of topics and
offsets go out as one request (`BatchedRead`), and the probe remembers what it found, since the
record at an offset never changes.
"""

from __future__ import annotations

import threading
import time
from collections import Counter, OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, TypeVar

from confluent_kafka import (
    Consumer,
    IsolationLevel,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from kafka_mirror.kafka.acl_grants import held_grants
from kafka_mirror.kafka.admin import topic_configs, topic_ids
from kafka_mirror.kafka.batching import BatchedRead
from kafka_mirror.kafka.client import (
    AUTH_ERRORS,
    ClusterUnavailable,
    Position,
    reader,
    transactions_refusal,
)
from kafka_mirror.kafka.coordinator import GroupCoordinator
from kafka_mirror.kafka.formats import RetentionLoss, read_commit_note

REQUEST_TIMEOUT = 5.0
ANSWER_WAIT = 2 * REQUEST_TIMEOUT  # a request sent with REQUEST_TIMEOUT, waited for at most
RENEW_SECONDS = 10.0  # the least time between two new admin clients of one reader
# The latency probe reads one record per lagging partition; beyond this many it samples.
LATENCY_PROBE_PARTITIONS = 100
# A transactional id the cluster took is probed again after this (an ACL may be taken back).
TRANSACTIONS_RECHECK_SECONDS = 600.0
PROBE_MEMORY = 100_000  # (topic, partition, offset) -> timestamp entries kept, oldest dropped
# The ACL grants topic, read for every mirror onto this cluster at most this often.
GRANTS_REREAD_SECONDS = 30.0

T = TypeVar("T")


@dataclass(frozen=True)
class PartitionProgress:
    topic: str
    partition: int
    start: int
    end: int
    committed: int | None
    problem: str = ""  # from the metadata the workers committed: why the partition does not flow
    counted_loss: RetentionLoss | None = None  # what the workers counted lost to retention

    @property
    def loss(self) -> RetentionLoss | None:
        """Records that left the source before they were mirrored: those the workers counted,
        and those below the log start that no worker has reached yet."""
        counted = self.counted_loss
        reached = max(self.committed or 0, counted.end if counted else 0)
        if self.committed is None or self.start <= reached:
            return counted
        return (counted or RetentionLoss(0, reached, reached)).add(reached, self.start)

    @property
    def lag(self) -> int:
        position = self.start if self.committed is None else max(self.committed, self.start)
        return max(self.end - position, 0)


def _waited(read: Callable[[], T], limit: float) -> T:
    """The answer of a request waited for `limit` seconds at most: the status loop waits for
    every refresh, and a group's offsets are asked for with no librdkafka limit of their own
    (GROUP_REQUEST_LIMIT), so only this wait ends a lost one."""
    try:
        return read()
    except KafkaException as error:
        raise ClusterUnavailable("KafkaError", str(error.args[0])) from error
    except TimeoutError:
        raise ClusterUnavailable("KafkaError", f"no answer within {limit:g} s") from None


def _offset_or_error(future: Any) -> int | ClusterUnavailable:
    """One partition's answer in a batch: its error must not fail the other callers' reads."""
    try:
        return int(_waited(lambda: future.result(timeout=ANSWER_WAIT), ANSWER_WAIT).offset)
    except ClusterUnavailable as error:
        return error


class ClusterReader:
    """Admin access to one cluster; remembers the client's last error to explain failures."""

    def __init__(self, alias: str, settings: dict[str, str]) -> None:
        self.alias = alias
        self.bootstrap = settings.get("bootstrap.servers", "")
        self.last_error: KafkaError | None = None
        # Kept apart: a refusal is followed by "all brokers down", which would hide it.
        self.auth_error: KafkaError | None = None
        self._settings = settings
        self._admin_settings: dict[str, Any] = {**settings, "error_cb": self._on_error}
        self._renewed_at = time.monotonic()
        self._renew_lock = threading.Lock()
        try:
            self._admin = AdminClient(self._admin_settings)
        except KafkaException as error:
            # An unknown key or a bad value in the mirror's `config`: the worker cannot start
            # with it either, so it is the user's to fix.
            raise ClusterUnavailable(
                "InvalidClientConfig",
                f"the client settings for cluster {alias} are refused: {error.args[0].str()}; "
                "fix the mirror's config (librdkafka's property names and values)",
            ) from None
        self._groups = GroupCoordinator(settings)
        self._consumer: Consumer | None = None
        self._probe_lock = threading.Lock()  # one consumer: one probe at a time
        self._transactions_taken: dict[str, float] = {}  # transactional id -> when
        self._first_timestamps: OrderedDict[tuple[str, int, int], int] = OrderedDict()
        self._metadata = BatchedRead[str, dict[str, int]](lambda _: {"": self._list_topics()})
        self._ranges = BatchedRead[Position, tuple[int, int] | ClusterUnavailable](
            self._read_ranges
        )
        self._grants_lock = threading.Lock()
        self._grants: tuple[float, Counter[str]] | None = None  # when read, owner → bindings

    def _on_error(self, error: KafkaError) -> None:
        self.last_error = error
        if error.code() in AUTH_ERRORS:
            self.auth_error = error

    def _unavailable(self, error: Exception) -> ClusterUnavailable:
        self._admin.poll(0)  # serves error_cb: an admin client reports errors only when polled
        if self.auth_error is not None:
            return ClusterUnavailable(
                "AuthenticationFailed",
                f"cluster {self.alias} ({self.bootstrap}) refused the credentials: "
                f"{self.auth_error.str()}; check the Secret the mirror's sasl/tls settings name",
            )
        last = self.last_error
        detail = last.str() if last is not None else str(error)
        return ClusterUnavailable(
            "Unreachable",
            f"cannot reach cluster {self.alias} at {self.bootstrap}: {detail}; "
            "check bootstrapServers and the network path from the operator",
        )

    def topics(self) -> dict[str, int]:
        """Topic name → partition count."""
        return self._metadata.read([""])[""]

    def _list_topics(self) -> dict[str, int]:
        try:
            metadata = self._admin.list_topics(timeout=REQUEST_TIMEOUT)
        except KafkaException as error:
            raise self._unavailable(error) from error
        if not metadata.brokers:
            raise self._unavailable(RuntimeError("no broker answered"))
        self.auth_error = None
        return {
            name: len(topic.partitions)
            for name, topic in metadata.topics.items()
            if topic.error is None
        }

    def acl_grants_held(self) -> Counter[str]:
        """How many bindings each owner (a mirror's ACL sync) holds on this cluster, by its
        ACL_GRANTS_TOPIC, read at most every GRANTS_REREAD_SECONDS for all the mirrors onto it.
        Raises ClusterUnavailable."""
        with self._grants_lock:
            if self._grants is None or time.monotonic() - self._grants[0] > GRANTS_REREAD_SECONDS:
                held = held_grants(self._settings)
                counts = Counter(owner for (owner, _), owned in held.items() if owned)
                self._grants = (time.monotonic(), counts)
            return self._grants[1]

    def transactions_refusal(self, transactional_id: str) -> ClusterUnavailable | None:
        """Why this cluster cannot take an exactly-once mirror's transactions, or None. A probe
        that succeeded is remembered for a while; one that failed is tried again next time."""
        taken = self._transactions_taken.get(transactional_id)
        if taken is not None and time.monotonic() - taken < TRANSACTIONS_RECHECK_SECONDS:
            return None
        refusal = transactions_refusal(self._settings, self.alias, transactional_id)
        if refusal is None:
            self._transactions_taken[transactional_id] = time.monotonic()
        return refusal

    def _offsets(
        self, partitions: list[TopicPartition], spec: OffsetSpec
    ) -> dict[Position, int | ClusterUnavailable]:
        if not partitions:
            return {}
        # The end a read_committed reader (our workers, the source's consumers) can reach: an
        # open transaction's records count once it commits, so a promote does not wait on it.
        futures = self._admin.list_offsets(
            {tp: spec for tp in partitions},
            isolation_level=IsolationLevel.READ_COMMITTED,
            request_timeout=REQUEST_TIMEOUT,
        )
        return {(tp.topic, tp.partition): _offset_or_error(f) for tp, f in futures.items()}

    def _read_ranges(
        self, partitions: frozenset[Position]
    ) -> dict[Position, tuple[int, int] | ClusterUnavailable]:
        asked = [TopicPartition(topic, partition) for topic, partition in partitions]
        ends = self._offsets(asked, OffsetSpec.latest())  # type: ignore[no-untyped-call]
        starts = self._offsets(asked, OffsetSpec.earliest())  # type: ignore[no-untyped-call]
        ranges: dict[Position, tuple[int, int] | ClusterUnavailable] = {}
        for key, end in ends.items():
            start = starts[key]
            if isinstance(start, ClusterUnavailable):
                ranges[key] = start
            elif isinstance(end, ClusterUnavailable):
                ranges[key] = end
            else:
                ranges[key] = (start, end)
        return ranges

    def _renew_admin(self) -> None:
        """After a broker restart librdkafka's admin client (2.16) can go on failing requests
        that a new client answers at once (offsets are refused for the leader epoch it
        remembers: FENCED_LEADER_EPOCH), so the next read uses a new one, at
        most every RENEW_SECONDS. The old one is destroyed on a thread of its own: its destroy
        can hang after a broker restart (librdkafka#4519)."""
        with self._renew_lock:
            if time.monotonic() - self._renewed_at < RENEW_SECONDS:
                return
            old = [self._admin]
            self._admin, self._renewed_at = AdminClient(self._admin_settings), time.monotonic()
        threading.Thread(target=old.clear, name="destroy-admin", daemon=True).start()

    def log_ranges(self, topics: dict[str, int]) -> dict[Position, tuple[int, int]]:
        """(log start, end) of every partition of `topics`."""
        wanted = [(t, p) for t, count in topics.items() for p in range(count)]
        read = self._ranges.read(wanted)
        ranges: dict[Position, tuple[int, int]] = {}
        for key in wanted:
            found = read[key]
            if isinstance(found, ClusterUnavailable):
                self._renew_admin()
                raise ClusterUnavailable(found.reason, str(found))
            ranges[key] = found
        return ranges

    def topic_ids(self, topics: list[str]) -> dict[str, bytes | None]:
        """Each topic's ID (its incarnation), as the provenance header carries it."""
        try:
            return topic_ids(self._admin, topics)
        except KafkaException as error:
            raise ClusterUnavailable("KafkaError", str(error.args[0])) from error

    def compacted(self, topics: list[str]) -> set[str]:
        """The topics whose cleanup.policy compacts them."""
        try:
            configs = topic_configs(self._admin, topics)
        except KafkaException as error:
            raise ClusterUnavailable("KafkaError", str(error.args[0])) from error
        return {
            topic
            for topic, entries in configs.items()
            if "compact" in str(getattr(entries.get("cleanup.policy"), "value", ""))
        }

    def progress(self, group: str, topics: dict[str, int]) -> list[PartitionProgress]:
        """Start, end and the group's committed offset of every partition of `topics`."""
        partitions = [TopicPartition(t, p) for t, count in topics.items() for p in range(count)]
        ranges = self.log_ranges(topics)
        offsets = _waited(lambda: self._groups.committed(group, ANSWER_WAIT), ANSWER_WAIT)
        committed = {key: found.offset for key, found in offsets.items()}
        notes = {key: read_commit_note(found.metadata) for key, found in offsets.items()}
        return [
            PartitionProgress(
                tp.topic,
                tp.partition,
                *ranges[(tp.topic, tp.partition)],
                committed.get((tp.topic, tp.partition)),
                *notes.get((tp.topic, tp.partition), ("", None)),
            )
            for tp in partitions
        ]

    def oldest_pending_timestamps(
        self, pending: Iterable[PartitionProgress], timeout: float = 2.0
    ) -> dict[Position, int]:
        """The timestamp (ms) of the first record not yet mirrored, per lagging partition."""
        wanted = sorted((p for p in pending if p.lag > 0), key=lambda p: -p.lag)
        positions = {
            (p.topic, p.partition): p.start if p.committed is None else p.committed
            for p in wanted[:LATENCY_PROBE_PARTITIONS]
        }
        with self._probe_lock:
            unknown = {
                key: offset
                for key, offset in positions.items()
                if (*key, offset) not in self._first_timestamps
            }
            if unknown:
                for (topic, partition), stamp in self._probe(unknown, timeout).items():
                    self._first_timestamps[(topic, partition, unknown[(topic, partition)])] = stamp
                while len(self._first_timestamps) > PROBE_MEMORY:
                    self._first_timestamps.popitem(last=False)
            return {
                key: self._first_timestamps[(*key, offset)]
                for key, offset in positions.items()
                if (*key, offset) in self._first_timestamps
            }

    def _probe(self, positions: dict[Position, int], timeout: float) -> dict[Position, int]:
        """Read the first record at or after each position; its timestamp, per partition."""
        if self._consumer is None:
            self._consumer = reader(self._settings, "kafka-mirror-operator-probe")
        consumer = self._consumer
        consumer.assign([TopicPartition(t, p, offset) for (t, p), offset in positions.items()])
        found: dict[Position, int] = {}
        deadline = time.monotonic() + timeout
        while len(found) < len(positions) and time.monotonic() < deadline:
            for message in consumer.consume(len(positions), timeout=0.2):
                key = (message.topic() or "", message.partition() or 0)
                if message.error() is None and key not in found:
                    found[key] = message.timestamp()[1]
                    consumer.pause([TopicPartition(key[0], key[1])])
        # A paused partition stays paused in the client across assignments: resume them, or the
        # next probe of the same partitions reads nothing and the latency is never known again.
        consumer.resume([TopicPartition(topic, partition) for topic, partition in found])
        consumer.unassign()
        return found

    def close(self) -> None:
        with self._probe_lock:
            if self._consumer is not None:
                self._consumer.close()
