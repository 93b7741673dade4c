"""Under identity naming, the records of which target topics each mirror created
(`owners_topic` on the target), and the rule both the workers and the operator apply: a
mirror writes only into a topic recorded as its own with the ID the topic has now, one it
recorded just before creating it, or one its spec adopts (worker/topic_owners.py says why)."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

from kafka_mirror.api.status import SkippedTopic
from kafka_mirror.kafka.tail import read_to_end
from kafka_mirror.topics import NameFilter, TopicPlan


def owners_topic(source_alias: str) -> str:
    """Per source alias, as the checkpoints topic: mirrors of teams given aliases of their own
    get topics of their own, which Kafka ACLs can keep apart."""
    return f"kafka-mirror-topics.{source_alias}.internal"


# The record's value before the topic has an ID (never empty: a record without a value is none).
ABOUT_TO_CREATE = "creating"
NOT_CREATED = "-"  # the creation failed: a topic of that name made later is not the mirror's


def owners_key(mirror: str, topic: str) -> bytes:
    return json.dumps([mirror, topic]).encode()


def owned_by(records: list[tuple[bytes, bytes]], mirror: str) -> dict[str, str]:
    """The topics the records say `mirror` made: remote topic → its ID in hex or
    ABOUT_TO_CREATE (the last record of each wins)."""
    owned: dict[str, str] = {}
    for key, value in records:
        try:
            writer, topic = json.loads(key)
            recorded = value.decode()
        except (ValueError, TypeError, RecursionError):
            continue  # not a record of ours (another version's, or written by hand)
        if writer == mirror and isinstance(topic, str):
            owned[topic] = recorded
    return {topic: v for topic, v in owned.items() if v != NOT_CREATED}


def is_owned(recorded: str | None, topic_id: bytes | None) -> bool:
    if recorded is None:
        return False
    # A cluster that gives no topic IDs: by name only.
    return recorded == ABOUT_TO_CREATE or topic_id is None or recorded == topic_id.hex()


def foreign_topics(
    existing: set[str], ids: dict[str, bytes | None], owned: dict[str, str], adopt: NameFilter
) -> set[str]:
    """Of the remote topics that exist (with their IDs, where read: one whose ID was not read is
    not known to be the mirror's), those the mirror may not write into."""
    return {
        topic
        for topic in existing
        if not adopt.matches(topic)
        and (topic not in ids or not is_owned(owned.get(topic), ids[topic]))
    }


def foreign_reason(remote: str) -> str:
    return (
        f"{remote} exists on the target and this mirror did not create it: under identity "
        "naming it writes only into its own topics and those topicNaming.adopt names"
    )


def without_foreign(
    plan: TopicPlan,
    target_topics: set[str],
    target_settings: dict[str, Any],
    topic_ids: Callable[[list[str]], dict[str, bytes | None]],
    mirror: str,
    source_alias: str,
    adopt: NameFilter,
) -> TopicPlan:
    """The plan of an identity-naming mirror as its workers have it: the topics whose remote
    topic exists (among `target_topics`) and is not the mirror's are skipped, with the reason.
    Raises ClusterUnavailable when the target cannot be read."""
    existing = sorted(
        r for r in plan.mirrored.values() if r in target_topics and not adopt.matches(r)
    )
    if not existing:
        return plan
    owned = owned_by(read_to_end(target_settings, owners_topic(source_alias)), mirror)
    foreign = foreign_topics(set(existing), topic_ids(existing), owned, adopt)
    skipped = [
        SkippedTopic(name=topic, reason=foreign_reason(remote))
        for topic, remote in plan.mirrored.items()
        if remote in foreign
    ]
    mirrored = {t: r for t, r in plan.mirrored.items() if r not in foreign}
    return TopicPlan(mirrored, plan.skipped + skipped)
