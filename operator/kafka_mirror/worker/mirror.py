"""The mirroring worker: source topics on A to remote topics on B, at least once.

One loop, one thread: consume a batch from A, produce it to B (same partition, key, value,
headers and timestamp, plus a provenance header), and run the periodic tasks when due.

The producer is idempotent with librdkafka's gapless guarantee: a record of a partition is
acknowledged only if every earlier one was (any failure that could leave a gap is fatal and
stops the worker). So a delivery report is asked for only on a sample of records (the last of a
partition's run in each batch, after an upstream gap, and every `offsetSyncs.maxLag` records):
it says B holds everything up to it and gives the offset pairs for offset syncs, and the rest
cost no Python at all. Every commit interval the acknowledged offsets are committed, without
stopping the loop. A worker killed re-sends at most what it consumed since the last commit.
Replicas share partitions through the consumer group on A (cooperative rebalancing); a replica
giving up partitions, or stopping, passes a barrier first: flush the producer, then commit
everything consumed.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections import deque
from collections.abc import Callable, Iterable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from kafka_mirror.kafka.errors import AUTH_ERRORS
from kafka_mirror.kafka.formats import (
    HEARTBEATS_TOPIC,
    PROVENANCE_HEADER,
    PROVENANCE_OFFSET,
    Heartbeat,
    OffsetSync,
    Provenance,
    checkpoints_topic,
    offset_syncs_topic,
    provenance_aliases,
)
from kafka_mirror.topics import Selection, SkippedTopic, TopicPlan, plan_topics
from kafka_mirror.worker import remote_topics
from kafka_mirror.worker.checkpoints import Checkpointer, GroupFilter, TopicTail
from kafka_mirror.worker.config import WorkerConfig, load
from kafka_mirror.worker.metrics import LoopWatchdog, WorkerMetrics
from kafka_mirror.worker.offsets import SyncEmitter

log = logging.getLogger(__name__)

BATCH_SIZE = 5000
POLL_SECONDS = 0.1
LATENCY_SAMPLE_SECONDS = 0.01  # at most 100 latency samples a second per partition
SLOW_TASK_SECONDS = 2.0
MAX_BACKOFF_SECONDS = 60.0  # between retries of a failing periodic task
DELIVERY_CHECK_SECONDS = 5.0
PRODUCER_STALL_SECONDS = 60.0  # records waiting, none acknowledged, the target answering
TARGET_PROBE_SECONDS = 5.0
ERROR_LOG_INTERVAL = 60.0  # seconds between two log lines of the same client error
# Changing these needs new clients, so the worker restarts to apply them.
RESTART_FIELDS = ("source", "target", "topic_naming", "offset_syncs", "metrics_port")


_REBALANCING = {KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION}


# Spelled once: a type expression in the loop would be built again for every record.
Headers = list[tuple[str, str | bytes | None]]


class WorkerFailed(RuntimeError):
    """The target refused records for good; the worker stops without committing past them."""


@dataclass
class PartitionFlow:
    """One source partition on its way to the target: in-flight records and their figures.

    `in_flight` holds the reported records not yet acknowledged, each with the number and bytes
    of the records up to it; `unreported` counts records queued after the last reported one.
    `acknowledged` is the upstream offset before which B holds every record consumed: one past
    the newest acknowledged, or the first record's offset while none is. `abandoned` flows
    belonged to a producer given up on: its late reports change nothing.
    """

    topic: str
    partition: int
    remote: str
    provenance_prefix: bytes
    emitter: SyncEmitter
    publish_sync: Callable[[OffsetSync], None]
    on_failure: Callable[[str], None]
    in_flight: deque[tuple[int, int, int, int]] = field(default_factory=deque)
    unreported_records: int = 0
    unreported_bytes: int = 0
    next_upstream: int = -1
    next_sync_point: int = 0
    acknowledged: int = -1
    failed: bool = False
    abandoned: bool = False
    records: int = 0
    bytes: int = 0
    latencies: list[float] = field(default_factory=list)
    next_latency_sample: float = 0.0

    def __post_init__(self) -> None:
        self.on_delivery = self.delivered  # bound once, not once per record

    def settled(self) -> bool:
        """Nothing queued for the target is waiting for its acknowledgement."""
        return not self.in_flight and not self.unreported_records

    def all_delivered(self) -> None:
        """After a successful flush: the unreported records are on the target too."""
        self.records += self.unreported_records
        self.bytes += self.unreported_bytes
        self.unreported_records = self.unreported_bytes = 0

    def delivered(self, error: KafkaError | None, message: Message) -> None:
        """Delivery report from the target; reports of one partition arrive in order."""
        if self.abandoned:
            return
        upstream, timestamp_ms, records, size = self.in_flight.popleft()
        if error is not None or self.failed:
            self.failed = True  # never acknowledge past a refused record
            self.on_failure(f"{self.remote}[{self.partition}] refused offset {upstream}: {error}")
            return
        self.acknowledged = upstream + 1
        self.records += records
        self.bytes += size
        if timestamp_ms > 0:
            now = time.time()
            if now >= self.next_latency_sample:
                self.latencies.append(now - timestamp_ms / 1000)
                self.next_latency_sample = now + LATENCY_SAMPLE_SECONDS
        downstream = message.offset()
        if downstream is not None and self.emitter.update(upstream, downstream):
            self.publish_sync(OffsetSync(self.topic, self.partition, upstream, downstream))


class Periodic:
    """A task run every `interval` seconds from the loop; failures are logged, not raised.
    Slow failures (timeouts) back off, doubling up to MAX_BACKOFF_SECONDS, so that a task stuck
    in timeouts cannot take the loop's time from mirroring."""

    def __init__(self, name: str, interval: float, task: Callable[[], None]) -> None:
        self.name, self.interval, self.task = name, interval, task
        self.due = 0.0
        self.failures = 0

    def run_if_due(self, now: float, on_error: Callable[[str, Exception], None]) -> None:
        if now < self.due:
            return
        self.due = now + self.interval
        started = time.monotonic()
        failed = False
        try:
            self.task()
        except (KafkaException, OSError, TimeoutError, ValueError) as error:
            on_error(self.name, error)
            failed = True
        ended = time.monotonic()
        took = ended - started
        if not failed:
            self.failures = 0
        elif took > SLOW_TASK_SECONDS:
            self.failures += 1
            self.due = ended + min(self.interval * 2**self.failures, MAX_BACKOFF_SECONDS)
        if took > SLOW_TASK_SECONDS:
            log.warning("%s took %.1fs (mirroring waits meanwhile)", self.name, took)


