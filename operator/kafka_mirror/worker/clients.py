"""The worker's Kafka clients, their settings and their renewal.

The mirroring producer's settings are what the at-least-once argument rests on
(docs/reliability.md): idempotent with `acks=all`, librdkafka's gapless guarantee (a failure
that could leave a gap in a partition fails the whole producer instead), and no delivery
timeout (`message.timeout.ms=0`: a record waits for the target as long as it takes, so a
timeout can never drop one silently). The mirror's `config` sections cannot change them: they
take only the tuning keys of `api.allowed.CLIENT_CONFIG_KEYS`, which win over the worker's own
tuning defaults below.
"""

from __future__ import annotations

import logging
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from confluent_kafka import Consumer, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient

from kafka_mirror.api.worker_config import WorkerConfig
from kafka_mirror.kafka.client import AUTH_ERRORS, TRANSACTIONS_INIT_SECONDS, leave_group, reader
from kafka_mirror.kafka.coordinator import GroupCoordinator
from kafka_mirror.worker.metrics import WorkerMetrics

log = logging.getLogger(__name__)

ERROR_LOG_INTERVAL = 60.0  # seconds between two log lines of the same client error

ErrorCallback = Callable[[str], Callable[[KafkaError], None]]
CommitCallback = Callable[[KafkaError | None, list[TopicPartition]], None]
ClientsFactory = Callable[[WorkerConfig, ErrorCallback, CommitCallback], "Clients"]

# The largest request the producer builds: above any topic's usual max.message.bytes, below
# the brokers' socket.request.max.bytes (100 MiB by default), which would drop the connection.
PRODUCER_MAX_REQUEST_BYTES = 64 * 1024 * 1024
CLOSE_FLUSH_SECONDS = 5.0  # for checkpoints still on their way when the worker stops
DEFAULT_SESSION_MS = 45_000  # librdkafka's session.timeout.ms

MIRROR_PRODUCER_GUARANTEES: dict[str, Any] = {
    "enable.idempotence": True,
    "enable.gapless.guarantee": True,
    "acks": "all",
    "message.timeout.ms": 0,  # never time a record out
    "message.max.bytes": PRODUCER_MAX_REQUEST_BYTES,
    # A remote topic deleted under the workers is not re-created by a send (librdkafka's
    # producers ask for it by default) with the broker's defaults and a new topic ID: the
    # next topic refresh creates it as the source has it.
    "allow.auto.create.topics": False,
}
# Throughput defaults a mirror's `config` may change.
MIRROR_PRODUCER_TUNING: dict[str, Any] = {
    "linger.ms": 5,
    "batch.size": 1024 * 1024,
    "queue.buffering.max.messages": 200_000,
    "queue.buffering.max.kbytes": 256 * 1024,
}
# librdkafka's idempotent producer (2.16) sends a partition's next batch only once its previous
# one is answered, and until then its broker thread polls with a zero timeout: a whole core for
# as long as the cluster is silent (`bench/producer_stall.py`). With one request in flight per
# connection the next batch waits in the send queue, and the thread sleeps until the answer.
# No throughput lost (docs/performance.md, "What limits it"). Not a key a mirror's `config`
# may set.
ONE_REQUEST_IN_FLIGHT: dict[str, Any] = {"max.in.flight.requests.per.connection": 1}
# The offset-syncs and checkpoints producers: few records, in order, none twice.
SMALL_IDEMPOTENT_PRODUCER: dict[str, Any] = {
    "enable.idempotence": True,
    "linger.ms": 5,
    **ONE_REQUEST_IN_FLIGHT,
}
MIRROR_CONSUMER_TUNING: dict[str, Any] = {
    "fetch.max.bytes": 64 * 1024 * 1024,
    "max.partition.fetch.bytes": 8 * 1024 * 1024,
    # The prefetch: librdkafka fetches while the consumer's queue holds fewer than this many
    # records and fewer bytes than the cap. At the default 100,000 the loop waited for the next
    # fetch a quarter of the time in a drain (1.3-1.6x the records/s with 300,000 here,
    # docs/performance.md); the byte cap still bounds the memory.
    "queued.min.messages": 300_000,
    "queued.max.messages.kbytes": 256 * 1024,
}


# Exactly once: a transaction due waits for its copies, at most the queue's 16 MiB, which a
# target throttled to 0.3 MiB/s still takes within the transaction timeout (60 s).
TRANSACTIONAL_TUNING: dict[str, Any] = {
    "queue.buffering.max.kbytes": 16 * 1024,
    "transaction.timeout.ms": 60_000,
}


