"""A consumed batch on its way to the target (MirrorMaker 2's MirrorSourceTask.poll and
convertRecord): each record produced to its remote topic's same partition, with key, value,
headers and timestamp, plus a provenance header.

Delivery reports are asked for only on a sample of records (the last of a partition's run in a
batch, upstream gaps, one per `offsetSyncs.maxLag`): the producer's gapless guarantee makes each
vouch for every earlier record of its partition, and the rest cost no Python at all. A record
the producer refuses stops or holds its partition at that record, never the worker; a full
producer queue keeps the rest of the batch for the next round (`Partitions.backlog`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import cast

from confluent_kafka import KafkaError, KafkaException, Message

from kafka_mirror.kafka.formats import PROVENANCE_HEADER, is_copy_from
from kafka_mirror.kafka.wire_format import schema_id, translated
from kafka_mirror.worker.clients import Clients
from kafka_mirror.worker.partitions import Headers, Partitions
from kafka_mirror.worker.topic_sync import TopicSync


class BatchSender:
    def __init__(
        self,
        clients: Clients,
        partitions: Partitions,
        topics: TopicSync,
        cycle_target: str | None,
        on_event: Callable[[Message, KafkaError], None],
        on_producer_failed: Callable[[str], None],
    ) -> None:
        """`cycle_target`: under identity naming, the target's alias (records that are copies
        of records of the topic they would be written to are skipped); else None. `on_event`
        gets the consumer's events (the end of a partition, errors)."""
        self.clients, self.partitions, self.topics = clients, partitions, topics
        self.cycle_target = cycle_target
        self.on_event, self.on_producer_failed = on_event, on_producer_failed

    def send(self, messages: list[Message]) -> None:
        """Mirror a batch, one partition's run of records at a time (librdkafka hands records
        out a fetched batch of one partition at a time)."""
        cycles = None if self.cycle_target is None else self._cycles(messages, self.cycle_target)
        count, start = len(messages), 0
        while start < count:
            message = messages[start]
            error = message.error()
            if error is not None:
                self.on_event(message, error)
                start += 1
                continue
            topic, partition = message.topic(), message.partition()
            assert topic is not None and partition is not None
            end = start + 1
            while end < count:
                following = messages[end]
                if (
                    following.partition() != partition
                    or following.topic() != topic
                    or following.error() is not None  # the end of the partition
                ):
                    break
                end += 1
            if not self._send_run(messages, start, end, cycles):
                return
            start = end

    def _send_run(
        self, messages: list[Message], start: int, end: int, cycles: set[int] | None
    ) -> bool:
        """Produce `messages[start:end]`, records of one partition in offset order; False when
        the batch must end here (its rest kept in the backlog for the next round)."""
        # The hot path: one pass per record, attribute lookups hoisted out of the loop.
        partitions = self.partitions
        first = messages[start]
        topic, partition = cast(str, first.topic()), cast(int, first.partition())
        flow = partitions.flows.get((topic, partition)) or partitions.open(
            topic, partition, cast(int, first.offset())
        )
        if flow is None or flow.stop or flow.held:
            return True  # not mirrored, or paused at an earlier record
        produce, remote, on_delivery = self.clients.producer.produce, flow.remote, flow.on_delivery
        pack, prefix, suffix = flow.pack_provenance, flow.provenance_prefix, flow.provenance_suffix
        in_flight, max_lag = flow.in_flight, flow.emitter.max_lag
        value_ids, key_ids = flow.value_ids, flow.key_ids
        # The headers of a record without its own: one dict for the run, as produce() copies
        # them (a new list and tuple per record cost some 25 ns more, bench/hot_path.py).
        provenance_only: dict[str, str | bytes | None] = {}
        last = end - 1
        tail = messages[last]
        epoch = tail.leader_epoch()
        if epoch is not None and cast(int, tail.offset()) >= flow.next_upstream:
            flow.leader_epoch = max(flow.leader_epoch, epoch)  # of this lineage, not pre-seek
        for index in range(start, end):
            message = messages[index]
            # (Not `cast`: a function call per record. confluent-kafka types these Optional.)
            offset: int = message.offset()  # type: ignore[assignment]
            if offset < flow.next_upstream:
                continue  # fetched before a seek
            if cycles and index in cycles:
                flow.skipped(offset)  # came from the target in the first place
                continue
            provenance = pack(prefix, offset, suffix)
            own: Headers | None = message.headers()  # type: ignore[assignment]
            headers: Headers | dict[str, str | bytes | None]
            if own:
                # A new list: the message keeps its own (a record kept for the next round, when
                # the producer's queue is full, must not get the header twice).
                headers = [*own, (PROVENANCE_HEADER, provenance)]
            else:
                provenance_only[PROVENANCE_HEADER] = provenance
                headers = provenance_only
            timestamp = message.timestamp()[1]
            key, value = message.key(), message.value()
            if value_ids is not None and value:
                copy = translated(value, value_ids)
                if copy is None:
                    partitions.wait_for_schema(flow, offset, schema_id(value))
                    return True  # the partition stopped at this record
                value = copy
            if key_ids is not None and key:
                copy = translated(key, key_ids)
                if copy is None:
                    partitions.wait_for_schema(flow, offset, schema_id(key))
                    return True
                key = copy
            size = (len(key) if key else 0) + (len(value) if value else 0)
            if size > flow.size_watch and partitions.too_large(
                flow, offset, key, value, with_provenance(own, provenance)
            ):
                return True  # the partition stopped at this record
            # Reported where the offset sync rule may fire (an upstream gap, `maxLag` records
            # since the last such report), where the run ends, and before a record skipped as
            # a cycle (it will not be reported itself).
            sync_point = offset != flow.next_upstream or offset >= flow.next_sync_point
            report = sync_point or index == last or (cycles is not None and index + 1 in cycles)
            try:
                # Positional: keyword arguments cost the C call a string lookup per keyword.
                # (topic, value, key, partition, callback, on_delivery, timestamp, headers)
                produce(
                    remote,
                    value,
                    key,
                    partition,
                    on_delivery if report else None,
                    None,
                    timestamp if timestamp > 0 else 0,
                    headers,
                )
            except BufferError:
                # The local queue is full: keep the rest for the next round, which first lets
                # deliveries drain (the loop goes on, so probes and SIGTERM are answered).
                partitions.backlog = [m for m in messages[index:] if partitions.still_wanted(m)]
                return False
            except KafkaException as refusal:
                error = refusal.args[0]
                if error.code() == KafkaError._FATAL:
                    # The producer failed: the loop replaces it, then goes on from here.
                    self.on_producer_failed(error.str())
                    partitions.backlog = [m for m in messages[index:] if partitions.still_wanted(m)]
                    return False
                if error.code() == KafkaError._STATE:
                    # A transaction failed (exactly once): its producer takes nothing until the
                    # loop aborts it, which consumes every partition again. No fault of this one.
                    partitions.backlog = [m for m in messages[index:] if partitions.still_wanted(m)]
                    return False
                partitions.refuse(flow, offset, error)
                if flow.stop or flow.held:
                    return True
                continue
            # Only once queued: its report cannot come before produce() returned, and a record
            # that failed to queue must not shift the reports of the ones after it.
            flow.next_upstream = offset + 1
            flow.unreported_records += 1
            flow.unreported_bytes += size
            if report:
                in_flight.append(
                    (offset, timestamp, flow.unreported_records, flow.unreported_bytes)
                )
                flow.unreported_records = flow.unreported_bytes = 0
            if sync_point:
                flow.next_sync_point = offset + max_lag + 1
        return True

    def _cycles(self, messages: list[Message], target: str) -> set[int]:
        """Indexes of the records that are copies of records of the topic they would be written
        to (identity naming: by provenance header and topic ID)."""
        remote_ids = self.topics.remote_ids
        return {
            index
            for index, message in enumerate(messages)
            if message.error() is None
            and is_copy_from(
                cast(Headers, message.headers() or []),
                target,
                remote_ids.get(message.topic() or ""),
            )
        }


def with_provenance(own: Headers | None, provenance: bytes) -> Headers:
    """A record's headers as the target gets them: its own, then the provenance header."""
    return [*(own or []), (PROVENANCE_HEADER, provenance)]
