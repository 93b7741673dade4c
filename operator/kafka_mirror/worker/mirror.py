"""The mirroring worker: source topics on A to remote topics on B, at least once.

One loop, one thread (as MirrorMaker 2's MirrorSourceTask polls and sends): consume a batch from
A, produce it to B (same partition, key, value, headers and timestamp, plus a provenance
header), serve the delivery reports, and run the periodic tasks when due.

Nothing is committed past a record the target has not acknowledged (`flows.PartitionFlow`), on
every path: the periodic commit, giving partitions up, stopping, a failed producer. A record the
producer refuses stops or holds its partition at that record, never the worker; a full producer
queue keeps the rest of the batch for the next round; a producer that failed (its gapless
guarantee, or no acknowledgement for a minute while the target answers) is replaced and every
partition with records waiting is consumed again from its first unacknowledged record.
Delivery reports are asked for only on a sample of records (the last of a partition's run in a
batch, upstream gaps, one per `offsetSyncs.maxLag`): the gapless guarantee makes each vouch for
every earlier record of its partition, and the rest cost no Python at all.

A refusal of the target that retrying cannot cure (an ACL, a record the topic cannot take) stops
its remote topic or partition, the others go on (`permanent.py`).
"""

from __future__ import annotations

import logging
import re
import threading
import time
from contextlib import suppress
from pathlib import Path
from typing import cast

from confluent_kafka import KafkaError, KafkaException, Message, TopicPartition

from kafka_mirror.kafka.formats import (
    HEARTBEATS_TOPIC,
    PROVENANCE_HEADER,
    PROVENANCE_OFFSET,
    Heartbeat,
    Provenance,
    checkpoints_topic,
    offset_syncs_topic,
    provenance_aliases,
)
from kafka_mirror.kafka.record_size import single_record_batch_bytes
from kafka_mirror.topics import Selection
from kafka_mirror.worker import remote_topics
from kafka_mirror.worker.checkpoints import Checkpointer, GroupFilter, TopicTail
from kafka_mirror.worker.clients import ClientErrors, Clients, ClientsFactory
from kafka_mirror.worker.config import WorkerConfig, load
from kafka_mirror.worker.flows import DeliveryWatch, PartitionFlow, Stop, commit_offsets
from kafka_mirror.worker.metrics import LoopWatchdog, WorkerMetrics
from kafka_mirror.worker.offsets import SyncEmitter
from kafka_mirror.worker.periodic import Periodic
from kafka_mirror.worker.permanent import PermanentRefusal, permanent_refusal, refusal_in_fatal
from kafka_mirror.worker.sync_writer import OffsetSyncWriter
from kafka_mirror.worker.topic_sync import TopicSync
from kafka_mirror.worker.translation import ProvenanceReader

log = logging.getLogger(__name__)

BATCH_SIZE = 5000
POLL_SECONDS = 0.1
BACKLOG_WAIT_SECONDS = 0.05  # for the producer's queue to drain before the batch's rest
DELIVERY_CHECK_SECONDS = 5.0
PRODUCER_STALL_SECONDS = 60.0  # records waiting, none acknowledged, the target answering
TARGET_PROBE_SECONDS = 5.0
REVOKE_FLUSH_SECONDS = 30.0
HOLD_SECONDS = 5.0  # a partition with no acknowledgement this long stops being consumed
SHUTDOWN_FLUSH_SECONDS = 20.0  # within Kubernetes' default 30 s grace period
STOP_RETRY_SECONDS = 30.0  # a stopped partition is tried again after this, doubling …
MAX_STOP_RETRY_SECONDS = 600.0  # … up to this
REFUSALS_BEFORE_STOP = 3  # failures at one record, in a row, before its partition stops
# Changing these needs new clients, so the worker restarts to apply them.
RESTART_FIELDS = ("source", "target", "topic_naming", "offset_syncs", "metrics_port")
# Refusals meaning the producer does not know the remote partition (yet): wait for a refresh.
UNKNOWN_REMOTE = {
    KafkaError._UNKNOWN_PARTITION,
    KafkaError._UNKNOWN_TOPIC,
    KafkaError.UNKNOWN_TOPIC_OR_PART,
}
# librdkafka names the partition in its gapless-guarantee failure: "… for <topic> [<n>] …".
FAILED_PARTITION = re.compile(r" for (\S+) \[(\d+)\]")
SIZE_SLACK = 64 * 1024  # records this close to a topic's limit have their exact size computed

