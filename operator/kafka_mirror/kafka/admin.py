"""The admin reads every part makes of a cluster's topics (partition counts, topic IDs,
configs), and the internal topics MirrorMaker 2's way: one timeout, failures logged or raised
as each caller needs."""

from __future__ import annotations

import logging
import struct
from collections.abc import Iterable, Mapping
from concurrent.futures import Future
from typing import Any, cast

from confluent_kafka import KafkaError, KafkaException, TopicCollection, Uuid
from confluent_kafka.admin import AdminClient, ConfigResource, NewTopic

from kafka_mirror.kafka.client import ADMIN_TIMEOUT

log = logging.getLogger(__name__)

COMPACTED_INTERNAL = {"cleanup.policy": "compact"}


def partition_counts(admin: AdminClient, topics: Iterable[str] | None = None) -> dict[str, int]:
    """Partition count of every topic (or of the given ones that exist)."""
    metadata = admin.list_topics(timeout=ADMIN_TIMEOUT)
    wanted = None if topics is None else set(topics)
    return {
        name: len(topic.partitions)
        for name, topic in metadata.topics.items()
        if topic.error is None and (wanted is None or name in wanted)
    }


def topic_ids(admin: AdminClient, topics: Iterable[str]) -> dict[str, bytes | None]:
    """Each topic's ID, its incarnation (a topic deleted and created again gets a new one), as
    the 16 bytes Kafka writes; None where the cluster gives topics no ID (before Kafka 2.8). A
    topic the cluster does not know (deleted since it was listed, or created so recently that
    the broker asked has not heard of it yet) is left out; any other failure raises."""
    names = sorted(set(topics))
    if not names:
        return {}
    futures = admin.describe_topics(TopicCollection(names), request_timeout=ADMIN_TIMEOUT)
    ids: dict[str, bytes | None] = {}
    for name, future in futures.items():
        try:
            ids[name] = id_bytes(future.result(timeout=ADMIN_TIMEOUT).topic_id)
        except KafkaException as error:
            if error.args[0].code() != KafkaError.UNKNOWN_TOPIC_OR_PART:
                raise
    return ids


def id_bytes(topic_id: Uuid) -> bytes | None:
    """A topic ID as Kafka serializes it (most significant INT64 first); None for Kafka's
    zero ID, which means none."""
    halves = cast(Any, topic_id)  # confluent-kafka's stub (2.16) lacks its two accessors
    high, low = halves.get_most_significant_bits(), halves.get_least_significant_bits()
    return struct.pack(">qq", high, low) if high or low else None


def wait_all(
    futures: Mapping[Any, Future[Any]], what: str, tolerate: tuple[int, ...] = ()
) -> list[str]:
    """Wait for admin futures; return the names that failed (logged), ignoring `tolerate`."""
    failed = []
    for name, future in futures.items():
        try:
            future.result(timeout=ADMIN_TIMEOUT)
        except KafkaException as error:
            code = error.args[0].code() if error.args else None
            if code in tolerate:
                continue
            log.error("%s %s failed: %s", what, name, error)
            failed.append(str(getattr(name, "name", name)))
    return failed


def ensure_internal_topic(admin: AdminClient, name: str) -> bool:
    """A 1-partition compacted topic, as MirrorMaker 2 creates its internal topics: whether it
    is there now (a failure is logged)."""
    futures = admin.create_topics(
        [NewTopic(name, num_partitions=1, replication_factor=-1, config=COMPACTED_INTERNAL)]
    )
    return not wait_all(
        futures, "creating internal topic", tolerate=(KafkaError.TOPIC_ALREADY_EXISTS,)
    )


def topic_configs(admin: AdminClient, topics: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Each topic's configuration entries (name → ConfigEntry); a topic that cannot be read
    is left out, with a warning."""
    resources = [ConfigResource(ConfigResource.Type.TOPIC, t) for t in topics]
    if not resources:
        return {}
    result = {}
    for resource, future in admin.describe_configs(resources).items():
        try:
            result[resource.name] = future.result(timeout=ADMIN_TIMEOUT)
        except KafkaException as error:
            log.warning("cannot read configs of topic %s: %s", resource.name, error)
    return result
