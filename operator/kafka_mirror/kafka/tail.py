"""Small internal topics (offset syncs, checkpoints, the audit's watermarks, the records of what
a mirror made on the target): read incrementally or once to the end, and written acknowledged."""

from __future__ import annotations

import time
from typing import Any

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)

from kafka_mirror.kafka.client import ClusterUnavailable, reader


class TopicTail:
    """Reads a 1-partition internal topic incrementally: each call returns what is new, read to
    the partition's end (`caught_up`) or until its timeout.

    The consumer must have `enable.partition.eof` set: the end-of-partition event tells that
    everything written so far has been read. It is assigned only while a call reads: a
    reader's consumer left assigned at the end of a partition asks for more every
    `fetch.wait.max.ms` (10 ms), and an idle worker's two tails (offset syncs, checkpoints)
    cost the brokers of its clusters 6.0 and 5.5 % of a core so, 1.0 and 0.2 % unassigned
    (2026-11-28, one broker each).
    """

    def __init__(self, consumer: Consumer, topic: str) -> None:
        self.consumer, self.topic = consumer, topic
        self.position = OFFSET_BEGINNING  # the next offset to read
        self.caught_up = False

    def read_new(self, timeout: float = 5.0) -> list[tuple[bytes, bytes]]:
        records: list[tuple[bytes, bytes]] = []
        self.caught_up = False
        self.consumer.assign([TopicPartition(self.topic, 0, self.position)])
        try:
            deadline = time.monotonic() + timeout
            while not self.caught_up and time.monotonic() < deadline:
                for message in self.consumer.consume(num_messages=1000, timeout=0.1):
                    error = message.error()
                    if error is None:
                        self.caught_up = False
                        self.position = (message.offset() or 0) + 1
                        key, value = message.key(), message.value()
                        if key is not None and value is not None:
                            records.append((key, value))
                    elif error.code() == KafkaError._PARTITION_EOF:
                        self.caught_up = True
                    elif error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                        return records  # not created yet
                    else:
                        raise KafkaException(error)
            return records
        finally:
            self.consumer.unassign()


def read_to_end(
    settings: dict[str, Any],
    topic: str,
    starts: dict[int, int] | None = None,
    timeout: float = 30.0,
    header: tuple[str, bytes] | None = None,
) -> list[tuple[bytes, bytes]]:
    """Every record (key, value; no deletion marker) of a small internal topic, each partition
    from `starts` (from its beginning: all of them, or where `starts` says OFFSET_BEGINNING) to
    its end when called, in order per partition; none for a topic that does not exist yet; with
    `header` (name, value), only the records whose header of that name has that value or that
    have none of that name (written before the header was). Raises ClusterUnavailable when it
    cannot read it to its end within `timeout`."""
    consumer = reader(settings, "kafka-mirror-internal-topics")
    try:
        metadata = consumer.list_topics(topic, timeout=timeout).topics.get(topic)
        if metadata is None or metadata.error is not None:
            return []
        wanted = (
            starts if starts is not None else dict.fromkeys(metadata.partitions, OFFSET_BEGINNING)
        )
        partitions = [TopicPartition(topic, p, o) for p, o in wanted.items()]
        ends = {tp.partition: consumer.get_watermark_offsets(tp, timeout)[1] for tp in partitions}
        pending = {p for p, end in ends.items() if end > max(wanted[p], 0)}
        if not pending:
            return []
        consumer.assign([tp for tp in partitions if tp.partition in pending])
        records: list[tuple[bytes, bytes]] = []
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            # consume() waits its whole timeout unless it fills the batch: keep it short.
            for message in consumer.consume(1000, 0.05):
                error, key, value = message.error(), message.key(), message.value()
                if error is not None and error.code() == KafkaError._PARTITION_EOF:
                    pending.discard(message.partition() or 0)
                elif (
                    error is None  # (others are retried)
                    and key is not None
                    and value
                    and (header is None or _carries(message.headers() or [], header))
                ):
                    records.append((key, value))
    except KafkaException as error:
        raise ClusterUnavailable("KafkaError", f"cannot read {topic}: {error.args[0]}") from error
    finally:
        consumer.close()
    if pending:
        raise ClusterUnavailable("KafkaError", f"{topic} not read to its end in time")
    return records


def _carries(headers: Any, header: tuple[str, bytes]) -> bool:
    """Whether a record's headers (a consumer's list of name, value) have `header`, or none of
    its name."""
    values = [value for name, value in headers if name == header[0]]
    return not values or header[1] in values


def write_acknowledged(
    producer: Producer, topic: str, records: list[tuple[bytes, bytes]], timeout: float
) -> None:
    """Write the records; raises OSError unless every one was acknowledged within `timeout`."""
    failed: list[KafkaError] = []

    def delivered(error: KafkaError | None, _: object) -> None:
        if error is not None:
            failed.append(error)

    for key, value in records:
        producer.produce(topic, key=key, value=value, on_delivery=delivered)
    if producer.flush(timeout) > 0 or failed:
        reason = failed[0].str() if failed else "not acknowledged in time"
        raise OSError(f"{len(records)} records to {topic}: {reason}")
