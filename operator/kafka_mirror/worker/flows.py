"""Per source partition: what was handed to the target, what it acknowledged, what to commit.

The one invariant of the mirror lives here: the offset committed for a partition is never past
the first record the target has not acknowledged, except records skipped on purpose (a cycle)
and offsets that hold no record for us (transaction markers, aborted records, compacted gaps).
It is computed from acknowledgements and from records handled in order, never from the
consumer's position, which librdkafka moves past a whole fetched batch before the loop has
produced it.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from confluent_kafka import KafkaError, Message, TopicPartition

from kafka_mirror.kafka.formats import OffsetSync, provenance_packer
from kafka_mirror.worker.offsets import SyncEmitter

LATENCY_SAMPLE_SECONDS = 0.01  # at most 100 latency samples a second per partition
MAX_METADATA_CHARS = 400  # of the reason a stopped partition commits beside its offset
PARTITION_STALL_SECONDS = 60.0  # records waiting, none acknowledged: the partition is stalled


@dataclass
class Stop:
    """A partition paused at `offset` (the first record not handed to the target) for `reason`,
    consumed again from there at `retry_at` (monotonic seconds)."""

    offset: int
    reason: str
    retry_at: float
    retries: int = 0
    schema_id: int | None = None  # the record waits for this schema on the target's registry

    def describe(self, topic: str, partition: int) -> str:
        """What the partition commits as its offset's metadata: the operator shows it."""
        return f"stopped at {topic}[{partition}] offset {self.offset}: {self.reason}"[
            :MAX_METADATA_CHARS
        ]