def rewind_points(flows: Iterable[PartitionFlow]) -> list[TopicPartition]:
    """Where to consume again to re-send what a producer given up on held: each partition's
    first record not acknowledged, for the partitions with records waiting."""
    return [TopicPartition(f.topic, f.partition, f.acknowledged) for f in flows if not f.settled()]


@dataclass
class DeliveryWatch:
    """Notices acknowledgements stopping: records waiting for them, and `progress` (the sum of
    the waiting partitions' acknowledged offsets) unchanged for `patience` seconds."""

    patience: float
    progress: int | None = None
    since: float = 0.0

    def stalled(self, progress: int | None, now: float) -> bool:
        """`progress` is None when nothing waits for an acknowledgement."""
        if progress is None or progress != self.progress:
            self.progress, self.since = progress, now
            return False
        return now - self.since >= self.patience


class MirrorWorker:
    def __init__(self, config_path: Path, metrics: WorkerMetrics) -> None:
        self.config_path = config_path
        self.config_text = config_path.read_text()
        self.config: WorkerConfig = load(config_path)
        self.metrics = metrics
        self.watchdog = LoopWatchdog()
        self.stopping = threading.Event()
        self.failure: str | None = None
        self.reachable = {"source": False, "target": False}
        self.plan = TopicPlan({}, [])
        self.subscribed: list[str] = []
        self.remote_partitions: dict[str, int] = {}
        self.flows: dict[tuple[str, int], PartitionFlow] = {}
        self.held: dict[tuple[str, int], TopicPartition] = {}
        # Partitions rewound for a new producer, until their first record is consumed again:
        # the (asynchronous) seek may not have moved the consumer's position yet.
        self.rewound: dict[tuple[str, int], int] = {}
        self.internal_topics_ready = False
        self._last_problems: list[str] = []
        self._logged_errors: dict[tuple[str, int], float] = {}
        self._build_clients()
        self.tasks = [
            Periodic("commit", self.config.commit_interval_seconds, self._commit),
            Periodic("topics", self.config.refresh_topics_interval_seconds, self._refresh_topics),
            Periodic("configs", self.config.topic_config_sync.interval_seconds, self._sync_configs),
            Periodic("checkpoints", self.config.checkpoints.interval_seconds, self._checkpoint),
            Periodic("heartbeats", self.config.heartbeats.interval_seconds, self._heartbeat),
            Periodic("deliveries", DELIVERY_CHECK_SECONDS, self._check_deliveries),
        ]
        self.delivery_watch = DeliveryWatch(PRODUCER_STALL_SECONDS)

    # --- clients --------------------------------------------------------------------------

    def _build_clients(self) -> None:
        config = self.config
        client_id = f"kafka-mirror-{socket.gethostname()}"
        # Nagle's algorithm holds small requests back for the peer's delayed ACK (tens of ms a
        # hop); Kafka's Java clients turn it off too. A cluster's own config may turn it on.
        defaults = {"socket.nagle.disable": True, "client.id": client_id}
        source: dict[str, Any] = {**defaults, **config.source.client_config()}
        target: dict[str, Any] = {**defaults, **config.target.client_config()}
        self.admin_settings: dict[str, dict[str, Any]] = {
            "source": {**source, "error_cb": self._client_error("source")},
            "target": {**target, "error_cb": self._client_error("target")},
        }
        self.source_admin = AdminClient(self.admin_settings["source"])
        self.target_admin = AdminClient(self.admin_settings["target"])
        self.consumer = Consumer(
            {
                **source,
                "group.id": config.consumer_group,
                "enable.auto.commit": False,
                "auto.offset.reset": "earliest",
                "partition.assignment.strategy": "cooperative-sticky",
                # Notice partitions added on the source as fast as new topics.
                "topic.metadata.refresh.interval.ms": int(
                    config.refresh_topics_interval_seconds * 1000
                ),
                "fetch.max.bytes": 64 * 1024 * 1024,
                "max.partition.fetch.bytes": 8 * 1024 * 1024,
                "queued.max.messages.kbytes": 256 * 1024,
                "error_cb": self._client_error("source"),
                "on_commit": self._committed,
            }
        )
        producer_settings = {
            "enable.idempotence": True,
            "enable.gapless.guarantee": True,
            "acks": "all",
            "linger.ms": 5,
            "batch.size": 1024 * 1024,
            "queue.buffering.max.messages": 200_000,
            "queue.buffering.max.kbytes": 256 * 1024,
        }
        self.producer_settings = {
            **target,
            **producer_settings,
            "error_cb": self._client_error("target"),
        }
        self.producer = Producer(self.producer_settings)
        at_source = config.offset_syncs.location == "source"
        self.syncs_producer = (
            Producer(
                {
                    **source,
                    "enable.idempotence": True,
                    "linger.ms": 5,
                    "error_cb": self._client_error("source"),
                }
            )
            if at_source
            else self.producer
        )
        self.offset_syncs_topic = offset_syncs_topic(config.target.alias)
        self.checkpoints_topic = checkpoints_topic(config.source.alias)
        readers = {
            "enable.auto.commit": False,
            "enable.partition.eof": True,
            "auto.offset.reset": "earliest",
            "group.id": f"{config.consumer_group}.internal",
        }
        self.internal_readers = [
            Consumer({**(source if at_source else target), **readers}),
            Consumer({**target, **readers}),
        ]
        self.checkpointer = Checkpointer(
            self.source_admin,
            self.target_admin,
            self.producer,
            TopicTail(self.internal_readers[0], self.offset_syncs_topic),
            self.checkpoints_topic,
            GroupFilter(
                Selection(
                    tuple(config.checkpoints.groups.includes),
                    tuple(config.checkpoints.groups.excludes),
                ),
                own_group=config.consumer_group,
            ),
            config.checkpoints.sync_group_offsets,
            self.metrics,
        )

    def _client_error(self, cluster: str) -> Callable[[KafkaError], None]:
        alias = getattr(self.config, cluster).alias

        def report(error: KafkaError) -> None:
            code = error.code()
            if error.fatal():  # the gapless producer could no longer keep records in order
                self._fail(f"{cluster} cluster {alias}: {error.str()}")
            if code in AUTH_ERRORS:
                self.metrics.errors.labels("authentication").inc()
                message = f"{cluster} cluster {alias} refused our credentials: {error.str()}"
                level = logging.ERROR
            elif code in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT, KafkaError._RESOLVE):
                self.metrics.errors.labels("connection").inc()
                if code == KafkaError._ALL_BROKERS_DOWN:
                    self._set_reachable(cluster, False)
                message, level = f"{cluster} cluster {alias}: {error.str()}", logging.WARNING
            else:
                self.metrics.errors.labels("client").inc()
                message, level = f"{cluster} cluster {alias}: {error.str()}", logging.WARNING
            # Every client (consumer, producer, admins) reports the same outage, over and over:
            # the metrics count each report; the log has each kind once a minute per cluster.
            now, kind = time.monotonic(), (cluster, code)
            if now - self._logged_errors.get(kind, -ERROR_LOG_INTERVAL) >= ERROR_LOG_INTERVAL:
                self._logged_errors[kind] = now
                log.log(level, "%s", message)

        return report

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
        """Mirror until stopped; then pass the barrier, leave the group and close."""
        log.info(
            "mirroring %s → %s for %s",
            self.config.source.alias,
            self.config.target.alias,
            self.config.mirror,
        )
        try:
            while not self.stopping.is_set():
                self.watchdog.beat()
                now = time.monotonic()
                for task in self.tasks:
                    task.run_if_due(now, self._task_failed)
                if self.failure:
                    raise WorkerFailed(self.failure)
                if self.subscribed:
                    self._mirror(self._next_batch())
                else:
                    self.stopping.wait(POLL_SECONDS)
                self.producer.poll(0)
                self.syncs_producer.poll(0)
            self._barrier()
        finally:
            self.consumer.close()
            for reader in self.internal_readers:
                reader.close()
        if self.failure:
            raise WorkerFailed(self.failure)

    def _next_batch(self) -> list[Message]:
        """What the consumer holds, up to BATCH_SIZE; else wait for the first record to arrive.

        (`consume` with a timeout waits the whole timeout for a full batch: at low rates that
        would add its timeout to every record's latency.)
        """
        batch = self.consumer.consume(num_messages=BATCH_SIZE, timeout=0)
        if batch:
            return batch
        first = self.consumer.poll(POLL_SECONDS)
        return [] if first is None else [first]

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
        target_alias = self.config.target.alias
        flows, held, produce = self.flows, self.held, self.producer.produce
        pack_offset = PROVENANCE_OFFSET.pack
        last = len(messages) - 1
        for index, message in enumerate(messages):
            error = message.error()
            if error is not None:
                if error.code() != KafkaError._PARTITION_EOF:
                    self.metrics.errors.labels("consume").inc()
                    log.warning("consuming from the source: %s", error.str())
                continue
            topic, partition, offset = message.topic(), message.partition(), message.offset()
            assert topic is not None and partition is not None and offset is not None
            if held and (topic, partition) in held:
                continue  # waiting for its remote partition; it was rewound to the first record
            flow = flows.get((topic, partition)) or self._open_flow(topic, partition, offset)
            if flow is None:
                continue
            headers = cast(Headers, message.headers() or [])
            if identity and target_alias in provenance_aliases(headers):
                continue  # came from the target in the first place: a cycle
            headers.append((PROVENANCE_HEADER, flow.provenance_prefix + pack_offset(offset)))
            timestamp = message.timestamp()[1]
            key, value = message.key(), message.value()
            following = messages[index + 1] if index < last else None
            # Reported where the offset sync rule may fire (an upstream gap, `maxLag` records
            # since the last such report) and where a partition's run in this batch ends.
            sync_point = offset != flow.next_upstream or offset >= flow.next_sync_point
            report = (
                sync_point
                or following is None
                or following.partition() != partition
                or following.topic() != topic
            )
            while True:
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
                    break
                except BufferError:
                    self.producer.poll(0.05)  # the local queue is full: let deliveries drain
            # Only once queued: its report cannot come before produce() returned, and a record
            # that failed to queue must not shift the reports of the ones after it.
            flow.next_upstream = offset + 1
            flow.unreported_records += 1
            flow.unreported_bytes += (len(key) if key else 0) + (len(value) if value else 0)
            if report:
                flow.in_flight.append(
                    (offset, timestamp, flow.unreported_records, flow.unreported_bytes)
                )
                flow.unreported_records = flow.unreported_bytes = 0
            if sync_point:
                flow.next_sync_point = offset + flow.emitter.max_lag + 1

    def _open_flow(self, topic: str, partition: int, offset: int) -> PartitionFlow | None:
        remote = self.plan.mirrored.get(topic)
        if remote is None:
            return None  # dropped from the selection; its revocation is on its way
        if partition >= self.remote_partitions.get(remote, 0):
            # The source grew since the last refresh: hold this partition (rewound to this
            # record) until the next refresh has grown the remote topic.
            held = TopicPartition(topic, partition, offset)
            self.consumer.pause([held])
            self.consumer.seek(held)
            self.held[(topic, partition)] = held
            return None
        # Rewound: the first record comes from where it went (the seek drops what was fetched).
        first = min(offset, self.rewound.pop((topic, partition), offset))
        flow = PartitionFlow(
            topic,
            partition,
            remote,
            Provenance.prefix(self.config.source.alias, partition),
            SyncEmitter(self.config.offset_syncs.max_lag),
            self._publish_sync,
            self._fail,
            acknowledged=first,
        )
        self.flows[(topic, partition)] = flow
        return flow

    def _publish_sync(self, sync: OffsetSync) -> None:
        self.syncs_producer.produce(self.offset_syncs_topic, key=sync.key(), value=sync.value())
        self.metrics.offset_syncs.labels(sync.topic).inc()

    # --- progress -------------------------------------------------------------------------

    def _commit(self) -> None:
        """Commit what the target has acknowledged so far, without waiting for the rest."""
        if self.failure:
            return  # never commit past a refused record
        self._publish_figures()
        if not self.subscribed:
            return
        offsets = self._acknowledged(self.consumer.assignment())
        if offsets:
            self.consumer.commit(offsets=offsets, asynchronous=True)
            self._update_lag(offsets)

    def _committed(self, error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        if error is not None and error.code() not in _REBALANCING:
            self.metrics.errors.labels("commit").inc()
            log.warning("committing offsets (will retry): %s", error.str())

    def _acknowledged(self, partitions: list[TopicPartition]) -> list[TopicPartition]:
        """Per partition, the offset before which every consumed record is on the target.

        With nothing waiting for an acknowledgement that is the consumer's position, which also
        steps over records not mirrored (cycles) and transaction markers; else one past the
        newest acknowledged; for a partition rewound and not consumed since, where it went.
        """
        offsets = []
        for position in self.consumer.position(partitions):
            key = (position.topic, position.partition)
            flow = self.flows.get(key)
            if flow is None:
                offset = self.rewound.get(key, position.offset)
            else:
                offset = position.offset if flow.settled() else flow.acknowledged
            if offset >= 0:
                offsets.append(TopicPartition(position.topic, position.partition, offset))
        return offsets

    def _barrier(self, partitions: list[TopicPartition] | None = None) -> None:
        """Wait until the target acknowledged everything consumed, then commit it."""
        for producer in {id(p): p for p in (self.producer, self.syncs_producer)}.values():
            remaining = producer.flush(30)
            if remaining:
                raise KafkaException(f"{remaining} records still unacknowledged by the target")
        if self.failure:
            return  # never commit past a refused record
        for flow in self.flows.values():
            flow.all_delivered()
        self._publish_figures()
        if not self.subscribed:
            return
        assigned = partitions if partitions is not None else self.consumer.assignment()
        offsets = self._acknowledged(assigned)
        if not offsets:
            return
        try:
            self.consumer.commit(offsets=offsets, asynchronous=False)
        except KafkaException as error:
            if error.args[0].code() not in _REBALANCING:
                raise
            # The group is rebalancing; the revocation callback commits what we give up.
            log.info("commit deferred: %s", error.args[0].str())
            return
        self._update_lag(offsets)

    def _publish_figures(self) -> None:
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

    def _update_lag(self, positions: list[TopicPartition]) -> None:
        for tp in positions:
            _low, high = self.consumer.get_watermark_offsets(tp, cached=True) or (0, -1)
            if high >= 0:
                self.metrics.lag.labels(tp.topic, str(tp.partition)).set(max(high - tp.offset, 0))

    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        log.info("assigned %d partitions", len(partitions))

    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        """Before giving partitions to another replica, pass the barrier for them."""
        log.info("revoked %d partitions", len(partitions))
        try:
            self._barrier(partitions)
        except KafkaException as error:
            log.error("could not commit revoked partitions: %s", error)
        self._forget(partitions)

    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None:
        self._forget(partitions)

    def _forget(self, partitions: list[TopicPartition]) -> None:
        for tp in partitions:
            self.flows.pop((tp.topic, tp.partition), None)
            self.held.pop((tp.topic, tp.partition), None)
            self.rewound.pop((tp.topic, tp.partition), None)
            with suppress(KeyError):  # no lag reported for it yet
                self.metrics.lag.remove(tp.topic, str(tp.partition))

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
        selections, problems = self.config.compiled_selections()
        self.metrics.invalid_patterns.set(len(problems))
        if problems != self._last_problems:
            for problem in problems:
                log.error("ignoring %s", problem)
            self._last_problems = problems
        try:
            source_counts = remote_topics.partition_counts(self.source_admin)
            self._set_reachable("source", True)
        except KafkaException:
            self._set_reachable("source", False)
            raise
        plan = plan_topics(source_counts, selections, self.config.namer(), self.config.target.alias)
        wanted = {remote: source_counts[topic] for topic, remote in plan.mirrored.items()}
        try:
            existing = remote_topics.partition_counts(self.target_admin, wanted)
            self._set_reachable("target", True)
            if not self.internal_topics_ready:
                self._create_internal_topics()
            new = {t for t, r in plan.mirrored.items() if r not in existing}
            configs = self._remote_configs(new, plan)
            failed = set(remote_topics.create_or_grow(self.target_admin, wanted, existing, configs))
        except KafkaException:
            self._set_reachable("target", False)
            raise
        skipped = plan.skipped + [
            SkippedTopic(topic, "the remote topic could not be created (see the worker log)")
            for topic, remote in plan.mirrored.items()
            if remote in failed
        ]
        mirrored = {t: r for t, r in plan.mirrored.items() if r not in failed}
        if skipped != self.plan.skipped:
            for skip in skipped:
                log.warning("not mirroring %s: %s", skip.topic, skip.reason)
        self.remote_partitions = {r: max(existing.get(r, 0), wanted[r]) for r in mirrored.values()}
        self.plan = TopicPlan(mirrored, skipped)
        self.metrics.set_topics(mirrored, [(s.topic, s.reason) for s in skipped])
        self._subscribe(sorted(mirrored))
        if self.held:
            self.consumer.resume(list(self.held.values()))
            self.held.clear()

    def _remote_configs(self, topics: set[str], plan: TopicPlan) -> dict[str, dict[str, str]]:
        if not self.config.topic_config_sync.enabled or not topics:
            return {}
        excludes = frozenset(self.config.topic_config_sync.excludes)
        by_source = remote_topics.source_topic_configs(self.source_admin, topics, excludes)
        return {plan.mirrored[topic]: settings for topic, settings in by_source.items()}

    def _create_internal_topics(self) -> None:
        syncs_admin = (
            self.source_admin
            if self.config.offset_syncs.location == "source"
            else self.target_admin
        )
        remote_topics.ensure_internal_topic(syncs_admin, self.offset_syncs_topic)
        remote_topics.ensure_internal_topic(self.target_admin, self.checkpoints_topic)
        remote_topics.ensure_internal_topic(self.target_admin, HEARTBEATS_TOPIC)
        self.checkpointer.load_emitted(TopicTail(self.internal_readers[1], self.checkpoints_topic))
        self.internal_topics_ready = True

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
            self.consumer.subscribe(
                topics, on_assign=self._on_assign, on_revoke=self._on_revoke, on_lost=self._on_lost
            )
        else:
            self._barrier()
            self.consumer.unsubscribe()
            self.flows.clear()
        self.subscribed = topics

    def _sync_configs(self) -> None:
        if not self.config.topic_config_sync.enabled or not self.plan.mirrored:
            return
        excludes = frozenset(self.config.topic_config_sync.excludes)
        by_source = remote_topics.source_topic_configs(
            self.source_admin, self.plan.mirrored, excludes
        )
        remote_topics.copy_configs(
            self.target_admin, {self.plan.mirrored[t]: s for t, s in by_source.items()}
        )

    def _checkpoint(self) -> None:
        if not self.config.checkpoints.enabled or not self.internal_topics_ready:
            return
        owned = (
            {
                (tp.topic, tp.partition): self.plan.mirrored[tp.topic]
                for tp in self.consumer.assignment()
                if tp.topic in self.plan.mirrored
            }
            if self.subscribed
            else {}
        )
        try:
            self.checkpointer.run_once(owned)
        except TimeoutError:
            # After a broker restart librdkafka's admin client (2.16) can keep timing out on
            # group requests that a new client has answered at once.
            self._renew_admin_clients()
            raise

    def _renew_admin_clients(self) -> None:
        log.info("admin requests timed out: reconnecting the admin clients")
        self.source_admin = AdminClient(self.admin_settings["source"])
        self.target_admin = AdminClient(self.admin_settings["target"])
        self.checkpointer.source_admin = self.source_admin
        self.checkpointer.target_admin = self.target_admin

    def _check_deliveries(self) -> None:
        waiting = [flow.acknowledged for flow in self.flows.values() if not flow.settled()]
        if not self.delivery_watch.stalled(sum(waiting) if waiting else None, time.monotonic()):
            return
        if not self.reachable["target"]:
            return  # the target is down: waiting for it is right
        try:
            self.target_admin.list_topics(timeout=TARGET_PROBE_SECONDS)
        except KafkaException:
            return
        # The target answers, yet the producer has had nothing acknowledged for a minute: seen
        # after a target broker restart under load (librdkafka 2.16), stuck until the records
        # time out (300 s) and the gapless guarantee stops the worker.
        self._renew_producer()

    def _renew_producer(self) -> None:
        """Give up on the producer: re-send from each partition's last acknowledged record."""
        log.warning(
            "the target acknowledged nothing for %.0fs although it answers: replacing the "
            "producer and re-sending what it held",
            self.delivery_watch.patience,
        )
        self.metrics.errors.labels("producer stalled").inc()
        for point in rewind_points(self.flows.values()):
            self.rewound[(point.topic, point.partition)] = point.offset
            try:
                self.consumer.seek(point)
            except KafkaException as error:
                # Going on could commit past records that were never acknowledged.
                self._fail(f"cannot rewind {point.topic}[{point.partition}]: {error}")
                return
        for flow in self.flows.values():
            flow.abandoned = True
        self.flows.clear()
        stuck, self.producer = self.producer, Producer(self.producer_settings)
        if self.syncs_producer is stuck:
            self.syncs_producer = self.producer
        self.checkpointer.producer = self.producer
        stuck.purge()
        stuck.poll(0)  # its purged records' reports, to abandoned flows
        self.delivery_watch.progress = None

    def _heartbeat(self) -> None:
        if not self.config.heartbeats.enabled or not self.internal_topics_ready:
            return
        beat = Heartbeat(
            self.config.source.alias, self.config.target.alias, int(time.time() * 1000)
        )
        self.producer.produce(HEARTBEATS_TOPIC, key=beat.key(), value=beat.value())
