"""The mirroring worker: source topics on A to remote topics on B.

One loop, one thread (as MirrorMaker 2's MirrorSourceTask polls and sends): consume a batch from
A, produce it to B (`batches.BatchSender`), serve the delivery reports, and run the periodic
tasks when due (their admin calls on a thread of their own: `periodic.OffLoop`). What is
committed, when, and who owns which partition is the delivery guarantee's: `at_least_once.py`
(the default) and `exactly_once.py` decide it, each a `MirrorWorker`.

A record the producer refuses stops or holds its partition at that record, never the worker; a
full producer queue keeps the rest of the batch for the next round; a failed producer is
replaced. A refusal of the target that retrying cannot cure (an ACL, a record the topic cannot
take) stops its remote topic or partition, the others go on (`permanent.py`).
"""

from __future__ import annotations

import logging
import os
import re
import threading
import time
from abc import ABC, abstractmethod
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from kafka_mirror.api.worker_config import WorkerConfig
from kafka_mirror.kafka.client import leave_group
from kafka_mirror.kafka.formats import offset_syncs_topic
from kafka_mirror.kafka.schemas import SchemaRound, SchemaSync
from kafka_mirror.worker.acl_sync import AclSync
from kafka_mirror.worker.batches import BatchSender
from kafka_mirror.worker.clients import ClientErrors, Clients, ClientsFactory
from kafka_mirror.worker.config_file import ConfigFile
from kafka_mirror.worker.flows import DeliveryWatch
from kafka_mirror.worker.linger import LINGER_SETTINGS, LingerSwitch
from kafka_mirror.worker.membership import (
    ABSENT_SESSIONS,
    MembershipWatch,
    RebalanceCallback,
    Sighting,
    ignoring_replaced,
    sight,
)
from kafka_mirror.worker.metrics import LoopWatchdog, WorkerMetrics
from kafka_mirror.worker.partitions import TARGET_PROBE_SECONDS, Partitions
from kafka_mirror.worker.periodic import OffLoop, Periodic
from kafka_mirror.worker.resume_points import assign_at_resume_points
from kafka_mirror.worker.retention import RetentionLosses
from kafka_mirror.worker.sync_writer import OffsetSyncWriter
from kafka_mirror.worker.tasks import CheckpointTask, send_heartbeat
from kafka_mirror.worker.topic_sync import TopicObservation, TopicSync

log = logging.getLogger(__name__)

BATCH_SIZE = 5000
POLL_SECONDS = 0.1
BACKLOG_WAIT_SECONDS = 0.05  # for the producer's queue to drain before the batch's rest
DELIVERY_CHECK_SECONDS = 5.0
# How soon a record waiting for its schema (spec.schemaRegistry) has it copied; a round with no
# record waiting makes no call.
SCHEMA_ROUND_SECONDS = 1.0
PRODUCER_STALL_SECONDS = 60.0  # records waiting, none acknowledged, the target answering
SHUTDOWN_FLUSH_SECONDS = 20.0  # within Kubernetes' default 30 s grace period
# librdkafka names the partition in its gapless-guarantee failure: "… for <topic> [<n>] …".
FAILED_PARTITION = re.compile(r" for (\S+) \[(\d+)\]")

_REBALANCING = {KafkaError.REBALANCE_IN_PROGRESS, KafkaError.ILLEGAL_GENERATION}


class WorkerFailed(RuntimeError):
    """The worker cannot go on (its source producer failed, a rewind was refused); it stops
    after committing what the target acknowledged, and its pod's restart resumes from there."""


