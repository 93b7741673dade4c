"""What a promote, failover or return reads and writes in Kafka: the `Cluster` the phases in
operations.py see on either side of the mirror, and that cluster reached with confluent-kafka's
clients. The phases decide; this only asks Kafka."""

from __future__ import annotations

import time
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cached_property
from typing import Any, Protocol

from confluent_kafka import IsolationLevel, KafkaError, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, OffsetSpec

from kafka_mirror.api.operations import Rpo
from kafka_mirror.api.status import KafkaMirrorStatus
from kafka_mirror.controller.rpo import rpo_on_target
from kafka_mirror.kafka.acl_grants import Grant, GrantRecords
from kafka_mirror.kafka.client import ADMIN_TIMEOUT, Position, reader
from kafka_mirror.kafka.coordinator import GroupCoordinator
from kafka_mirror.kafka.formats import Checkpoint
from kafka_mirror.kafka.groups import (
    CheckpointKey,
    Committed,
    commit_to_idle_group,
    committed_offsets,
    read_checkpoints,
)
from kafka_mirror.kafka.reverse import original_positions
from kafka_mirror.topics import NameFilter


@dataclass(frozen=True)
class OpenTransactions:
    """A partition's records past what a read_committed reader reaches, and when the oldest
    open transaction among them wrote its first record (None: not read in time)."""

    records: int
    since: datetime | None = None


class Cluster(Protocol):
    """One of the mirror's clusters, as an operation uses it: the source's groups and what their
    positions in copies stand for, the target's checkpoints and groups. Each call may raise
    `KafkaException`."""

    def group_offsets(self, groups: NameFilter) -> dict[str, dict[Position, int]]:
        """The committed offsets of each group here whose name `groups` selects."""
        ...

    def original_positions(
        self, positions: dict[Position, int], alias: str, originals: dict[str, str]
    ) -> dict[Position, int]:
        """For a group's positions in the remote topics here (`originals` maps each to its
        original on `alias`), where it resumes in the originals."""
        ...

    def read_checkpoints(self, topic: str, mirror: str) -> dict[CheckpointKey, Checkpoint]:
        """The newest checkpoint `mirror` wrote of each (group, topic, partition) in checkpoints
        topic `topic`."""
        ...

    def commit_exactly(self, group: str, offsets: dict[Position, int]) -> Committed:
        """Commit `offsets` to `group` as they are, backwards too, unless it has members here."""
        ...

    def committed_offsets(self, group: str) -> dict[Position, int]:
        """What `group` holds here."""
        ...

    def rpo_on_target(self, status: KafkaMirrorStatus, source_alias: str) -> Rpo:
        """The RPO checked against the copies here (the workers stopped)."""
        ...

    def in_open_transactions(self, topics: list[str]) -> dict[Position, OpenTransactions]:
        """Per partition of `topics`, the records past what a read_committed reader reaches
        (an open transaction's, and what was written after it began); none where nothing is."""
        ...

    def recorded_grants(self, owner: str) -> set[Grant]:
        """The bindings (or the list) `owner` holds here, by its records (kafka/acl_grants.py)."""
        ...

    def grant(self, owner: str, grants: set[Grant]) -> set[Grant]:
        """Create those of `grants` this cluster lacks, recorded as `owner`'s: what it created.
        Raises AclsRefused (no authorizer, or no right to change ACLs)."""
        ...

    def end_offsets(self, topics: list[str]) -> dict[Position, int]:
        """Each partition's end (its high watermark) of those of `topics` that exist."""
        ...

    def records_written(self, since: dict[Position, int]) -> dict[str, int]:
        """The data records (transaction markers are none) past `since` on those partitions,
        per topic that has any; what cannot be read in time counts as written."""
        ...

    def revoke(self, owner: str, grants: set[Grant]) -> None:
        """Delete `grants`, which `owner` made here. Raises AclsRefused."""
        ...


