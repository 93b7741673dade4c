"""The settings a KafkaMirror may write into the clients it configures: closed lists of keys.

Whoever may write a KafkaMirror must gain nothing by it, so its free-form settings maps
(`spec.*.config` for librdkafka, `spec.audit.spark.conf` for Spark) take only keys known to be
safe: performance and tuning. Everything else is the operator's (connection, security, delivery
guarantees) or could run code, reach another host or change what is read and written
(`plugin.library.paths`, `interceptor.*`, `spark.jars.packages`, `test.mock.num.brokers`,
`isolation.level`, `group.instance.id`, …). The models check these lists and the CRDs carry the
same lists as CEL rules, so the API server refuses the rest at admission, naming the key.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

# librdkafka settings that only tune how fast and in what sizes records move; none of them can
# change where the clients connect, who they are, what they read or what a delivery means
# (docs/reliability.md). The worker's own tuning defaults give way to them; its guarantees and
# the connection never do.
CLIENT_CONFIG_KEYS = (
    # Both clients: sockets, reconnects and metadata.
    "client.rack",
    "socket.timeout.ms",
    "socket.send.buffer.bytes",
    "socket.receive.buffer.bytes",
    "socket.keepalive.enable",
    "socket.nagle.disable",
    "socket.connection.setup.timeout.ms",
    "connections.max.idle.ms",
    "reconnect.backoff.ms",
    "reconnect.backoff.max.ms",
    "retry.backoff.ms",
    "retry.backoff.max.ms",
    "metadata.max.age.ms",
    "topic.metadata.refresh.fast.interval.ms",
    "broker.address.family",
    "receive.message.max.bytes",
    "request.timeout.ms",
    # The consumer: fetch sizes and waits, its local queue, group liveness timeouts (a worker
    # that leaves the group has committed only what the target acknowledged).
    "fetch.wait.max.ms",
    "fetch.min.bytes",
    "fetch.max.bytes",
    "max.partition.fetch.bytes",
    "fetch.message.max.bytes",
    "fetch.error.backoff.ms",
    "fetch.queue.backoff.ms",
    "queued.min.messages",
    "queued.max.messages.kbytes",
    "session.timeout.ms",
    "heartbeat.interval.ms",
    "max.poll.interval.ms",
    "coordinator.query.interval.ms",
    "check.crcs",
    # The producer: batching, its local queue and compression.
    "linger.ms",
    "queue.buffering.max.ms",
    "batch.size",
    "batch.num.messages",
    "queue.buffering.max.messages",
    "queue.buffering.max.kbytes",
    "compression.type",
    "compression.codec",
    "compression.level",
)

# Spark settings that size and time the audit's job. Jars, packages, class names, plugins,
# listeners, Java options, event logs and `spark.kubernetes.*` (an image, a service account) are
# not among them: each would run code of the writer's choosing beside the credentials, or send
# data elsewhere.
SPARK_CONF_KEYS = (
    "spark.driver.memory",
    "spark.driver.cores",
    "spark.driver.maxResultSize",
    "spark.executor.memory",
    "spark.executor.memoryOverhead",
    "spark.executor.cores",
    "spark.executor.instances",
    "spark.cores.max",
    "spark.default.parallelism",
    "spark.sql.shuffle.partitions",
    "spark.sql.adaptive.enabled",
    "spark.sql.adaptive.coalescePartitions.enabled",
    "spark.memory.fraction",
    "spark.memory.storageFraction",
    "spark.network.timeout",
    "spark.executor.heartbeatInterval",
    "spark.task.maxFailures",
)


@dataclass(frozen=True)
class KeyAllowList:
    """A closed list of keys for one settings map, as a check and as the CRD's CEL rule."""

    field: str  # the map's field name, as the messages call it
    what: str  # what the keys are, for the messages
    keys: tuple[str, ...]
    otherwise: str  # where whatever is not listed comes from

    def allows(self, key: str) -> bool:
        return key in self.keys

    @property
    def message(self) -> str:
        return (
            f"{self.field} may set only these {self.what}: {', '.join(self.keys)}; {self.otherwise}"
        )

    @property
    def _listed_cel(self) -> str:
        return "k in [" + ", ".join(f"'{key}'" for key in self.keys) + "]"

    @property
    def rule(self) -> str:
        return f"self.all(k, {self._listed_cel})"

    @property
    def message_expression(self) -> str:
        # Names the first refused key (joining them all exceeds the server's cost budget).
        return (
            f"{json.dumps(self.message + '; refused: ')} + self.filter(k, !({self._listed_cel}))[0]"
        )

    def check(self, settings: dict[str, str]) -> dict[str, str]:
        """`settings`, or a ValueError naming every key not on the list."""
        refused = sorted(key for key in settings if not self.allows(key))
        if refused:
            raise ValueError(f"{self.message}; refused: {', '.join(refused)}")
        return settings


CLIENT_CONFIG = KeyAllowList(
    "config",
    "librdkafka tuning settings",
    CLIENT_CONFIG_KEYS,
    "connection, security and delivery settings are the operator's (use the tls and sasl "
    "sections with Secret references for credentials)",
)
SPARK_CONF = KeyAllowList(
    "conf",
    "Spark tuning settings",
    SPARK_CONF_KEYS,
    "the audit's jars, classes, Java options and cluster settings are the operator's",
)
