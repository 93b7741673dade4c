"""Under identity naming, which target topics a mirror may write into: those it created or its
spec adopts, never another's.

A remote topic under identity naming has its source's name, so it may already exist on the
target as something else entirely: an application's own topic, another mirror's, a topic some
system keeps state in. Cluster Linking refuses to mirror into a topic that exists; we record
what each mirror created, in `kafka-mirror-topics.<source alias>.internal` on the target
(compacted: one record per mirror and topic, its topic ID in hex), and write only into those,
or into topics the spec adopts (`topicNaming.adopt`). The record is written before the topic is
created, with no ID yet, so a worker killed in between finds its own topic again; the ID is
added once known, so a topic deleted and re-created by someone else is no longer the mirror's.
"""

from __future__ import annotations

import logging

from kafka_mirror.api.worker_config import WorkerConfig
from kafka_mirror.kafka.admin import ensure_internal_topic
from kafka_mirror.kafka.owners import (
    ABOUT_TO_CREATE,
    NOT_CREATED,
    foreign_topics,
    owned_by,
    owners_key,
    owners_topic,
)
from kafka_mirror.kafka.tail import read_to_end, write_acknowledged
from kafka_mirror.topics import NameFilter
from kafka_mirror.worker.clients import Clients

log = logging.getLogger(__name__)

RECORD_SECONDS = 30.0


class TopicOwners:
    """One worker's knowledge of its mirror's topics on the target (`foreign`, `creating`)."""

    def __init__(self, clients: Clients, mirror: str, source_alias: str) -> None:
        self.clients, self.mirror = clients, mirror
        self.topic = owners_topic(source_alias)
        self._owned: dict[str, str] = {}  # remote topic → its ID in hex, or ABOUT_TO_CREATE
        self._read_for: frozenset[str] | None = None
        self._topic_ready = False

    def foreign(
        self, config: WorkerConfig, existing: set[str], ids: dict[str, bytes | None]
    ) -> set[str]:
        """Of the remote topics that exist (with their topic IDs, where read), those this
        mirror may not write into: not its own, and not adopted by the spec as it is now (an
        adoption is not recorded, so removing it from the spec ends it). The IDs of topics it
        just created are recorded on the way."""
        adopt = NameFilter(tuple(config.topic_naming.adopt))
        unknown = foreign_topics(existing, ids, self._owned, adopt)
        if unknown and frozenset(unknown) != self._read_for:
            self._read()  # another member of the group may have created them since
            self._read_for = frozenset(unknown)
            unknown = foreign_topics(existing, ids, self._owned, adopt)
        self._record(
            {
                topic: topic_id.hex()
                for topic, topic_id in ids.items()
                if topic_id is not None and self._owned.get(topic) == ABOUT_TO_CREATE
            }
        )
        return unknown

    def creating(self, topics: list[str]) -> None:
        """Record topics about to be created (before the request: see the module's doc)."""
        self._record({topic: ABOUT_TO_CREATE for topic in topics})

    def not_created(self, topics: set[str]) -> None:
        self._record({t: NOT_CREATED for t in topics if self._owned.get(t) == ABOUT_TO_CREATE})

    def _read(self) -> None:
        records = read_to_end(self.clients.target_settings, self.topic)
        self._owned = owned_by(records, self.mirror)

    def _record(self, topics: dict[str, str]) -> None:
        changed = {t: v for t, v in topics.items() if self._owned.get(t, NOT_CREATED) != v}
        if not changed:
            return
        if not self._topic_ready:
            ensure_internal_topic(self.clients.target_admin, self.topic)
            self._topic_ready = True
        records = [
            (owners_key(self.mirror, topic), value.encode())
            for topic, value in sorted(changed.items())
        ]
        write_acknowledged(self.clients.checkpoints_producer, self.topic, records, RECORD_SECONDS)
        self._owned.update(changed)
        self._owned = {t: v for t, v in self._owned.items() if v != NOT_CREATED}
        log.info("recorded as this mirror's on the target: %s", ", ".join(sorted(changed)))