class ConfluentCluster:
    """A cluster reached from its client settings: one admin client for all calls but those to
    the groups' coordinators, which go through `GroupCoordinator`."""

    def __init__(self, settings: dict[str, Any], name: str) -> None:
        self._settings, self.name = settings, name  # name: source or target
        self._groups = GroupCoordinator(settings)

    @cached_property
    def _admin(self) -> AdminClient:
        return AdminClient(self._settings)

    @cached_property
    def _grants(self) -> GrantRecords:
        return GrantRecords(self._settings, self._admin, Producer(self._settings), self.name)

    def recorded_grants(self, owner: str) -> set[Grant]:
        return self._grants.read(owner)

    def grant(self, owner: str, grants: set[Grant]) -> set[Grant]:
        return self._grants.grant(owner, grants)

    def revoke(self, owner: str, grants: set[Grant]) -> None:
        self._grants.revoke(owner, grants)

    def group_offsets(self, groups: NameFilter) -> dict[str, dict[Position, int]]:
        listing = self._admin.list_consumer_groups(request_timeout=ADMIN_TIMEOUT).result(
            timeout=ADMIN_TIMEOUT
        )
        return {
            g.group_id: committed_offsets(self._groups, g.group_id)
            for g in listing.valid
            if groups.matches(g.group_id)
        }

    def original_positions(
        self, positions: dict[Position, int], alias: str, originals: dict[str, str]
    ) -> dict[Position, int]:
        return original_positions(self._settings, positions, alias, originals)

    def read_checkpoints(self, topic: str, mirror: str) -> dict[CheckpointKey, Checkpoint]:
        return read_checkpoints(self._settings, topic, mirror)

    def commit_exactly(self, group: str, offsets: dict[Position, int]) -> Committed:
        return commit_to_idle_group(self._groups, group, offsets, exact=True)

    def committed_offsets(self, group: str) -> dict[Position, int]:
        return committed_offsets(self._groups, group)

    def rpo_on_target(self, status: KafkaMirrorStatus, source_alias: str) -> Rpo:
        return rpo_on_target(status, self._settings, source_alias)

    def _ends(self, topics: list[str], isolation: IsolationLevel) -> dict[Position, int]:
        metadata = self._admin.list_topics(timeout=ADMIN_TIMEOUT).topics
        asked = [
            TopicPartition(t, p) for t in topics if t in metadata for p in metadata[t].partitions
        ]
        futures = self._admin.list_offsets(
            {tp: OffsetSpec.latest() for tp in asked},  # type: ignore[no-untyped-call]
            isolation_level=isolation,
            request_timeout=ADMIN_TIMEOUT,
        )
        return {
            (tp.topic, tp.partition): f.result(timeout=ADMIN_TIMEOUT).offset
            for tp, f in futures.items()
        }

    def end_offsets(self, topics: list[str]) -> dict[Position, int]:
        return self._ends(topics, IsolationLevel.READ_UNCOMMITTED)

    def records_written(self, since: dict[Position, int]) -> dict[str, int]:
        ends = self.end_offsets(sorted({t for t, _ in since}))
        moved = {k: (since.get(k, 0), end) for k, end in ends.items() if end > since.get(k, 0)}
        if not moved:
            return {}
        counted: dict[Position, int] = {}
        consumer = reader(
            self._settings,
            "kafka-mirror-operator-fence",
            **{"isolation.level": "read_uncommitted"},  # an open transaction's records too
        )
        try:
            consumer.assign([TopicPartition(t, p, start) for (t, p), (start, _) in moved.items()])
            deadline = time.monotonic() + ADMIN_TIMEOUT
            while moved and time.monotonic() < deadline:
                for message in consumer.consume(num_messages=1000, timeout=0.05):
                    key = (message.topic() or "", message.partition() or 0)
                    error = message.error()
                    if key not in moved:
                        continue
                    if error is not None and error.code() == KafkaError._PARTITION_EOF:
                        del moved[key]  # read past the end, markers and all
                    elif error is None and (message.offset() or 0) < moved[key][1]:
                        counted[key] = counted.get(key, 0) + 1
        finally:
            consumer.close()
        for key, (start, end) in moved.items():  # not read to the end in time: all counted
            counted[key] = end - start
        by_topic: dict[str, int] = {}
        for (topic, _), records in counted.items():
            by_topic[topic] = by_topic.get(topic, 0) + records
        return by_topic

    def in_open_transactions(self, topics: list[str]) -> dict[Position, OpenTransactions]:
        high = self._ends(topics, IsolationLevel.READ_UNCOMMITTED)
        stable = self._ends(topics, IsolationLevel.READ_COMMITTED)
        pending = {key: stable[key] for key in high if high[key] > stable[key]}
        opened = self._written_at(pending) if pending else {}
        return {key: OpenTransactions(high[key] - stable[key], opened.get(key)) for key in pending}

    def _written_at(self, offsets: dict[Position, int]) -> dict[Position, datetime]:
        """When the record at each of `offsets` was written (the first record past the last
        stable offset is the oldest open transaction's first), read uncommitted."""
        consumer = reader(
            self._settings,
            "kafka-mirror-operator-transactions",
            **{"isolation.level": "read_uncommitted"},
        )
        found: dict[Position, datetime] = {}
        try:
            consumer.assign([TopicPartition(t, p, o) for (t, p), o in offsets.items()])
            deadline = time.monotonic() + ADMIN_TIMEOUT
            while len(found) < len(offsets) and time.monotonic() < deadline:
                for message in consumer.consume(num_messages=len(offsets), timeout=1):
                    key = (message.topic() or "", message.partition() or 0)
                    if message.error() is None and key in offsets and key not in found:
                        written = message.timestamp()[1] / 1000
                        found[key] = datetime.fromtimestamp(written, UTC)
        finally:
            consumer.close()
        return found
