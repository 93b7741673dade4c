"""Where a partition resumes when its source group holds no commit: after its last copy on the
target.

The worker's position lives in its consumer group on the source, and Kafka deletes an empty
group's offsets `offsets.retention.minutes` (7 days by default) after its last commit: a mirror
paused, failed over or stopped for longer found no commit and copied every retained record again
from the log start. (MirrorMaker 2 keeps its positions in Connect's offsets topic, which does not
expire.) The target still says where the copies end: the provenance header of the last copy of
ours in a remote partition names its source partition, offset and topic incarnation. The worker
resumes one past it. Records that left the source in between are below its log start there,
so the consumer reports the jump and `retention.py` counts them lost, as for any position the
source no longer holds.

The last copy, not the highest: a run that resumed at its last commit re-sent what an earlier
run had copied already, so the last run's last copy is where copying stands without a gap
(the assumption docs/translation.md rests on too). A partition with no copy of ours (a mirror's
first start, a topic deleted and created again: another incarnation) starts from the log start.

A partition with a commit is assigned here too, and sought to at the commit with its leader epoch,
so that librdkafka checks the position against the log (`retention.py` handles what it reports).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from confluent_kafka import Consumer, KafkaError, KafkaException, TopicPartition

from kafka_mirror.kafka.client import reader
from kafka_mirror.kafka.formats import provenance_from

log = logging.getLogger(__name__)

SCAN_BACK = 1_000  # records read back from the end for a copy of ours (fan-in: others' records)
READ_SECONDS = 10.0  # for all the partitions of one assignment


def after_last_copy(
    consumer: Consumer,
    remote: str,
    partition: int,
    alias: str,
    topic_id: bytes | None,
    deadline: float,
) -> int | None:
    """One past the source offset of the last copy of `alias`'s partition (of the incarnation
    `topic_id`) in `remote[partition]`, or None when the last records hold none."""
    point = TopicPartition(remote, partition)
    low, high = consumer.get_watermark_offsets(
        point, timeout=max(deadline - time.monotonic(), 0.1), cached=False
    )
    if high <= low:
        return None
    consumer.assign([TopicPartition(remote, partition, max(low, high - SCAN_BACK))])
    last: int | None = None
    try:
        while time.monotonic() < deadline:
            messages = consumer.consume(500, timeout=0.1)
            for message in messages:
                if (message.topic(), message.partition()) != (remote, partition):
                    continue  # fetched or reported for the partition read before
                error = message.error()
                if error is not None:
                    if error.code() == KafkaError._PARTITION_EOF:
                        return None if last is None else last + 1
                    continue
                found = _ours(message.headers() or [], alias, partition, topic_id)
                if found is not None:
                    last = found
                if (message.offset() or 0) >= high - 1:
                    return None if last is None else last + 1
    finally:
        consumer.unassign()
    raise KafkaException(f"{remote}[{partition}]: not read to its end in time")


def _ours(headers: Any, alias: str, partition: int, topic_id: bytes | None) -> int | None:
    provenance = provenance_from(headers, alias, partition)
    if provenance is None:
        return None
    if topic_id is not None and provenance.topic_id not in (None, topic_id):
        return None  # a copy of the topic's earlier incarnation
    return provenance.offset


def resume_points(
    target: dict[str, Any],
    alias: str,
    uncommitted: list[tuple[str, int, str, bytes | None]],
) -> dict[tuple[str, int], int]:
    """For source partitions with no commit, given as (topic, partition, remote topic, topic
    ID): where each resumes, for those whose remote partition holds copies of ours."""
    if not uncommitted:
        return {}
    consumer = reader(target, "kafka-mirror.resume-points")
    deadline = time.monotonic() + READ_SECONDS
    found: dict[tuple[str, int], int] = {}
    try:
        for topic, partition, remote, topic_id in uncommitted:
            try:
                start = after_last_copy(consumer, remote, partition, alias, topic_id, deadline)
            except KafkaException as error:
                # Not known: from the log start, as before (copies again, loses nothing).
                log.warning("%s[%d]: cannot read where its copies end: %s", topic, partition, error)
                continue
            if start is not None:
                found[(topic, partition)] = start
    finally:
        consumer.close()
    return found


def assign_at_resume_points(
    consumer: Consumer,
    committed: list[TopicPartition],
    target: dict[str, Any],
    alias: str,
    mirrored: dict[str, str],
    topic_ids: dict[str, bytes | None],
) -> None:
    """At assignment (`committed`: the partitions assigned, at their commits), in the callback
    (librdkafka then assigns nothing itself): those with no commit and copies on the target
    after their last copy; the others at their commits, or (none) at `auto.offset.reset`. A
    commit with a leader epoch is sought to as well: librdkafka checks the epoch against the
    log (and reports a truncation below the offset) on a seek, not on an assignment
    (librdkafka#5158). Each is consumed: none is left paused."""
    starts = resume_points(
        target,
        alias,
        [
            (tp.topic, tp.partition, mirrored[tp.topic], topic_ids.get(tp.topic))
            for tp in committed
            if tp.offset < 0 and tp.topic in mirrored
        ],
    )
    for (topic, partition), start in sorted(starts.items()):
        log.warning(
            "%s[%d]: no commit on the source (expired, or the group deleted): resuming after "
            "the last copy on the target, at %d",
            topic,
            partition,
            start,
        )
    consumer.incremental_assign(
        [
            TopicPartition(tp.topic, tp.partition, starts.get((tp.topic, tp.partition), tp.offset))
            for tp in committed
        ]
    )
    # librdkafka keeps a partition paused through its revocation and re-assignment
    # (librdkafka#1849): one paused when it was lost (held for the target) was never consumed
    # again (busy run 45). Nothing holds it now.
    consumer.resume([TopicPartition(tp.topic, tp.partition) for tp in committed])
    for tp in committed:
        if tp.offset >= 0 and tp.leader_epoch is not None:
            try:
                consumer.seek(tp)
            except KafkaException as error:  # not checked, as before: mirroring goes on
                log.warning(
                    "%s[%d]: cannot check the commit's leader epoch: %s",
                    tp.topic,
                    tp.partition,
                    error,
                )