def mirror_producer_settings(
    target: dict[str, Any], transactional_id: str | None = None
) -> dict[str, Any]:
    """The mirroring producer's settings: the cluster's own (connection and the mirror's tuning
    `config`) over the worker's tuning defaults, and the guarantees over both."""
    transactional = (
        {}
        if transactional_id is None
        else {**TRANSACTIONAL_TUNING, "transactional.id": transactional_id}
    )
    return {
        **MIRROR_PRODUCER_TUNING,
        **ONE_REQUEST_IN_FLIGHT,
        **transactional,
        **target,
        **MIRROR_PRODUCER_GUARANTEES,
    }


class ClientErrors:
    """librdkafka's error callbacks, one per cluster: counted in the metrics, logged once a
    minute per kind (every client reports the same outage, over and over), an outage noted as
    unreachability, and a fatal error (an idempotent producer failed) handed to `on_fatal`."""

    def __init__(
        self,
        config: WorkerConfig,
        metrics: WorkerMetrics,
        set_reachable: Callable[[str, bool], None],
        on_fatal: Callable[[str, str], None],
    ) -> None:
        self.config, self.metrics = config, metrics
        self.set_reachable, self.on_fatal = set_reachable, on_fatal
        self.logged: dict[tuple[str, int], float] = {}

    def callback(self, cluster: str) -> Callable[[KafkaError], None]:
        alias = getattr(self.config, cluster).alias
        return lambda error: self.report(cluster, alias, error)

    def report(self, cluster: str, alias: str, error: KafkaError) -> None:
        code = error.code()
        if error.fatal():
            self.on_fatal(cluster, error.str())
        message, level = f"{cluster} cluster {alias}: {error.str()}", logging.WARNING
        if code in AUTH_ERRORS:
            self.metrics.errors.labels("authentication").inc()
            message = f"{cluster} cluster {alias} refused our credentials: {error.str()}"
            level = logging.ERROR
        elif code in (KafkaError._ALL_BROKERS_DOWN, KafkaError._TRANSPORT, KafkaError._RESOLVE):
            self.metrics.errors.labels("connection").inc()
            if code == KafkaError._ALL_BROKERS_DOWN:
                self.set_reachable(cluster, False)
        else:
            self.metrics.errors.labels("client").inc()
        now, kind = time.monotonic(), (cluster, code)
        if now - self.logged.get(kind, -ERROR_LOG_INTERVAL) >= ERROR_LOG_INTERVAL:
            self.logged[kind] = now
            log.log(level, "%s", message)


