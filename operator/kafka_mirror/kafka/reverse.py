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
"""

from __future__ import annotations

import struct
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, TopicPartition

from kafka_mirror.kafka.client import Position, reader
from kafka_mirror.kafka.formats import newest_provenance

READ_SECONDS = 10.0


def original_offset(
    consumer: Consumer, topic: str, partition: int, at: int, alias: str
) -> int | None:
    """The original offset on `alias` of the first record of `topic[partition]` at or after
    `at`, or None when there is none or it is not a copy from `alias`."""
    consumer.assign([TopicPartition(topic, partition, at)])
    deadline = time.monotonic() + READ_SECONDS
    try:
        while time.monotonic() < deadline:
            for message in consumer.consume(1, timeout=0.5):
                error = message.error()
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    return None  # nothing but transaction markers from `at` on
                if error is not None:
                    continue  # a passing error: the deadline bounds it
                headers = message.headers() or []
                if isinstance(headers, dict):  # the client's typing allows it; consumers give lists
                    headers = list(headers.items())
                try:
                    provenance = newest_provenance(headers)
                except (ValueError, struct.error):
                    return None
                if provenance is None or provenance.alias != alias:
                    return None
                return provenance.offset
    finally:
        consumer.unassign()
    return None


def copied_ends(settings: dict[str, Any], remote: str, alias: str) -> int | None:
    """How far the copies in `remote` reach into its original on `alias`, summed over the
    partitions: one past the original offset of each partition's last record. None when a
    partition is empty or ends in a record that is no copy from `alias` (nothing to say)."""
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
            if high <= low:
                return None
            last = original_offset(consumer, remote, partition, high - 1, alias)
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
            if high <= low:
                continue  # an empty partition tells nothing
            if offset < high:
                found = original_offset(consumer, topic, partition, max(offset, low), alias)
            else:  # read to the end: one past the last copy's original
                last = original_offset(consumer, topic, partition, high - 1, alias)
                found = None if last is None else last + 1
            if found is not None:
                resumed[(original, partition)] = found
    finally:
        consumer.close()
    return resumed
