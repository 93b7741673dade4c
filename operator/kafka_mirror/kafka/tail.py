"""Reading a 1-partition internal topic (offset syncs, checkpoints) incrementally."""

from __future__ import annotations

import time

from confluent_kafka import OFFSET_BEGINNING, Consumer, KafkaError, KafkaException, TopicPartition


class TopicTail:
    """Reads a 1-partition internal topic incrementally: each call returns what is new.

    The consumer must have `enable.partition.eof` set: the end-of-partition event tells that
    everything written so far has been read.
    """

    def __init__(self, consumer: Consumer, topic: str) -> None:
        self.consumer = consumer
        self.caught_up = False
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])

    def read_new(self, timeout: float = 5.0) -> list[tuple[bytes, bytes]]:
        records: list[tuple[bytes, bytes]] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            messages = self.consumer.consume(num_messages=1000, timeout=0.1)
            if not messages and self.caught_up:
                break  # nothing written since the last end of partition
            for message in messages:
                error = message.error()
                if error is None:
                    self.caught_up = False
                    key, value = message.key(), message.value()
                    if key is not None and value is not None:
                        records.append((key, value))
                elif error.code() == KafkaError._PARTITION_EOF:
                    self.caught_up = True
                elif error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    return records  # not created yet
                else:
                    raise KafkaException(error)
            if self.caught_up:
                break
        return records