class Clients:
    """Admin clients of both clusters, the source consumer (the workers' group), the target
    producer, the offset-syncs producer (the target producer unless syncs live on the source),
    the checkpoints producer and the readers of the internal topics.

    Exactly once (`exactly_once.py`): the target producer is transactional, and `members` is
    the workers' group on the target, which decides who owns which partitions."""

    def __init__(
        self, config: WorkerConfig, on_error: ErrorCallback, on_commit: CommitCallback
    ) -> None:
        client_id = f"kafka-mirror-{socket.gethostname()}"
        # Nagle's algorithm holds small requests back for the peer's delayed ACK (tens of ms a
        # hop); Kafka's Java clients turn it off too. A cluster's own config may turn it on.
        defaults = {"socket.nagle.disable": True, "client.id": client_id}
        refresh_ms = int(config.refresh_topics_interval_seconds * 1000)
        source: dict[str, Any] = {**defaults, **config.source.client_config()}
        target: dict[str, Any] = {**defaults, **config.target.client_config()}
        self.source_settings, self.target_settings = source, target
        self.admin_settings: dict[str, dict[str, Any]] = {
            "source": {**source, "error_cb": on_error("source")},
            "target": {**target, "error_cb": on_error("target")},
        }
        self.source_admin = AdminClient(self.admin_settings["source"])
        self.target_admin = AdminClient(self.admin_settings["target"])
        self.source_groups = GroupCoordinator(source)
        self.target_groups = GroupCoordinator(target)
        consumer_settings: dict[str, Any] = {
            **MIRROR_CONSUMER_TUNING,
            **source,
            "group.id": config.consumer_group,
            "enable.auto.commit": False,
            # A position the source no longer holds is reported, not skipped silently:
            # the records below the log start are counted lost (`retention.py`).
            "auto.offset.reset": "error",
            "partition.assignment.strategy": "cooperative-sticky",
            # The end-of-partition event tells the loop that the offsets before it that
            # never came hold no record for it (transaction markers).
            "enable.partition.eof": True,
            # The workers read what the source's consumers read.
            "isolation.level": "read_committed",
            # Notice partitions added on the source as fast as new topics.
            "topic.metadata.refresh.interval.ms": refresh_ms,
            "error_cb": on_error("source"),
            "on_commit": on_commit,
        }
        self.consumer = Consumer(consumer_settings)
        # The settings of the consumer whose group shares the partitions out (`group_consumer`).
        self.group_settings = consumer_settings
        self.members: Consumer | None = None
        transactional_id = None
        if config.delivery == "exactlyOnce":
            # Unique per process: the group's generation, not the id, fences a former owner.
            transactional_id = config.transactional_id(f"{socket.gethostname()}.{os.getpid()}")
            self.group_settings = {
                **target,
                "group.id": config.consumer_group,
                "enable.auto.commit": False,
                "partition.assignment.strategy": "cooperative-sticky",
                # Its positions are read stable: never under a transaction still open.
                "isolation.level": "read_committed",
                # Remote partitions added (the source grew) rebalance it as soon.
                "topic.metadata.refresh.interval.ms": refresh_ms,
                "error_cb": on_error("target"),
            }
            self.members = Consumer(self.group_settings)
        self.producer_settings = mirror_producer_settings(target, transactional_id)
        self.target_errors = on_error("target")
        self.producer_generation = 0
        self.producer = self._new_producer()
        self.syncs_at_source = config.offset_syncs.location == "source"
        self.syncs_producer = (
            Producer({**source, **SMALL_IDEMPOTENT_PRODUCER, "error_cb": on_error("source")})
            if self.syncs_at_source
            else self.producer
        )
        # Checkpoints go out, and are waited for, on the checkpoint task's own thread: a producer
        # of its own, so that waiting for them never waits for the mirrored records.
        self.checkpoints_producer = Producer(
            {**target, **SMALL_IDEMPOTENT_PRODUCER, "error_cb": on_error("target")}
        )
        internal = f"{config.consumer_group}.internal"
        self.syncs_reader = reader(source if self.syncs_at_source else target, internal)
        self.checkpoints_reader = reader(target, internal)

    @property
    def syncs_admin(self) -> AdminClient:
        return self.source_admin if self.syncs_at_source else self.target_admin

    def renew_admins(self) -> None:
        """After a broker restart librdkafka's admin client (2.16) can keep timing out on
        requests that a new client has answered at once."""
        self.source_admin = AdminClient(self.admin_settings["source"])
        self.target_admin = AdminClient(self.admin_settings["target"])

    @property
    def group_consumer(self) -> Consumer:
        """The consumer whose group decides which partitions this worker copies."""
        return self.consumer if self.members is None else self.members

    @property
    def group_coordinator(self) -> GroupCoordinator:
        """The coordinators of the group consumer's cluster."""
        return self.source_groups if self.members is None else self.target_groups

    def group_session_seconds(self) -> float:
        return int(self.group_settings.get("session.timeout.ms", DEFAULT_SESSION_MS)) / 1000

    def renew_group_consumer(self) -> Consumer:
        """A new group consumer, not subscribed yet, in place of the current one, which is
        returned (to close)."""
        old = self.group_consumer
        if self.members is None:
            self.consumer = Consumer(self.group_settings)
        else:
            self.members = Consumer(self.group_settings)
        return old

    def renew_producer(self, linger_ms: int | None = None) -> Producer:
        """A new target producer in place of the current one, which is returned (to purge);
        with `linger_ms`, it and the producers after it linger that long."""
        if linger_ms is not None:
            self.producer_settings["linger.ms"] = linger_ms
        old = self.producer
        self.producer = self._new_producer()
        if self.syncs_producer is old:
            self.syncs_producer = self.producer
        return old

    def _new_producer(self) -> Producer:
        producer = Producer(self._with_error_callback(self.producer_settings))
        if "transactional.id" in self.producer_settings:
            # A target that does not answer in time raises (the current producer stays): at
            # start the process exits, and its pod's restart tries again.
            producer.init_transactions(TRANSACTIONS_INIT_SECONDS)
            producer.begin_transaction()
        return producer

    def _with_error_callback(self, settings: dict[str, Any]) -> dict[str, Any]:
        """`settings` with an error callback for the next target producer. A fatal error that
        a replaced producer reports late (its purge serves its queued events) must not replace
        its successor too: only the current producer's fatal error is handed on."""
        self.producer_generation += 1
        generation = self.producer_generation

        def report(error: KafkaError) -> None:
            if generation == self.producer_generation or not error.fatal():
                self.target_errors(error)

        return {**settings, "error_cb": report}

    def producers(self) -> list[Producer]:
        return list({id(p): p for p in (self.producer, self.syncs_producer)}.values())

    def close(self) -> None:
        """Leave the groups (serving the revocation callbacks) and close the readers."""
        if self.members is not None:
            leave_group(self.members)
            self.consumer.close()  # assigned, not subscribed: no rebalances
        else:
            leave_group(self.consumer)
        self.checkpoints_producer.flush(CLOSE_FLUSH_SECONDS)
        self.syncs_reader.close()
        self.checkpoints_reader.close()