@dataclass
class PartitionFlow:
    """One source partition on its way to the target.

    The loop hands records to the producer in offset order. `in_flight` holds the records whose
    delivery report was asked for and has not come, each with the number and bytes of the
    records queued up to it; `unreported_records` counts records queued after the last
    reported one (the producer's gapless guarantee makes a report vouch for every earlier record
    of the partition). `next_upstream` is one past the last record handled (queued, or skipped
    on purpose); `acknowledged` is the offset before which every handled record is on the target
    (or was skipped). A flow starts at `start`, where consumption (re)starts.

    `refused` is set when a report says the target refused a record: `acknowledged` stays where
    it was, whatever reports follow. `abandoned` flows belonged to a producer given up on: its
    late reports change nothing. `stop` pauses the partition at a record.
    """

    topic: str
    partition: int
    remote: str
    provenance_prefix: bytes  # the provenance header before the offset: alias, partition
    emitter: SyncEmitter
    publish_sync: Callable[[OffsetSync, bool], None]  # (sync, due now rather than delayed)
    start: int
    on_refused: Callable[[PartitionFlow], None] | None = None  # told once, at the first refusal
    provenance_suffix: bytes = b""  # after the offset: the source topic's ID (none: not known)
    in_flight: deque[tuple[int, int, int, int]] = field(default_factory=deque)
    unreported_records: int = 0
    unreported_bytes: int = 0
    next_upstream: int = -1
    next_sync_point: int = 0
    acknowledged: int = -1
    refused: str | None = None
    refused_code: int | None = None  # the error of the first refused record
    abandoned: bool = False
    stop: Stop | None = None
    held: bool = False  # consumption paused while the target acknowledges nothing of it
    size_watch: int = 2**62  # records above this many bytes have their exact size checked
    # Source schema id → target's, for values and keys in the wire format (None: as they are).
    value_ids: dict[int, int] | None = None
    key_ids: dict[int, int] | None = None
    waiting_since: float | None = None  # since when records wait with no acknowledgement
    # The leader epoch of a record at or after the last one handled, committed with the offset
    # so that librdkafka checks it against the log when the partition is assigned again
    # (KIP-320: a log truncated below it, by an unclean leader election, is detected). Never
    # older than the epoch of the record before the committed offset, so never a false alarm.
    leader_epoch: int = -1
    records: int = 0
    bytes: int = 0
    # (acknowledged at, written to the source at): wall-clock seconds, sampled.
    latencies: list[tuple[float, float]] = field(default_factory=list)
    next_latency_sample: float = 0.0

    def __post_init__(self) -> None:
        self.next_upstream = self.acknowledged = self.start
        self.on_delivery = self.delivered  # bound once, not once per record
        self.pack_provenance = provenance_packer(
            len(self.provenance_prefix), len(self.provenance_suffix)
        )

    def settled(self) -> bool:
        """Nothing queued for the target is waiting for its acknowledgement."""
        return not self.in_flight and not self.unreported_records

    def commit_offset(self) -> int:
        """Where a consumer of this partition must resume so that nothing is lost."""
        if self.refused is None and self.settled():
            return self.next_upstream
        return self.acknowledged

    def skipped(self, offset: int) -> None:
        """A record not mirrored on purpose (it came from the target: a cycle)."""
        self.next_upstream = offset + 1
        if self.settled() and self.refused is None:
            self.acknowledged = self.next_upstream

    def reached_end(self, offset: int) -> None:
        """The consumer reached the partition's end at `offset`: every record before it was
        returned to the loop, in order, before this event, so the offsets in between that never
        came are not records for us (transaction markers, aborted or compacted records)."""
        if offset > self.next_upstream and self.stop is None:
            self.skipped(offset - 1)

    def delivered(self, error: KafkaError | None, message: Message) -> None:
        """Delivery report from the target; reports of one partition arrive in order."""
        if self.abandoned:
            return
        upstream, timestamp_ms, records, size = self.in_flight.popleft()
        if error is not None or self.refused is not None:
            # Never acknowledge past a refused record, whatever comes after it.
            if self.refused is None:
                self.refused = f"offset {upstream}: {error.str() if error else 'refused'}"
                self.refused_code = error.code() if error else None
                if self.on_refused is not None:
                    self.on_refused(self)
            return
        self.acknowledged = upstream + 1
        self.waiting_since = time.monotonic() if not self.settled() else None
        self.records += records
        self.bytes += size
        if timestamp_ms > 0:
            now = time.time()
            if now >= self.next_latency_sample:
                self.latencies.append((now, timestamp_ms / 1000))
                self.next_latency_sample = now + LATENCY_SAMPLE_SECONDS
        downstream = message.offset()
        if downstream is not None and downstream >= 0:
            due = self.emitter.update(upstream, downstream)
            self.publish_sync(OffsetSync(self.topic, self.partition, upstream, downstream), due)

    def problem(self, now: float) -> str | None:
        """Why this partition does not flow: stopped at a record, or stalled (records waiting
        for the target's acknowledgement for PARTITION_STALL_SECONDS or more)."""
        if self.stop is not None:
            return self.stop.describe(self.topic, self.partition)
        if self.waiting_since is not None and now - self.waiting_since >= PARTITION_STALL_SECONDS:
            return (
                f"stalled at {self.topic}[{self.partition}] offset {self.acknowledged}: the "
                f"target has acknowledged nothing of {self.remote}[{self.partition}] for "
                f"{now - self.waiting_since:.0f}s"
            )[:MAX_METADATA_CHARS]
        return None


def commit_offsets(flows: Iterable[PartitionFlow]) -> list[TopicPartition]:
    """The offsets to commit for these flows; a partition that does not flow says why in the
    commit's metadata, where the operator reads it."""
    now = time.monotonic()
    offsets = []
    for flow in flows:
        offset = flow.commit_offset()
        if offset >= 0:
            metadata = flow.problem(now)
            offsets.append(
                TopicPartition(
                    flow.topic,
                    flow.partition,
                    offset,
                    metadata=metadata or "",
                    leader_epoch=flow.leader_epoch,  # -1: none (confluent-kafka takes no None)
                )
            )
    return offsets


@dataclass
class DeliveryWatch:
    """Notices acknowledgements stopping for the whole producer: records waiting for them, and
    `progress` (the sum of the waiting partitions' acknowledged offsets) unchanged for
    `patience` seconds. One partition waiting while others flow is not the producer's fault
    (a target partition short of in-sync replicas): that is reported, not acted on."""

    patience: float
    progress: int | None = None
    since: float = 0.0

    def stalled(self, progress: int | None, now: float) -> bool:
        """`progress` is None when nothing waits for an acknowledgement."""
        if progress is None or progress != self.progress:
            self.progress, self.since = progress, now
            return False
        return now - self.since >= self.patience
