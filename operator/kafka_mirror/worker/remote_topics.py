"""Remote topics on the target follow their source topics: created with the same partition
count and topic configuration, grown when the source grows, configs copied on an interval.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable

from confluent_kafka import KafkaError
from confluent_kafka.admin import (
    AdminClient,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    NewTopic,
)

from kafka_mirror.kafka.admin import topic_configs, wait_all

log = logging.getLogger(__name__)

# MirrorMaker 2's DefaultConfigPropertyFilter: settings that belong to the target cluster.
EXCLUDED_CONFIGS = frozenset(
    {
        "follower.replication.throttled.replicas",
        "leader.replication.throttled.replicas",
        "message.timestamp.difference.max.ms",
        "message.timestamp.type",
        "unclean.leader.election.enable",
        "min.insync.replicas",
    }
)


def source_topic_configs(
    admin: AdminClient, topics: Iterable[str], extra_excludes: frozenset[str]
) -> dict[str, dict[str, str]]:
    """Each topic's own (non-default) settings that a remote topic should copy."""
    return {
        topic: {
            name: entry.value
            for name, entry in entries.items()
            if entry.source == ConfigSource.DYNAMIC_TOPIC_CONFIG.value
            and entry.value is not None
            and name not in EXCLUDED_CONFIGS
            and name not in extra_excludes
        }
        for topic, entries in topic_configs(admin, topics).items()
    }


def create_or_grow(
    target: AdminClient,
    wanted: dict[str, int],
    existing: dict[str, int],
    configs: dict[str, dict[str, str]],
) -> list[str]:
    """Create missing remote topics and add partitions where the source has more.

    `wanted` maps remote topic → source partition count; `configs` remote topic → settings.
    Returns the remote topics that could not be created or grown.
    """
    to_create = [
        NewTopic(
            remote, num_partitions=count, replication_factor=-1, config=configs.get(remote, {})
        )
        for remote, count in wanted.items()
        if remote not in existing
    ]
    to_grow = [
        NewPartitions(remote, count)
        for remote, count in wanted.items()
        if remote in existing and existing[remote] < count
    ]
    failed: list[str] = []
    if to_create:
        log.info("creating remote topics: %s", ", ".join(t.topic for t in to_create))
        failed += wait_all(
            target.create_topics(to_create),
            "creating remote topic",
            tolerate=(KafkaError.TOPIC_ALREADY_EXISTS,),
        )
    if to_grow:
        log.info("growing remote topics: %s", ", ".join(p.topic for p in to_grow))
        # Another worker may have grown it first ("already has N partitions").
        failed += wait_all(
            target.create_partitions(to_grow),
            "adding partitions to",
            tolerate=(KafkaError.INVALID_PARTITIONS,),
        )
    return failed


def copy_configs(target: AdminClient, configs: dict[str, dict[str, str]]) -> None:
    """Set the source's topic settings on the remote topics (incrementally, never deleting)."""
    resources = [
        ConfigResource(
            ConfigResource.Type.TOPIC,
            remote,
            incremental_configs=[
                ConfigEntry(name, value, incremental_operation=AlterConfigOpType.SET)
                for name, value in settings.items()
            ],
        )
        for remote, settings in configs.items()
        if settings
    ]
    if resources:
        wait_all(target.incremental_alter_configs(resources), "copying configs to")


def max_message_bytes(admin: AdminClient, topics: Iterable[str]) -> dict[str, int]:
    """Each topic's `max.message.bytes`: the largest record batch its brokers accept."""
    limits = {}
    for topic, entries in topic_configs(admin, topics).items():
        entry = entries.get("max.message.bytes")
        if entry is not None and entry.value is not None:
            limits[topic] = int(entry.value)
    return limits
