"""Records that left the source before the worker copied them (loss to retention).

A worker stopped, or behind, for longer than the source keeps records finds its position below
the partition's log start. Its consumer runs with `auto.offset.reset=error`, so librdkafka
reports each such jump (with the position it could not fetch) instead of making it silently:
the records between that position and the log start are counted lost, per partition, in the
metrics and in the metadata committed beside the partition's offset (where the operator's
status and the audit read them), and mirroring goes on from the log start. Nothing here runs
per record: only on the reset, at assignment and at commit.

Compaction and transaction markers leave offset gaps too, but above the log start: the consumer
fetches across them without a reset, so they are never counted.

The same event reports a log truncated below the position: the offsets are committed with the
leader epoch of their records, which librdkafka checks when the worker seeks to a commit at
assignment (`resume_points.py`) and when a partition's leader changes (KIP-320). After an
unclean leader election the source no longer has the records between the new leader's end of
that epoch and the position (the target keeps their copies), and the new leader's records there
are new: mirroring goes on from that end, so none is skipped and nothing before it is copied
again; the records the source lost are counted.
"""

from __future__ import annotations

import logging
import re

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaException, Message, TopicPartition

from kafka_mirror.kafka.formats import RetentionLoss, commit_note, read_commit_note
from kafka_mirror.worker.metrics import WorkerMetrics

log = logging.getLogger(__name__)

WATERMARK_SECONDS = 10.0
Key = tuple[str, int]
# librdkafka's reason when the epoch check finds the log truncated below the position.
TRUNCATED = re.compile(r"truncation detected at (?:offset )?(\d+)\D.*?broker end offset is (\d+)")


class RetentionLosses:
    def __init__(self, metrics: WorkerMetrics) -> None:
        self.metrics = metrics
        self.losses: dict[Key, RetentionLoss] = {}

    def restore(self, committed: list[TopicPartition]) -> None:
        """At assignment: the losses earlier owners committed, so that the count goes on."""
        for tp in committed:
            _problem, loss = read_commit_note(tp.metadata or "")
            if loss is not None:
                self.losses[(tp.topic, tp.partition)] = loss

    def reset(self, consumer: Consumer, message: Message, reason: str) -> Key | None:
        """librdkafka could not fetch the partition at `message.offset()` (None: nothing was
        committed there yet): count what lies below the log start, go on from there. The
        partition when its log was truncated below the position: it goes on from the
        truncation, before what the worker handled of it."""
        topic, partition, position = message.topic(), message.partition(), message.offset()
        assert topic is not None and partition is not None
        point = TopicPartition(topic, partition)
        if truncated := TRUNCATED.search(reason):
            self._truncated(consumer, point, int(truncated[1]), int(truncated[2]))
            return (topic, partition)
        restart = OFFSET_BEGINNING
        try:
            start = self._log_start(consumer, point, position)
        except KafkaException as error:
            # Its leader moving (as when partitions were just added): fetch from the position
            # again; still below the log start, librdkafka reports the reset again.
            log.warning("%s[%d]: cannot read the log start now: %s", topic, partition, error)
            start, restart = 0, OFFSET_BEGINNING if position is None else position  # >= 0
        if position is not None and 0 <= position < start:
            key = (topic, partition)
            before = self.losses.get(key, RetentionLoss(0, position, position))
            self.losses[key] = before.add(position, start)
            self.metrics.lost_to_retention.labels(topic, str(partition)).inc(start - position)
            log.error(
                "%s[%d]: offsets %d to %d left the source before they were mirrored (its "
                "retention is shorter than the mirror was behind): %d records lost",
                topic,
                partition,
                position,
                start - 1,
                start - position,
            )
        # A partition in this error state takes no seek: assigned again, from the log start
        # (or, the log start not read, at the same position).
        consumer.incremental_unassign([point])
        consumer.incremental_assign([TopicPartition(topic, partition, restart)])
        return None

    def _truncated(
        self, consumer: Consumer, point: TopicPartition, position: int, end: int
    ) -> None:
        topic, partition = point.topic, point.partition
        self.metrics.lost_to_truncation.labels(topic, str(partition)).inc(position - end)
        log.error(
            "%s[%d]: the source's log was truncated at offset %d, below the mirror's position %d "
            "(an unclean leader election): the source lost offsets %d to %d, whose copies the "
            "target keeps; mirroring goes on at %d with the new leader's records",
            topic,
            partition,
            end,
            position,
            end,
            position - 1,
            end,
        )
        consumer.incremental_unassign([point])
        consumer.incremental_assign([TopicPartition(topic, partition, end)])

    @staticmethod
    def _log_start(consumer: Consumer, point: TopicPartition, position: int | None) -> int:
        """The partition's log start; 0 (nothing to count) where nothing was committed."""
        if position is None or position < 0:
            return 0
        start, _end = consumer.get_watermark_offsets(point, timeout=WATERMARK_SECONDS)
        return int(start)

    def annotate(self, offsets: list[TopicPartition]) -> list[TopicPartition]:
        """The offsets about to be committed, each partition's loss added to its metadata."""
        return [
            TopicPartition(
                tp.topic,
                tp.partition,
                tp.offset,
                metadata=commit_note(tp.metadata or "", self.losses[(tp.topic, tp.partition)]),
                leader_epoch=-1 if tp.leader_epoch is None else tp.leader_epoch,
            )
            if (tp.topic, tp.partition) in self.losses
            else tp
            for tp in offsets
        ]

    def forget(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self.losses.pop((tp.topic, tp.partition), None)