class MirrorWorker(ABC):
    def __init__(
        self, config_path: Path, metrics: WorkerMetrics, clients: ClientsFactory = Clients
    ) -> None:
        self.config_file = ConfigFile(config_path)
        self.config: WorkerConfig = self.config_file.config
        self.metrics = metrics
        self.watchdog = LoopWatchdog()
        self.stopping = threading.Event()
        self.closing = False
        self.failure: str | None = None
        self.producer_failure: str | None = None
        self.reachable = {"source": False, "target": False}
        self.subscribed: list[str] = []
        config = self.config
        errors = ClientErrors(config, metrics, self._set_reachable, self._client_failed)
        self.clients = clients(config, errors.callback, self._committed)
        syncs_topic = offset_syncs_topic(
            config.source.alias, config.target.alias, config.offset_syncs.location
        )
        self.sync_writer = OffsetSyncWriter(syncs_topic, metrics)
        self.checkpoint_task = CheckpointTask(config, self.clients, syncs_topic, metrics)
        self.topics = TopicSync(
            self.clients,
            metrics,
            self._set_reachable,
            (syncs_topic, self.checkpoint_task.topic),
            config.mirror,
            config.source.alias,
        )
        self.schemas = (
            None
            if config.schema_registry is None
            else SchemaSync(config.schema_registry, os.environ)
        )
        self.partitions = Partitions(
            self.clients,
            self.topics,
            config.source.alias,
            config.offset_syncs.max_lag,
            self.sync_writer.queue,
            metrics,
            self._fail,
            self.schemas,
        )
        self.sender = BatchSender(
            self.clients,
            self.partitions,
            self.topics,
            config.target.alias if config.topic_naming.policy == "identity" else None,
            self._consume_event,
            self._producer_failed,
        )
        self.delivery_watch = DeliveryWatch(PRODUCER_STALL_SECONDS)
        self.linger = (
            None
            if any(key in config.target.config for key in LINGER_SETTINGS)
            else LingerSwitch(self.clients, self.partitions.flows.values, self._producer_failed)
        )
        self.admin_thread = ThreadPoolExecutor(1, thread_name_prefix="admin")
        self.losses = RetentionLosses(metrics)
        session = self.clients.group_session_seconds()
        self.membership = MembershipWatch(ABSENT_SESSIONS * session)
        self.tasks = [
            Periodic("commit", config.commit_interval_seconds, self._commit),
            Periodic("config", config.refresh_topics_interval_seconds, self._reload_config),
            OffLoop(
                "topics",
                config.refresh_topics_interval_seconds,
                lambda: self.topics.observe(self.config),
                self._topics_observed,
                self.admin_thread,
            ),
            OffLoop(
                "configs",
                config.topic_config_sync.interval_seconds,
                lambda: self.topics.sync_configs(self.config),
                self.topics.max_record_bytes.update,
                self.admin_thread,
            ),
            OffLoop(
                "checkpoints",
                config.checkpoints.interval_seconds,
                self._checkpoint,
                lambda _: None,
                self.admin_thread,
            ),
            OffLoop(
                "membership",
                session,
                lambda: sight(self.clients, config.consumer_group) if self.subscribed else None,
                self._membership_sighted,
                self.admin_thread,
            ),
            Periodic("heartbeats", config.heartbeats.interval_seconds, self._heartbeat),
            Periodic("deliveries", DELIVERY_CHECK_SECONDS, self._check_deliveries),
        ]
        # A thread of its own: with thousands of bindings a round takes seconds, which the
        # topics and checkpoints on the admin thread must not wait for.
        self.acl_thread = ThreadPoolExecutor(1, thread_name_prefix="acls")
        # Under identity naming both ways, a binding each side copied from the other would come
        # back after its revocation: not synced there (docs/runbook-dr.md).
        if config.acl_sync.enabled and config.topic_naming.policy != "identity":
            acls = AclSync(
                self.clients,
                metrics,
                config.mirror,
                config.groups_checkpointed(),
                config.acl_sync.renamed(),
                applications=config.acl_sync.move_applications,
            )
            self.tasks.append(
                OffLoop(
                    "acls",
                    config.acl_sync.interval_seconds,
                    lambda: (
                        acls.sync(dict(self.topics.plan.mirrored)) if self._syncs_acls() else None
                    ),
                    lambda _: None,
                    self.acl_thread,
                )
            )

        # Its own thread too: a registry that does not answer must not hold the topics round.
        self.schema_thread = ThreadPoolExecutor(1, thread_name_prefix="schemas")
        if self.schemas is not None:
            schemas = self.schemas
            self.tasks.append(
                OffLoop(
                    "schemas",
                    SCHEMA_ROUND_SECONDS,
                    lambda: schemas.gather(dict(self.topics.plan.mirrored)),
                    self._schemas_copied,
                    self.schema_thread,
                )
            )

    def _client_failed(self, cluster: str, message: str) -> None:
        """An idempotent producer could no longer keep records in order."""
        if cluster == "target":
            self._producer_failed(message)
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
                    took = task.run_if_due(now, self._task_failed)
                    if took is not None:
                        self.metrics.task_seconds.labels(task.name).observe(took)
                if self.producer_failure is not None:
                    self._replace_producer()
                if self.partitions.backlog:
                    batch, self.partitions.backlog = self.partitions.backlog, []
                    self.sender.send(batch)
                elif self.subscribed:
                    self.sender.send(self._next_batch())
                else:
                    self.stopping.wait(POLL_SECONDS)
                self._serve_reports(BACKLOG_WAIT_SECONDS if self.partitions.backlog else 0)
                self.sync_writer.publish(self.clients.syncs_producer)
        finally:
            # Whatever ended the loop: commit only what the target acknowledged.
            self._barrier(None, SHUTDOWN_FLUSH_SECONDS)
            self.closing = True
            # Its admin calls must end before the clients close under them.
            self.admin_thread.shutdown(wait=True, cancel_futures=True)
            self.acl_thread.shutdown(wait=True, cancel_futures=True)
            self.schema_thread.shutdown(wait=True, cancel_futures=True)
            self.clients.close()
            self.checkpoint_task.close()
        if self.failure:
            raise WorkerFailed(self.failure)

    def _next_batch(self) -> list[Message]:
        """What the consumer holds, up to BATCH_SIZE; else wait for the first record to arrive.
        The producer's linger follows the backlog (`linger.py`).

        (`consume` with a timeout waits the whole timeout for a full batch: at low rates that
        would add its timeout to every record's latency.)
        """
        batch = self.clients.consumer.consume(num_messages=BATCH_SIZE, timeout=0)
        if not batch:
            first = self.clients.consumer.poll(POLL_SECONDS)
            batch = [] if first is None else [first]
        if self.linger is not None:
            self.linger.after_batch(len(batch) == BATCH_SIZE)
        return batch

    def _serve_reports(self, timeout: float) -> None:
        """Serve the producers' delivery reports; a producer that fails here is replaced."""
        try:
            self.clients.producer.poll(timeout)
        # librdkafka's fatal error surfaces as an exception from poll, and as a SystemError
        # from the next callback that runs while it is pending.
        except (KafkaException, SystemError) as error:
            self._producer_failed(str(error))
        self.partitions.rewind_refused()
        if self.clients.syncs_producer is not self.clients.producer:
            self.clients.syncs_producer.poll(0)

    def _task_failed(self, name: str, error: Exception) -> None:
        self.metrics.errors.labels(name).inc()
        log.error("%s failed (will retry): %s", name, str(error) or type(error).__name__)

    def _fail(self, reason: str) -> None:
        if self.failure is None:
            log.error("stopping: %s", reason)
            self.failure = reason

    def _consume_event(self, message: Message, error: KafkaError) -> None:
        if error.code() == KafkaError._AUTO_OFFSET_RESET:
            truncated = self.losses.reset(self.clients.consumer, message, error.str())
            if truncated is not None:
                # Records before what the flow handled come again: a new flow takes them.
                self.partitions.forget([TopicPartition(*truncated)])
            return
        if error.code() != KafkaError._PARTITION_EOF:
            self.metrics.errors.labels("consume").inc()
            log.warning("consuming from the source: %s", error.str())
            return
        self.partitions.reached_end(message)

    def _producer_failed(self, reason: str) -> None:
        """Note why the producer failed; the loop replaces it, then goes on. librdkafka names
        the refused partition once, in its error callback; the "Fatal error" that produce() and
        flush() raise after it must not take that place."""
        if self.producer_failure is None or FAILED_PARTITION.search(reason):
            self.producer_failure = reason

    # --- the delivery guarantee's part ---------------------------------------------------

    @abstractmethod
    def _replace_producer(self) -> None:
        """Give up on the failed producer; what it held is copied again."""

    @abstractmethod
    def _commit(self) -> None:
        """Due every commit interval."""

    @abstractmethod
    def _barrier(self, partitions: list[TopicPartition] | None, timeout: float) -> None:
        """Commit what the target acknowledged of `partitions` (all when None) before they are
        given up, waiting up to `timeout` for the rest."""

    @abstractmethod
    def _subscribe(self, topics: list[str]) -> None:
        """Mirror these topics, and only these (none: give every partition up)."""

    @abstractmethod
    def _on_assign(self, consumer: Consumer, partitions: list[TopicPartition]) -> None: ...

    @abstractmethod
    def _on_revoke(self, consumer: Consumer, partitions: list[TopicPartition]) -> None: ...

    @abstractmethod
    def _on_lost(self, consumer: Consumer, partitions: list[TopicPartition]) -> None: ...

    # --- progress -------------------------------------------------------------------------

    def _committed(self, error: KafkaError | None, partitions: list[TopicPartition]) -> None:
        if error is not None and error.code() not in _REBALANCING:
            self.metrics.errors.labels("commit").inc()
            log.warning("committing offsets (will retry): %s", error.str())

    def _update_lag(self, positions: list[TopicPartition]) -> None:
        for tp in positions:
            _low, high = self.clients.consumer.get_watermark_offsets(tp, cached=True) or (0, -1)
            if high >= 0:
                self.metrics.lag.labels(tp.topic, str(tp.partition)).set(max(high - tp.offset, 0))

    def _rebalance_callbacks(self) -> dict[str, RebalanceCallback]:
        return ignoring_replaced(
            self.clients,
            on_assign=self._on_assign,
            on_revoke=self._on_revoke,
            on_lost=self._on_lost,
        )

    def _assign_at(self, committed: list[TopicPartition]) -> None:
        """Assign the source partitions at their commits (or after their last copies), with
        the losses their commits counted."""
        self.losses.restore(committed)
        assign_at_resume_points(
            self.clients.consumer,
            committed,
            self.clients.target_settings,
            self.config.source.alias,
            self.topics.plan.mirrored,
            self.topics.source_ids,
        )

    # --- periodic tasks -------------------------------------------------------------------

    def _reload_config(self) -> None:
        if self.config_file.reread():
            self.stop()  # a clean exit: the pod's restart applies it with new clients
        self.config = self.config_file.config

    def _topics_observed(self, seen: TopicObservation) -> None:
        ready = self.topics.internal_topics_ready
        plan = self.topics.apply(seen)
        if not ready and self.topics.internal_topics_ready:
            self.checkpoint_task.load_emitted()
        self._subscribe(sorted(plan.mirrored))
        self.partitions.resume_due()

    def _schemas_copied(self, found: SchemaRound) -> None:
        assert self.schemas is not None
        self.partitions.schemas_copied(self.schemas.apply(found), found.refused)
        self.metrics.schemas_copied.set(sum(len(ids) for ids in self.schemas.ids.values()))
        self.metrics.schemas_waiting.labels("refused").set(len(self.schemas.refused))
        self.metrics.schemas_waiting.labels("pending").set(len(self.schemas.wanted))
        self.metrics.schema_registry_reachable.set(0 if found.unavailable else 1)
        if found.unavailable:
            log.warning("schemas wait: %s", found.unavailable)

    def _membership_sighted(self, sighting: Sighting | None) -> None:
        absent = sighting is not None and bool(self.subscribed) and sighting.absent
        if self.membership.lost(absent, time.monotonic()):
            self._renew_group_consumer()

    def _renew_group_consumer(self) -> None:
        """The group lost this worker's consumer for good (`membership.py`): what it still held
        is lost (another worker may own it), and a new consumer joins in its place."""
        log.warning(
            "group %s has gone %.0fs without this worker's consumer: replacing the consumer",
            self.config.consumer_group,
            self.membership.patience,
        )
        self.metrics.errors.labels("consumer replaced").inc()
        old = self.clients.group_consumer
        held = old.assignment()
        if held:
            self._on_lost(old, held)
        self.clients.renew_group_consumer()
        topics, self.subscribed = self.subscribed, []
        self._subscribe(topics)
        # Leaving may wait on the group that lost it; the loop goes on meanwhile.
        threading.Thread(
            target=leave_group, args=(old,), name="replaced-consumer", daemon=True
        ).start()

    def _checkpoint(self) -> None:
        """Off the loop: the assignment is librdkafka's (thread-safe), the plan a reference
        the loop replaces whole."""
        if self.config.checkpoints.enabled and self.topics.internal_topics_ready:
            assigned = self.clients.consumer.assignment() if self.subscribed else []
            self.checkpoint_task.run(assigned, self.topics.plan.mirrored)

    def _syncs_acls(self) -> bool:
        """One member of the workers' group syncs the ACLs (replicas racing could leave a
        binding unrecorded): the one mirroring partition 0 of the first topic, which a
        rebalance hands over with that partition."""
        mirrored = self.topics.plan.mirrored
        if not mirrored or not self.subscribed:
            return False
        first = min(mirrored)
        return any(
            p.topic == first and p.partition == 0 for p in self.clients.consumer.assignment()
        )

    def _check_deliveries(self) -> None:
        flows = self.partitions.flows.values()
        waiting = [flow.acknowledged for flow in flows if not flow.settled()]
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
        self.metrics.errors.labels("deliveries stalled").inc()
        self.producer_failure = (
            f"the target acknowledged nothing for {self.delivery_watch.patience:.0f}s "
            "although it answers"
        )

    def _heartbeat(self) -> None:
        if self.config.heartbeats.enabled and self.topics.internal_topics_ready:
            send_heartbeat(self.config, self.clients)