_REBALANCING = {KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION}

# Spelled once: a type expression in the loop would be built again for every record.
Headers = list[tuple[str, str | bytes | None]]


class WorkerFailed(RuntimeError):
    """The worker cannot go on (its source producer failed, a rewind was refused); it stops
    after committing what the target acknowledged, and its pod's restart resumes from there."""


class MirrorWorker:
    def __init__(
        self, config_path: Path, metrics: WorkerMetrics, clients: ClientsFactory = Clients
    ) -> None:
        self.config_path = config_path
        self.config_text = config_path.read_text()
        self.config: WorkerConfig = load(config_path)
        self.metrics = metrics
        self.watchdog = LoopWatchdog()
        self.stopping = threading.Event()
        self.closing = False
        self.failure: str | None = None
        self.producer_failure: str | None = None
        self.reachable = {"source": False, "target": False}
        self.subscribed: list[str] = []
        self.flows: dict[tuple[str, int], PartitionFlow] = {}
        self.backlog: list[Message] = []  # the rest of a batch the producer had no room for
        self.refused_flows: list[PartitionFlow] = []  # a report said the target refused
        # Per partition, (offset, times in a row): refusals at one record, and stops at one.
        self.refusals: dict[tuple[str, int], tuple[int, int]] = {}
        self.stops: dict[tuple[str, int], tuple[int, int]] = {}
        config = self.config
        errors = ClientErrors(config, metrics, self._set_reachable, self._client_failed)
        self.clients = clients(config, errors.callback, self._committed)
        self.checkpoints_topic = checkpoints_topic(config.source.alias)
        syncs_topic = offset_syncs_topic(
            config.source.alias, config.target.alias, config.offset_syncs.location
        )
        self.sync_writer = OffsetSyncWriter(syncs_topic, metrics)
        self.topics = TopicSync(
            self.clients,
            metrics,
            self._set_reachable,
            (self.sync_writer.topic, self.checkpoints_topic),
        )
        groups = config.checkpoints.groups
        self.checkpointer = Checkpointer(
            self.clients.source_admin,
            self.clients.target_admin,
            self.clients.producer,
            TopicTail(self.clients.syncs_reader, self.sync_writer.topic),
            self.checkpoints_topic,
            GroupFilter(
                Selection(tuple(groups.includes), tuple(groups.excludes)),
                own_group=config.consumer_group,
            ),
            config.checkpoints.sync_group_offsets,
            metrics,
            target_reader=ProvenanceReader(
                self.clients.admin_settings["target"],
                config.source.alias,
                config.offset_syncs.max_lag,
            ),
        )
        self.delivery_watch = DeliveryWatch(PRODUCER_STALL_SECONDS)
        self.tasks = [
            Periodic("commit", config.commit_interval_seconds, self._commit),
            Periodic("topics", config.refresh_topics_interval_seconds, self._refresh_topics),
            Periodic("configs", config.topic_config_sync.interval_seconds, self._sync_configs),
            Periodic("checkpoints", config.checkpoints.interval_seconds, self._checkpoint),
            Periodic("heartbeats", config.heartbeats.interval_seconds, self._heartbeat),
            Periodic("deliveries", DELIVERY_CHECK_SECONDS, self._check_deliveries),
        ]

    def _client_failed(self, cluster: str, message: str) -> None:
        """An idempotent producer could no longer keep records in order."""
        if cluster == "target":
            self.producer_failure = message
        else:
            self._fail(f"the offset-sync producer failed: {message}")

    def _set_reachable(self, cluster: str, up: bool) -> None:
        self.reachable[cluster] = up
        alias = getattr(self.config, cluster).alias
        self.metrics.cluster_reachable.labels(cluster, alias).set(1 if up else 0)

    def ready(self) -> bool:
        return all(self.reachable.values())

    # --- the loop -------------------------------------------------------------------------

    def stop(self) -> None:
        self.stopping.set()

    def run(self) -> None:
        """Mirror until stopped; then commit what the target acknowledged and leave the group."""
        log.info(
            "mirroring %s → %s for %s",
            self.config.source.alias,
            self.config.target.alias,
            self.config.mirror,
        )
        try:
            while not self.stopping.is_set() and self.failure is None:
                self.watchdog.beat()
                now = time.monotonic()
                for task in self.tasks:
                    task.run_if_due(now, self._task_failed)
                if self.producer_failure is not None:
                    self._replace_producer(self.producer_failure)
                if self.backlog:
                    batch, self.backlog = self.backlog, []
                    self._mirror(batch)
                elif self.subscribed:
                    self._mirror(self._next_batch())
                else:
                    self.stopping.wait(POLL_SECONDS)
                self._serve_reports(BACKLOG_WAIT_SECONDS if self.backlog else 0)
                self.sync_writer.publish(self.clients.syncs_producer)
        finally:
            # Whatever ended the loop: commit only what the target acknowledged.
            self._barrier(None, SHUTDOWN_FLUSH_SECONDS)
            self.closing = True
            self.clients.close()
            self.checkpointer.close()
        if self.failure:
            raise WorkerFailed(self.failure)

    def _next_batch(self) -> list[Message]:
        """What the consumer holds, up to BATCH_SIZE; else wait for the first record to arrive.

        (`consume` with a timeout waits the whole timeout for a full batch: at low rates that
        would add its timeout to every record's latency.)
        """
        batch = self.clients.consumer.consume(num_messages=BATCH_SIZE, timeout=0)
        if batch:
            return batch
        first = self.clients.consumer.poll(POLL_SECONDS)
        return [] if first is None else [first]

    def _serve_reports(self, timeout: float) -> None:
        """Serve the producers' delivery reports; a producer that fails here is replaced."""
        try:
            self.clients.producer.poll(timeout)
        # librdkafka's fatal error surfaces as an exception from poll, and as a SystemError
        # from the next callback that runs while it is pending.
        except (KafkaException, SystemError) as error:
            self.producer_failure = str(error)
        refused, self.refused_flows = self.refused_flows, []
        for flow in refused:
            if flow.abandoned:
                continue
            permanent = permanent_refusal(flow.refused_code, flow.remote, flow.partition)
            if permanent is not None:
                self._stop_refused(permanent)
            else:
                self._rewind(flow, flow.acknowledged, f"the target refused {flow.refused}")
        if self.clients.syncs_producer is not self.clients.producer:
            self.clients.syncs_producer.poll(0)

    def _task_failed(self, name: str, error: Exception) -> None:
        self.metrics.errors.labels(name).inc()
        log.error("%s failed (will retry): %s", name, str(error) or type(error).__name__)

    def _fail(self, reason: str) -> None:
        if self.failure is None:
            log.error("stopping: %s", reason)
            self.failure = reason

    def _mirror(self, messages: list[Message]) -> None:
        # The hot path: one pass per record, attribute lookups hoisted out of the loop.
        identity = self.config.topic_naming.policy == "identity"
        flows, produce = self.flows, self.clients.producer.produce
        pack_offset = PROVENANCE_OFFSET.pack
        cycles = self._cycles(messages) if identity else None
        last = len(messages) - 1
        for index, message in enumerate(messages):
            error = message.error()
            if error is not None:
                self._consume_event(message, error)
                continue
            topic, partition, offset = message.topic(), message.partition(), message.offset()
            assert topic is not None and partition is not None and offset is not None
            flow = flows.get((topic, partition)) or self._open_flow(topic, partition, offset)
            if flow is None or flow.stop or flow.held or offset < flow.next_upstream:
                continue  # not mirrored, paused at an earlier record, or fetched before a seek
            if cycles and index in cycles:
                flow.skipped(offset)  # came from the target in the first place
                continue
            # A new list: the message keeps its own (a record kept for the next round, when the
            # producer's queue is full, must not get the header twice).
            headers = [
                *cast(Headers, message.headers() or ()),
                (PROVENANCE_HEADER, flow.provenance_prefix + pack_offset(offset)),
            ]
            timestamp = message.timestamp()[1]
            key, value = message.key(), message.value()
            size = (len(key) if key else 0) + (len(value) if value else 0)
            if size > flow.size_watch and self._too_large(flow, offset, key, value, headers):
                continue
            following = messages[index + 1] if index < last else None
            # Reported where the offset sync rule may fire (an upstream gap, `maxLag` records
            # since the last such report), where a partition's run in this batch ends, and
            # before a record skipped as a cycle (it will not be reported itself).
            sync_point = offset != flow.next_upstream or offset >= flow.next_sync_point
            report = (
                sync_point
                or following is None
                or following.partition() != partition
                or following.topic() != topic
                or following.error() is not None  # the end of the partition: the run ends
                or (cycles is not None and index + 1 in cycles)
            )
            try:
                # Positional: keyword arguments cost the C call a string lookup per keyword.
                # (topic, value, key, partition, callback, on_delivery, timestamp, headers)
                produce(
                    flow.remote,
                    value,
                    key,
                    partition,
                    flow.on_delivery if report else None,
                    None,
                    timestamp if timestamp > 0 else 0,
                    headers,
                )
            except BufferError:
                # The local queue is full: keep the rest for the next round, which first lets
                # deliveries drain (the loop goes on, so probes and SIGTERM are answered).
                self.backlog = [m for m in messages[index:] if self._still_wanted(m)]
                return
            except KafkaException as refusal:
                error = refusal.args[0]
                if error.code() == KafkaError._FATAL:
                    # The producer failed: the loop replaces it, then goes on from here.
                    self.producer_failure = error.str()
                    self.backlog = [m for m in messages[index:] if self._still_wanted(m)]
                    return
                self._refused(flow, offset, error)
                continue
            # Only once queued: its report cannot come before produce() returned, and a record
            # that failed to queue must not shift the reports of the ones after it.
            flow.next_upstream = offset + 1
            flow.unreported_records += 1
            flow.unreported_bytes += size
            if report:
                flow.in_flight.append(
                    (offset, timestamp, flow.unreported_records, flow.unreported_bytes)
                )
                flow.unreported_records = flow.unreported_bytes = 0
            if sync_point:
                flow.next_sync_point = offset + flow.emitter.max_lag + 1

    def _cycles(self, messages: list[Message]) -> set[int]:
        """Indexes of the records that came from the target (identity naming: by header)."""
        target = self.config.target.alias
        return {
            index
            for index, message in enumerate(messages)
            if message.error() is None
            and target in provenance_aliases(cast(Headers, message.headers() or []))
        }

    def _consume_event(self, message: Message, error: KafkaError) -> None:
        if error.code() != KafkaError._PARTITION_EOF:
            self.metrics.errors.labels("consume").inc()
            log.warning("consuming from the source: %s", error.str())
            return
        topic, partition, offset = message.topic(), message.partition(), message.offset()
        if topic is None or partition is None or offset is None:
            return
        flow = self.flows.get((topic, partition)) or self._open_flow(topic, partition, offset)
        if flow is not None:
            flow.reached_end(offset)

    def _still_wanted(self, message: Message) -> bool:
        flow = self.flows.get((message.topic() or "", message.partition() or 0))
        return flow is None or not (flow.stop or flow.held or flow.abandoned)

    def _open_flow(self, topic: str, partition: int, offset: int) -> PartitionFlow | None:
        remote = self.topics.plan.mirrored.get(topic)
        if remote is None:
            return None  # dropped from the selection; its revocation is on its way
        flow = self._new_flow(topic, partition, remote, offset)
        if partition >= self.topics.remote_partitions.get(remote, 0):
            # The source grew since the last refresh: wait for it to grow the remote topic.
            self._stop(flow, offset, f"{remote} has no partition {partition} yet", 0.0)
        return flow

    def _new_flow(self, topic: str, partition: int, remote: str, start: int) -> PartitionFlow:
        limit = self.topics.max_record_bytes.get(remote)
        flow = PartitionFlow(
            topic,
            partition,
            remote,
            Provenance.prefix(self.config.source.alias, partition),
            SyncEmitter(self.config.offset_syncs.max_lag),
            self.sync_writer.queue,
            start,
            self.refused_flows.append,
        )
        flow.size_watch = limit - SIZE_SLACK if limit else 2**62
        self.flows[(topic, partition)] = flow
        return flow

    # --- records the target cannot take (yet) ---------------------------------------------

    def _too_large(
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
        self._stop(flow, offset, reason, STOP_RETRY_SECONDS)
        return True

    def _refused(self, flow: PartitionFlow, offset: int, error: KafkaError) -> None:
        permanent = permanent_refusal(error.code(), flow.remote, flow.partition)
        if error.code() in UNKNOWN_REMOTE:
            # The remote partition is new, or was deleted: then every record of it the producer
            # held failed, reported or not. Hold it from its first unacknowledged record.
            reason = f"the producer does not know {flow.remote}[{flow.partition}] yet"
            self._stop_unacknowledged(flow, reason, 0.0)
        elif permanent is not None and permanent.whole_topic:
            # The producer's metadata denies it the topic: it failed every record of the topic
            # it held, reported or not.
            self._stop_refused(permanent)
        else:
            self._stop(flow, offset, f"the producer refused it: {error.str()}", STOP_RETRY_SECONDS)

    def _stop_refused(self, refusal: PermanentRefusal) -> None:
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
            self._rewind(flow, start, reason)
        self._stop(self.flows[(flow.topic, flow.partition)], start, reason, retry_after)

    def _stop(self, flow: PartitionFlow, offset: int, reason: str, retry_after: float) -> None:
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
            self._fail(f"cannot pause {flow.topic}[{flow.partition}] at {offset}: {error}")
        self.backlog = [m for m in self.backlog if self._still_wanted(m)]

    def _resume_due(self) -> None:
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
        for flow in due:
            assert flow.stop is not None
            if flow.partition >= self.topics.remote_partitions.get(flow.remote, 0):
                continue  # still waiting for the remote partition
            flow.size_watch = self.topics.max_record_bytes.get(flow.remote, 2**62) - SIZE_SLACK
            flow.stop = None
            self.clients.consumer.resume([TopicPartition(flow.topic, flow.partition)])

    def _rewind(self, flow: PartitionFlow, offset: int, why: str) -> None:
        """Consume the partition again from `offset` with a new flow; the old one's late
        reports are ignored."""
        key = (flow.topic, flow.partition)
        flow.abandoned = True
        fresh = self._new_flow(flow.topic, flow.partition, flow.remote, offset)
        fresh.stop, fresh.held = flow.stop, flow.held
        before, times = self.refusals.get(key, (-1, 0))
        if before == offset and times >= REFUSALS_BEFORE_STOP:
            self._stop(fresh, offset, why, STOP_RETRY_SECONDS)
            return
        self.refusals[key] = (offset, times + 1 if before == offset else 1)
        point = TopicPartition(flow.topic, flow.partition, offset)
        try:
            self.clients.consumer.seek(point)
        except KafkaException as error:
            self._fail(f"cannot rewind {flow.topic}[{flow.partition}] to {offset}: {error}")
        # What the batch still held of it comes again from the seek, in order.
        self.backlog = [m for m in self.backlog if (m.topic(), m.partition()) != key]

    def _replace_producer(self, reason: str) -> None:
        """Give up on the producer: each partition with records waiting is consumed again from
        its first unacknowledged record, through a new producer."""
        log.warning("replacing the producer and re-sending what it held: %s", reason)
        self.metrics.errors.labels("producer replaced").inc()
        self.producer_failure = None
        failed = FAILED_PARTITION.search(reason)
        culprit = (failed.group(1), int(failed.group(2))) if failed else None
        # A refusal known to be permanent stops what it concerns below, not after three tries.
        permanent = refusal_in_fatal(reason)
        old = self.clients.renew_producer()
        self.checkpointer.producer = self.clients.producer
        for flow in list(self.flows.values()):
            if flow.settled() and flow.refused is None:
                continue
            self._rewind(flow, flow.acknowledged, reason)
            if permanent is not None or (flow.remote, flow.partition) != culprit:
                self.refusals.pop((flow.topic, flow.partition), None)
        if permanent is not None:
            self._stop_refused(permanent)
        old.purge()
        with suppress(KafkaException, SystemError):
            old.poll(0)  # its purged records' reports, to abandoned flows
        self.delivery_watch.progress = None

    # --- progress -------------------------------------------------------------------------

    def _commit(self) -> None:
        """Commit what the target has acknowledged so far, without waiting for the rest."""
        self.sync_writer.promote_delayed()
        self.sync_writer.publish(self.clients.syncs_producer)
        self._publish_figures()
        self._hold_unacknowledged()
        offsets = commit_offsets(self.flows.values())
        if offsets:
            self.clients.consumer.commit(offsets=offsets, asynchronous=True)
            self._update_lag(offsets)

    def _hold_unacknowledged(self) -> None:
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
                key = (flow.topic, flow.partition)
                self.backlog = [m for m in self.backlog if (m.topic(), m.partition()) != key]
            elif flow.held and not waiting:
                flow.held = False
                consumer.resume([TopicPartition(flow.topic, flow.partition)])

    def _committed(self, error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        if error is not None and error.code() not in _REBALANCING:
            self.metrics.errors.labels("commit").inc()
            log.warning("committing offsets (will retry): %s", error.str())

    def _barrier(self, partitions: list[TopicPartition] | None, timeout: float) -> None:
        """Wait (up to `timeout`) for the target to acknowledge what is queued, then commit what
        it acknowledged of `partitions` (all when None)."""
        self.sync_writer.promote_delayed()
        self.sync_writer.publish(self.clients.syncs_producer)
        # The flush serves the reports; records queued after the last reported one of their
        # partition stay unconfirmed (one failing unreported, its remote partition deleted,
        # would go unseen): the next owner sends them again.
        try:
            remaining = self.clients.producer.flush(timeout)
        except (KafkaException, SystemError) as error:
            self.producer_failure, remaining = str(error), -1
        if remaining and timeout:
            log.warning("the target has not acknowledged everything: committing what it has")
        if self.clients.syncs_producer is not self.clients.producer:
            self.clients.syncs_producer.flush(min(timeout, 5.0))
        self._publish_figures()
        keys = None if partitions is None else {(tp.topic, tp.partition) for tp in partitions}
        offsets = commit_offsets(f for k, f in self.flows.items() if keys is None or k in keys)
        if not offsets:
            return
        try:
            self.clients.consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as error:
            # Rebalancing, or the group is gone: the next owner resumes from the last commit.
            log.info("commit before giving partitions up failed: %s", error.args[0].str())
            return
        self._update_lag(offsets)

    def _publish_figures(self) -> None:
        now = time.monotonic()
        for flow in self.flows.values():
            if flow.records:
                labels = (flow.topic, str(flow.partition))
                self.metrics.records.labels(*labels).inc(flow.records)
                self.metrics.bytes.labels(*labels).inc(flow.bytes)
                flow.records = flow.bytes = 0
            if flow.latencies:
                histogram = self.metrics.latency.labels(flow.topic)
                for latency in flow.latencies:
                    histogram.observe(latency)
                self.metrics.last_latency.labels(flow.topic).set(flow.latencies[-1])
                flow.latencies.clear()
            if flow.waiting_since is None and not flow.settled():
                flow.waiting_since = now
        self.metrics.set_partition_problems(
            (f.topic, f.partition, f.problem(now)) for f in self.flows.values()
        )

    def _update_lag(self, positions: list[TopicPartition]) -> None:
        for tp in positions:
            _low, high = self.clients.consumer.get_watermark_offsets(tp, cached=True) or (0, -1)
            if high >= 0:
                self.metrics.lag.labels(tp.topic, str(tp.partition)).set(max(high - tp.offset, 0))

    def _on_assign(self, consumer: object, partitions: list[TopicPartition]) -> None:
        log.info("assigned %d partitions", len(partitions))

    def _on_revoke(self, consumer: object, partitions: list[TopicPartition]) -> None:
        """Before giving partitions to another replica, commit what the target holds of them."""
        log.info("revoked %d partitions", len(partitions))
        self._barrier(partitions, 0.0 if self.closing else REVOKE_FLUSH_SECONDS)
        self._forget(partitions)

    def _on_lost(self, consumer: object, partitions: list[TopicPartition]) -> None:
        log.warning("lost %d partitions (no commit: another worker may own them)", len(partitions))
        self._forget(partitions)

    def _forget(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            key = (tp.topic, tp.partition)
            flow = self.flows.pop(key, None)
            if flow is not None:
                flow.abandoned = True
            self.refusals.pop(key, None)
            self.stops.pop(key, None)
            self.metrics.forget_partition(tp.topic, tp.partition)
        gone = {(tp.topic, tp.partition) for tp in partitions}
        self.backlog = [m for m in self.backlog if (m.topic(), m.partition()) not in gone]

    # --- periodic tasks -------------------------------------------------------------------

    def _reload_config(self) -> None:
        text = self.config_path.read_text()
        if text == self.config_text:
            return
        new = load(self.config_path)
        self.config_text = text
        changed = [f for f in RESTART_FIELDS if getattr(new, f) != getattr(self.config, f)]
        if changed:
            # Exiting cleanly lets the pod's restart apply them with new clients.
            log.info("configuration of %s changed: exiting to restart with it", ", ".join(changed))
            self.stop()
            return
        log.info("configuration changed: applying the new selections live")
        self.config = new

    def _refresh_topics(self) -> None:
        self._reload_config()
        ready = self.topics.internal_topics_ready
        plan = self.topics.refresh(self.config)
        if not ready and self.topics.internal_topics_ready:
            self.checkpointer.load_emitted(
                TopicTail(self.clients.checkpoints_reader, self.checkpoints_topic)
            )
        self._subscribe(sorted(plan.mirrored))
        self._resume_due()

    def _subscribe(self, topics: list[str]) -> None:
        if topics == self.subscribed:
            return
        added = sorted(set(topics) - set(self.subscribed))
        removed = sorted(set(self.subscribed) - set(topics))
        log.info(
            "mirroring %d topics (started: %s; stopped: %s)",
            len(topics),
            ", ".join(added) or "-",
            ", ".join(removed) or "-",
        )
        if topics:
            self.clients.consumer.subscribe(
                topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
            )
        else:
            self._barrier(None, REVOKE_FLUSH_SECONDS)
            self.clients.consumer.unsubscribe()
            self._forget([TopicPartition(t, p) for t, p in list(self.flows)])
        self.subscribed = topics

    def _sync_configs(self) -> None:
        self.topics.sync_configs(self.config)

    def _checkpoint(self) -> None:
        if not self.config.checkpoints.enabled or not self.topics.internal_topics_ready:
            return
        mirrored = self.topics.plan.mirrored
        owned = (
            {
                (tp.topic, tp.partition): mirrored[tp.topic]
                for tp in self.clients.consumer.assignment()
                if tp.topic in mirrored
            }
            if self.subscribed
            else {}
        )
        try:
            self.checkpointer.run_once(owned)
        except TimeoutError:
            log.info("admin requests timed out: reconnecting the admin clients")
            self.clients.renew_admins()
            self.checkpointer.source_admin = self.clients.source_admin
            self.checkpointer.target_admin = self.clients.target_admin
            raise

    def _check_deliveries(self) -> None:
        waiting = [flow.acknowledged for flow in self.flows.values() if not flow.settled()]
        if not self.delivery_watch.stalled(sum(waiting) if waiting else None, time.monotonic()):
            return
        if not self.reachable["target"]:
            return  # the target is down: waiting for it is right
        try:
            self.clients.target_admin.list_topics(timeout=TARGET_PROBE_SECONDS)
        except KafkaException:
            return
        # The target answers, yet the producer has had nothing acknowledged for a minute: seen
        # after a target broker restart under load (librdkafka 2.16), stuck for good.
        self.producer_failure = (
            f"the target acknowledged nothing for {self.delivery_watch.patience:.0f}s "
            "although it answers"
        )

    def _heartbeat(self) -> None:
        if not self.config.heartbeats.enabled or not self.topics.internal_topics_ready:
            return
        beat = Heartbeat(
            self.config.source.alias, self.config.target.alias, int(time.time() * 1000)
        )
        self.clients.producer.produce(HEARTBEATS_TOPIC, key=beat.key(), value=beat.value())
