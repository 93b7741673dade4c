"""Offset syncs on their way to the offset-syncs topic, as MirrorMaker 2's OffsetSyncWriter
sends them: a sync due by the emission rule goes out at once; the newest one not due yet is
delayed to the next commit, so a partition that went quiet still gets its last offsets synced
(exact translation for groups that consumed everything)."""

from __future__ import annotations

from collections import Counter, deque

from confluent_kafka import KafkaException, Producer

from kafka_mirror.kafka.formats import OffsetSync
from kafka_mirror.worker.metrics import WorkerMetrics


class OffsetSyncWriter:
    def __init__(self, topic: str, metrics: WorkerMetrics) -> None:
        self.topic, self.metrics = topic, metrics
        # Every due sync is sent (a poll serves many reports: keeping one per partition would
        # space the syncs far wider than maxLag); of the delayed ones, the newest per partition.
        self.pending: deque[OffsetSync] = deque()
        self.delayed: dict[tuple[str, int], OffsetSync] = {}

    def queue(self, sync: OffsetSync, due: bool) -> None:
        """From a delivery report: never produces (reports are served inside the producer's
        poll, where a full queue must not raise)."""
        key = (sync.topic, sync.partition)
        if due:
            self.delayed.pop(key, None)
            self.pending.append(sync)
        else:
            self.delayed[key] = sync

    def promote_delayed(self) -> None:
        """At commit time the delayed syncs become due (each is newer than a pending one)."""
        self.pending.extend(self.delayed.values())
        self.delayed.clear()

    def publish(self, producer: Producer) -> None:
        """Produce the pending syncs; a full queue keeps the rest for the next call."""
        sent: Counter[str] = Counter()  # counted once per topic: `labels()` takes a lock
        try:
            while self.pending:
                sync = self.pending[0]
                try:
                    producer.produce(self.topic, key=sync.key(), value=sync.value())
                except (BufferError, KafkaException):
                    return  # a full queue, or a failed producer the loop is replacing
                self.pending.popleft()
                sent[sync.topic] += 1
        finally:
            for topic, count in sent.items():
                self.metrics.offset_syncs.labels(topic).inc(count)
