"""The source partitions a worker owns: a flow for each, and the consumer's place in it.

Mirroring a partition is its `PartitionFlow`; this class moves the consumer when mirroring
cannot simply go on. A partition is stopped at a record the target cannot take (and tried again
later), rewound to its first unacknowledged record (a refusal, a replaced producer), held while
the target acknowledges nothing of it, and forgotten when given up. Each move also trims the
backlog (the rest of a batch the producer had no room for), which would otherwise hand the
producer records of a partition out of order.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from kafka_mirror.kafka.formats import OffsetSync, Provenance
from kafka_mirror.kafka.record_size import single_record_batch_bytes
from kafka_mirror.kafka.schemas import SchemaSync
from kafka_mirror.worker import remote_topics
from kafka_mirror.worker.clients import Clients
from kafka_mirror.worker.flows import PartitionFlow, Stop
from kafka_mirror.worker.metrics import WorkerMetrics
from kafka_mirror.worker.offsets import SyncEmitter
from kafka_mirror.worker.permanent import PermanentRefusal, permanent_refusal
from kafka_mirror.worker.topic_sync import TopicSync

log = logging.getLogger(__name__)

HOLD_SECONDS = 5.0  # a partition with no acknowledgement this long stops being consumed
STOP_RETRY_SECONDS = 30.0  # a stopped partition is tried again after this, doubling …
MAX_STOP_RETRY_SECONDS = 600.0  # … up to this
REFUSALS_BEFORE_STOP = 3  # failures at one record, in a row, before its partition stops
TARGET_PROBE_SECONDS = 5.0
SIZE_SLACK = 64 * 1024  # records this close to a topic's limit have their exact size computed
# Refusals meaning the producer does not know the remote partition (yet): wait for a refresh.
UNKNOWN_REMOTE = {
    KafkaError._UNKNOWN_PARTITION,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
}

# Spelled once: a type expression in the loop would be built again for every record.
Headers = list[tuple[str, str | bytes | None]]
Key = tuple[str, int]  # (source topic, partition)


class Partitions:
    def __init__(
        self,
        clients: Clients,
        topics: TopicSync,
        source_alias: str,
        max_lag: int,
        publish_sync: Callable[[OffsetSync, bool], None],
        metrics: WorkerMetrics,
        fail: Callable[[str], None],
        schemas: SchemaSync | None = None,
    ) -> None:
        self.clients, self.topics, self.metrics, self.fail = clients, topics, metrics, fail
        self.schemas = schemas
        self.source_alias, self.max_lag, self.publish_sync = source_alias, max_lag, publish_sync
        self.flows: dict[Key, PartitionFlow] = {}
        self.backlog: list[Message] = []  # the rest of a batch the producer had no room for
        self.refused: list[PartitionFlow] = []  # a report said the target refused
        # Per partition, (offset, times in a row): refusals at one record, and stops at one.
        self.refusals: dict[Key, tuple[int, int]] = {}
        self.stops: dict[Key, tuple[int, int]] = {}

    def open(self, topic: str, partition: int, offset: int) -> PartitionFlow | None:
        """The flow of a partition first seen at `offset`; None if it is no longer mirrored."""
        remote = self.topics.plan.mirrored.get(topic)
        if remote is None:
            return None  # dropped from the selection; its revocation is on its way
        flow = self._new_flow(topic, partition, remote, offset)
        if partition >= self.topics.remote_partitions.get(remote, 0):
            # The source grew since the last refresh: wait for it to grow the remote topic.
            self.stop(flow, offset, f"{remote} has no partition {partition} yet", 0.0)
        return flow

    def _new_flow(self, topic: str, partition: int, remote: str, start: int) -> PartitionFlow:
        limit = self.topics.max_record_bytes.get(remote)
        flow = PartitionFlow(
            topic,
            partition,
            remote,
            Provenance.prefix(self.source_alias, partition),
            SyncEmitter(self.max_lag),
            self.publish_sync,
            start,
            self.refused.append,
            # The topic's current incarnation: a topic created again is named by its new ID.
            provenance_suffix=Provenance.suffix(self.topics.source_ids.get(topic)),
        )
        flow.size_watch = limit - SIZE_SLACK if limit else 2**62
        if self.schemas is not None:
            flow.value_ids, flow.key_ids = self.schemas.translates(topic)
        self.flows[(topic, partition)] = flow
        return flow

    def reached_end(self, message: Message) -> None:
        """The end-of-partition event: the offsets before it hold nothing left to mirror."""
        topic, partition, offset = message.topic(), message.partition(), message.offset()
        if topic is None or partition is None or offset is None:
            return
        flow = self.flows.get((topic, partition)) or self.open(topic, partition, offset)
        if flow is not None:
            flow.reached_end(offset)

    def still_wanted(self, message: Message) -> bool:
        flow = self.flows.get((message.topic() or "", message.partition() or 0))
        return flow is None or not (flow.stop or flow.held or flow.abandoned)

    def _drop_from_backlog(self, keys: set[Key]) -> None:
        """Records of these partitions come again from the consumer, in order."""
        self.backlog = [m for m in self.backlog if (m.topic(), m.partition()) not in keys]

    # --- records the target cannot take (yet) ---------------------------------------------

    def too_large(
        self, flow: PartitionFlow, offset: int, key: bytes | None, value: bytes | None, h: Headers
    ) -> bool:
        """Stop the partition at a record larger than its remote topic accepts."""
        limit = self.topics.max_record_bytes.get(flow.remote)
        size = single_record_batch_bytes(key, value, h)
        if limit is None or size <= limit:
            return False
        reason = (
            f"the record is {size} bytes, over {flow.remote}'s max.message.bytes ({limit}): "
            "raise it on the target to go on"
        )
        self.stop(flow, offset, reason, STOP_RETRY_SECONDS)
        return True

    def wait_for_schema(self, flow: PartitionFlow, offset: int, schema_id: int | None) -> None:
        """Stop the partition at a record whose schema is not on the target's registry yet;
        it goes on once the schema is copied (`schemas_copied`), or is tried again later."""
        assert self.schemas is not None and schema_id is not None
        refused = (flow.topic, schema_id) in self.schemas.refused
        reason = self.schemas.want(flow.topic, schema_id)
        self.stop(flow, offset, reason, STOP_RETRY_SECONDS if refused else 0.0)
        assert flow.stop is not None
        flow.stop.schema_id = schema_id

    def schemas_copied(
        self, ready: set[tuple[str, int]], refused: dict[tuple[str, int], str]
    ) -> None:
        """Partitions waiting for the `ready` schemas go on; those waiting for a `refused` one
        say why and try again later; the others say how the last round left their wait."""
        assert self.schemas is not None
        waiting = [
            f for f in self.flows.values() if f.stop is not None and f.stop.schema_id is not None
        ]
        going_on = []
        for flow in waiting:
            assert flow.stop is not None and flow.stop.schema_id is not None
            wanted = (flow.topic, flow.stop.schema_id)
            if wanted in ready:
                going_on.append(flow)
            elif wanted in refused:
                reason = self.schemas.wait_reason(*wanted)
                self.stop(flow, flow.stop.offset, reason, STOP_RETRY_SECONDS)
                flow.stop.schema_id = wanted[1]
            else:
                flow.stop.reason = self.schemas.wait_reason(*wanted)
        self._resume(going_on)

    def refuse(self, flow: PartitionFlow, offset: int, error: KafkaError) -> None:
        """The producer refused a record at `produce()`."""
        permanent = permanent_refusal(error.code(), flow.remote, flow.partition)
        if error.code() in UNKNOWN_REMOTE:
            # The remote partition is new, or was deleted: then every record of it the producer
            # held failed, reported or not. Hold it from its first unacknowledged record.
            reason = f"the producer does not know {flow.remote}[{flow.partition}] yet"
            self._stop_unacknowledged(flow, reason, 0.0)
        elif permanent is not None and permanent.whole_topic:
            # The producer's metadata denies it the topic: it failed every record of the topic
            # it held, reported or not.
            self.stop_refused(permanent)
        else:
            self.stop(flow, offset, f"the producer refused it: {error.str()}", STOP_RETRY_SECONDS)

    def stop_refused(self, refusal: PermanentRefusal) -> None:
        """Stop what the target refuses for good (its remote topic, or one partition) at the
        first unacknowledged record of each partition; the other topics go on."""
        reason = refusal.reason()
        for flow in list(self.flows.values()):
            if flow.stop is None and refusal.concerns(flow.remote, flow.partition):
                self._stop_unacknowledged(flow, reason, STOP_RETRY_SECONDS)

    def _stop_unacknowledged(self, flow: PartitionFlow, reason: str, retry_after: float) -> None:
        """Stop the partition at its first unacknowledged record: a new flow from there, as
        records after it that the producer held may have failed unreported."""
        start = flow.acknowledged
        if flow.refused is not None or not flow.settled():
            self.rewind(flow, start, reason)
        self.stop(self.flows[(flow.topic, flow.partition)], start, reason, retry_after)

    def stop(self, flow: PartitionFlow, offset: int, reason: str, retry_after: float) -> None:
        """Pause the partition at `offset`; it is consumed again from there when due."""
        key = (flow.topic, flow.partition)
        before, times = self.stops.get(key, (-1, 0))
        retries = times if before == offset else 0
        self.stops[key] = (offset, retries + 1)
        delay = min(retry_after * 2**retries, MAX_STOP_RETRY_SECONDS) if retry_after else 0.0
        flow.stop = Stop(offset, reason, time.monotonic() + delay, retries)
        flow.held = False  # the stop's pause takes over: only its retry resumes the partition
        if retry_after:
            log.error("%s", flow.stop.describe(flow.topic, flow.partition))
            self.metrics.errors.labels("partition stopped").inc()
        point = TopicPartition(flow.topic, flow.partition, offset)
        try:
            self.clients.consumer.pause([point])
            self.clients.consumer.seek(point)
        except KafkaException as error:
            # Going on could commit past records that were never acknowledged.
            self.fail(f"cannot pause {flow.topic}[{flow.partition}] at {offset}: {error}")
        self.backlog = [m for m in self.backlog if self.still_wanted(m)]

    def resume_due(self) -> None:
        """Consume stopped partitions again from their record, once due (after a refresh), and
        at once when their remote topic's size limit was raised."""
        now = time.monotonic()
        stopped = {f.remote for f in self.flows.values() if f.stop is not None}
        limits = remote_topics.max_message_bytes(self.clients.target_admin, stopped)
        known = self.topics.max_record_bytes
        raised = {r for r, limit in limits.items() if limit > known.get(r, limit)}
        known.update(limits)
        for flow in self.flows.values():
            if flow.stop is not None and flow.remote in raised:
                flow.stop.retry_at = now
        due = [f for f in self.flows.values() if f.stop is not None and f.stop.retry_at <= now]
        for remote in {f.remote for f in due}:
            self.clients.producer.list_topics(remote, timeout=TARGET_PROBE_SECONDS)
        self._resume(
            [f for f in due if f.partition < self.topics.remote_partitions.get(f.remote, 0)]
        )  # (a partition the remote topic does not have yet keeps waiting for it)

    def _resume(self, flows: list[PartitionFlow]) -> None:
        for flow in flows:
            flow.size_watch = self.topics.max_record_bytes.get(flow.remote, 2**62) - SIZE_SLACK
            flow.stop = None
            self.clients.consumer.resume([TopicPartition(flow.topic, flow.partition)])

    # --- going back -----------------------------------------------------------------------

    def rewind(self, flow: PartitionFlow, offset: int, why: str) -> None:
        """Consume the partition again from `offset` with a new flow; the old one's late
        reports are ignored. The same record failing again and again stops the partition."""
        key = (flow.topic, flow.partition)
        flow.abandoned = True
        self.metrics.resent.inc(max(flow.next_upstream - offset, 0))
        fresh = self._new_flow(flow.topic, flow.partition, flow.remote, offset)
        fresh.stop, fresh.held = flow.stop, flow.held
        before, times = self.refusals.get(key, (-1, 0))
        if before == offset and times >= REFUSALS_BEFORE_STOP:
            self.stop(fresh, offset, why, STOP_RETRY_SECONDS)
            return
        self.refusals[key] = (offset, times + 1 if before == offset else 1)
        point = TopicPartition(flow.topic, flow.partition, offset)
        try:
            self.clients.consumer.seek(point)
        except KafkaException as error:
            self.fail(f"cannot rewind {flow.topic}[{flow.partition}] to {offset}: {error}")
        self._drop_from_backlog({key})

    def rewind_refused(self) -> None:
        """Partitions a delivery report said the target refused: stopped if it refuses for
        good, else again from the first record it did not acknowledge."""
        refused, self.refused = self.refused, []
        for flow in refused:
            if flow.abandoned:
                continue
            permanent = permanent_refusal(flow.refused_code, flow.remote, flow.partition)
            if permanent is not None:
                self.stop_refused(permanent)
            else:
                self.rewind(flow, flow.acknowledged, f"the target refused {flow.refused}")

    def rewind_waiting(self, reason: str, culprit: tuple[str, int] | None) -> None:
        """After the producer was replaced: every partition with records waiting, again from its
        first unacknowledged record. Only the `culprit` (remote topic, partition) counts it
        as a failure at that record; for the others it is no fault of theirs."""
        for flow in list(self.flows.values()):
            if flow.settled() and flow.refused is None:
                continue
            self.rewind(flow, flow.acknowledged, reason)
            if (flow.remote, flow.partition) != culprit:
                self.refusals.pop((flow.topic, flow.partition), None)

    def hold_unacknowledged(self) -> None:
        """Stop consuming a partition the target has acknowledged nothing of for a while, and
        go on once it does: records waiting for one stalled partition (short of in-sync
        replicas on the target) would otherwise fill the producer's queue and stop them all."""
        now = time.monotonic()
        consumer = self.clients.consumer
        for flow in self.flows.values():
            waiting = flow.waiting_since is not None and now - flow.waiting_since >= HOLD_SECONDS
            if waiting and not flow.held and flow.stop is None:
                flow.held = True
                point = TopicPartition(flow.topic, flow.partition, flow.next_upstream)
                consumer.pause([point])
                consumer.seek(point)  # what was fetched past the last record handled comes again
                self._drop_from_backlog({(flow.topic, flow.partition)})
            elif flow.held and not waiting:
                flow.held = False
                consumer.resume([TopicPartition(flow.topic, flow.partition)])

    def forget(self, partitions: Iterable[TopicPartition]) -> None:
        """Partitions given up (revoked, lost, no longer selected)."""
        gone = {(tp.topic, tp.partition) for tp in partitions}
        for key in gone:
            flow = self.flows.pop(key, None)
            if flow is not None:
                flow.abandoned = True
            self.refusals.pop(key, None)
            self.stops.pop(key, None)
            self.metrics.forget_partition(*key)
        self._drop_from_backlog(gone)

    def publish_figures(self, readable_at: float | None = None) -> None:
        """The flows' counts and latencies into the metrics; a flow that has records waiting
        starts its clock (for holding it, and reporting it stalled). A copy's latency ends when
        the target acknowledged it, or at `readable_at` (exactly once: its transaction's
        commit, before which a `read_committed` consumer cannot see it)."""
        now = time.monotonic()
        for flow in self.flows.values():
            if flow.records:
                labels = (flow.topic, str(flow.partition))
                self.metrics.records.labels(*labels).inc(flow.records)
                self.metrics.bytes.labels(*labels).inc(flow.bytes)
                flow.records = flow.bytes = 0
            if flow.latencies:
                histogram = self.metrics.latency.labels(flow.topic)
                latencies = [(readable_at or acked) - written for acked, written in flow.latencies]
                for latency in latencies:
                    histogram.observe(latency)
                self.metrics.last_latency.labels(flow.topic).set(latencies[-1])
                flow.latencies.clear()
            if flow.waiting_since is None and not flow.settled():
                flow.waiting_since = now
        self.metrics.set_partition_problems(
            (f.topic, f.partition, f.problem(now)) for f in self.flows.values()
        )
