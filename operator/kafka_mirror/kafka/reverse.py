"""What the copies on this cluster say of their originals: where each remote partition's copies
end on the source (a failover's RPO), and reverse checkpoints.

Reverse checkpoints, for a failback: where a group that read remote topics on this cluster
(`t.A`, copies of `t` on cluster A) resumes in the original topics on A.

Each copy names its original in its provenance header (cluster, partition, offset). A group
whose next record in `t.A[p]` is the copy of `t[p]` at offset s resumes at s on A: every record
of `t[p]` from s on either has its copy at or after the group's position (not read yet) or never
reached this cluster (lost in the failover: read now on A). Records before s were read through
their copies, but for copies the mirror re-sent, which are read again. A group that read to the
end of `t.A[p]` resumes one past the last copy's original.

Exactly once, each transaction of copies ends in a commit marker, which takes an offset and
is no record: `high - 1` is a marker, and a group that read to the end may have committed at
it. So "the last copy" is read back from the end until a record (`last_original`), and a
position with nothing but markers after it counts as read to the end.
"""

from __future__ import annotations

import time
from enum import Enum
from typing import Any

from confluent_kafka import Consumer, KafkaError, Message, TopicPartition

from kafka_mirror.kafka.client import Position, reader
from kafka_mirror.kafka.formats import provenance_from

READ_SECONDS = 10.0
FIRST_SPAN = 16  # offsets read back from the end first: a copy is right before its marker
SPAN_GROWTH = 8


class Read(Enum):
    TO_THE_END = "nothing but transaction markers (or aborted records) from there on"


def _records(
    consumer: Consumer, topic: str, partition: int, start: int, end: int, deadline: float
) -> list[Message] | None:
    """The records a read_committed reader gets of `topic[partition]` in [start, end); None
    when they cannot be read before `deadline`."""
    consumer.assign([TopicPartition(topic, partition, start)])
    found: list[Message] = []
    try:
        while time.monotonic() < deadline:
            for message in consumer.consume(500, timeout=0.2):
                error = message.error()
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    return found
                if error is not None:
                    continue  # a passing error: the deadline bounds it
                if (message.offset() or 0) >= end:
                    return found
                found.append(message)
    finally:
        consumer.unassign()
    return None


def _original(message: Message, alias: str, partition: int) -> int | None:
    provenance = provenance_from(message.headers(), alias, partition)
    return None if provenance is None else provenance.offset


def first_original(
    consumer: Consumer, topic: str, partition: int, at: int, alias: str, deadline: float
) -> int | Read | None:
    """The original offset of the first record of `topic[partition]` at or after `at`;
    TO_THE_END when there is none; None when it is no copy from `alias`'s same partition, or
    cannot be read in time."""
    consumer.assign([TopicPartition(topic, partition, at)])
    try:
        while time.monotonic() < deadline:
            for message in consumer.consume(1, timeout=0.5):
                error = message.error()
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    return Read.TO_THE_END
                if error is None:
                    return _original(message, alias, partition)
    finally:
        consumer.unassign()
    return None


def last_original(
    consumer: Consumer, topic: str, partition: int, low: int, high: int, alias: str
) -> int | None:
    """The original offset of the last record of `topic[partition]` (in [low, high)), read
    back from the end in growing spans past markers and aborted records; None when the
    partition has no record, its last is no copy from `alias`, or it cannot be read in time."""
    deadline = time.monotonic() + READ_SECONDS
    end, span = high, FIRST_SPAN
    while end > low:
        start = max(low, end - span)
        records = _records(consumer, topic, partition, start, end, deadline)
        if records is None:
            return None
        if records:
            return _original(records[-1], alias, partition)
        end, span = start, span * SPAN_GROWTH
    return None


def copied_ends(settings: dict[str, Any], remote: str, alias: str) -> int | None:
    """How far the copies in `remote` reach into its original on `alias`, summed over the
    partitions: one past the original offset of each partition's last record. None when a
    partition has no record or ends in a record that is no copy from `alias` (nothing to
    say)."""
    consumer = reader(settings, "kafka-mirror-operator-reverse")
    try:
        listed = consumer.list_topics(remote, timeout=READ_SECONDS).topics.get(remote)
        if listed is None or listed.error is not None:
            return None
        total = 0
        for partition in sorted(listed.partitions):
            low, high = consumer.get_watermark_offsets(
                TopicPartition(remote, partition), timeout=READ_SECONDS, cached=False
            )
            last = last_original(consumer, remote, partition, low, high, alias)
            if last is None:
                return None
            total += last + 1
        return total
    finally:
        consumer.close()


def original_positions(
    settings: dict[str, Any], positions: dict[Position, int], alias: str, originals: dict[str, str]
) -> dict[Position, int]:
    """For a group's positions in remote topics of this cluster (`originals` maps each remote
    topic to its original on `alias`), the positions to resume from in the originals."""
    consumer = reader(settings, "kafka-mirror-operator-reverse")
    resumed: dict[Position, int] = {}
    try:
        for (topic, partition), offset in sorted(positions.items()):
            original = originals.get(topic)
            if original is None:
                continue
            low, high = consumer.get_watermark_offsets(
                TopicPartition(topic, partition), timeout=READ_SECONDS, cached=False
            )
            found = resume_original(consumer, topic, partition, offset, (low, high), alias)
            if found is not None:
                resumed[(original, partition)] = found
    finally:
        consumer.close()
    return resumed


def resume_original(
    consumer: Consumer,
    topic: str,
    partition: int,
    offset: int,
    watermarks: tuple[int, int],
    alias: str,
) -> int | None:
    """Where a group at `offset` of the copies in `topic[partition]` resumes in its original
    on `alias`; None when the copies tell nothing (no record, not copies from `alias`)."""
    low, high = watermarks
    found: int | Read | None = Read.TO_THE_END
    if offset < high:
        deadline = time.monotonic() + READ_SECONDS
        found = first_original(consumer, topic, partition, max(offset, low), alias, deadline)
    if found is Read.TO_THE_END:  # one past the last copy's original
        last = last_original(consumer, topic, partition, low, high, alias)
        return None if last is None else last + 1
    return found
