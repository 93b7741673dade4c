"""Consumer-group checkpoints, as MirrorMaker 2's MirrorCheckpointTask writes them.

Each pass reads the source groups' committed offsets for the partitions this worker mirrors,
translates them with the offset syncs, writes the checkpoints that moved forward to
`<source>.checkpoints.internal` on the target, and (when enabled) commits them to the same group
on the target while that group has no active members there; never backwards.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

from confluent_kafka import (
    OFFSET_BEGINNING,
    Consumer,
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from kafka_mirror.kafka.formats import Checkpoint, OffsetSync
from kafka_mirror.topics import Selection
from kafka_mirror.worker.metrics import WorkerMetrics
from kafka_mirror.worker.offsets import OffsetSyncStore
from kafka_mirror.worker.remote_topics import ADMIN_TIMEOUT

log = logging.getLogger(__name__)

CheckpointKey = tuple[str, str, int]  # group, downstream topic, partition


class TopicTail:
    """Reads a 1-partition internal topic incrementally: each call returns what is new.

    The consumer must have `enable.partition.eof` set: the end-of-partition event tells that
    everything written so far has been read.
    """

    def __init__(self, consumer: Consumer, topic: str) -> None:
        self.consumer = consumer
        self.caught_up = False
        consumer.assign([TopicPartition(topic, 0, OFFSET_BEGINNING)])

    def read_new(self, timeout: float = 5.0) -> list[tuple[bytes, bytes]]:
        records: list[tuple[bytes, bytes]] = []
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            messages = self.consumer.consume(num_messages=1000, timeout=0.1)
            if not messages and self.caught_up:
                break  # nothing written since the last end of partition
            for message in messages:
                error = message.error()
                if error is None:
                    self.caught_up = False
                    key, value = message.key(), message.value()
                    if key is not None and value is not None:
                        records.append((key, value))
                elif error.code() == KafkaError._PARTITION_EOF:
                    self.caught_up = True
                elif error.code() == KafkaError.UNKNOWN_TOPIC_OR_PART:
                    return records  # not created yet
                else:
                    raise KafkaException(error)
            if self.caught_up:
                break
        return records


@dataclass
class GroupFilter:
    selection: Selection
    own_group: str

    def wants(self, group: str) -> bool:
        return group != self.own_group and self.selection.matches(group)


class Checkpointer:
    """Checkpoints and group-offset sync for the partitions this worker owns."""

    def __init__(
        self,
        source_admin: AdminClient,
        target_admin: AdminClient,
        target_producer: Producer,
        offset_syncs: TopicTail,
        checkpoints_topic: str,
        groups: GroupFilter,
        sync_group_offsets: bool,
        metrics: WorkerMetrics,
    ) -> None:
        self.source_admin, self.target_admin = source_admin, target_admin
        self.producer = target_producer
        self.offset_syncs, self.checkpoints_topic = offset_syncs, checkpoints_topic
        self.groups, self.sync_group_offsets = groups, sync_group_offsets
        self.metrics = metrics
        self.store = OffsetSyncStore()
        self.emitted: dict[CheckpointKey, Checkpoint] = {}

    def load_emitted(self, checkpoints: TopicTail) -> None:
        """Load what earlier workers wrote, so a restart never emits a checkpoint backwards."""
        for key, value in checkpoints.read_new():
            checkpoint = Checkpoint.decode(key, value)
            self.emitted[(checkpoint.group, checkpoint.topic, checkpoint.partition)] = checkpoint

    def run_once(self, owned: dict[tuple[str, int], str]) -> None:
        """One pass over the groups. `owned` maps (source topic, partition) → remote topic."""
        for key, value in self.offset_syncs.read_new():
            self.store.add(OffsetSync.decode(key, value))
        if not owned:
            return
        started = time.monotonic()
        topics = {topic for topic, _ in owned}
        listing = self.source_admin.list_consumer_groups(request_timeout=ADMIN_TIMEOUT).result(
            timeout=ADMIN_TIMEOUT
        )
        for error in listing.errors:
            log.warning("listing the source's consumer groups: %s", error)
        groups = [g.group_id for g in listing.valid if self.groups.wants(g.group_id)]
        emitted = 0
        for group in groups:
            checkpoints = self._checkpoints_for(group, owned, topics)
            for checkpoint in checkpoints:
                self.producer.produce(
                    self.checkpoints_topic, key=checkpoint.key(), value=checkpoint.value()
                )
                self.emitted[(checkpoint.group, checkpoint.topic, checkpoint.partition)] = (
                    checkpoint
                )
            if checkpoints:
                self.metrics.checkpoints.labels(group).inc(len(checkpoints))
                emitted += len(checkpoints)
        if emitted:
            remaining = self.producer.flush(ADMIN_TIMEOUT)
            if remaining:
                raise KafkaException(f"{remaining} checkpoints not acknowledged by the target")
            self.metrics.checkpoint_latency.observe(time.monotonic() - started)
        if self.sync_group_offsets:
            for group in groups:
                self._sync_group(group, owned)

    def _checkpoints_for(
        self, group: str, owned: dict[tuple[str, int], str], topics: set[str]
    ) -> list[Checkpoint]:
        request = [ConsumerGroupTopicPartitions(group)]
        futures = self.source_admin.list_consumer_group_offsets(
            request, request_timeout=ADMIN_TIMEOUT
        )
        result = futures[group].result(timeout=ADMIN_TIMEOUT)
        checkpoints = []
        for tp in result.topic_partitions or []:
            if tp.topic not in topics or tp.offset < 0 or tp.error is not None:
                continue
            remote = owned.get((tp.topic, tp.partition))
            if remote is None:
                continue
            downstream = self.store.translate(tp.topic, tp.partition, tp.offset)
            if downstream is None:
                continue
            previous = self.emitted.get((group, remote, tp.partition))
            if previous is not None and (
                downstream < previous.downstream_offset
                or (downstream, tp.offset) == (previous.downstream_offset, previous.upstream_offset)
            ):
                continue  # never backwards, and nothing new
            checkpoints.append(
                Checkpoint(group, remote, tp.partition, tp.offset, downstream, tp.metadata or "")
            )
        return checkpoints

    def _sync_group(self, group: str, owned: dict[tuple[str, int], str]) -> None:
        """Commit the checkpointed offsets to `group` on the target, if it is idle there."""
        described = self.target_admin.describe_consumer_groups(
            [group], request_timeout=ADMIN_TIMEOUT
        )[group]
        try:
            description = described.result(timeout=ADMIN_TIMEOUT)
            if description.members or description.state not in (
                ConsumerGroupState.EMPTY,
                ConsumerGroupState.DEAD,
                ConsumerGroupState.UNKNOWN,
            ):
                return  # active on the target: its own commits win
        except KafkaException:
            pass  # the group does not exist on the target yet
        current = self._target_offsets(group)
        remotes = set(owned.values())
        updates = [
            TopicPartition(topic, partition, checkpoint.downstream_offset)
            for (g, topic, partition), checkpoint in self.emitted.items()
            if g == group
            and topic in remotes
            and checkpoint.downstream_offset > current.get((topic, partition), -1)
        ]
        if not updates:
            return
        future = self.target_admin.alter_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group, updates)]
        )[group]
        try:
            result = future.result(timeout=ADMIN_TIMEOUT)
        except KafkaException as error:
            # A member may have joined since we looked; it owns its offsets now.
            log.info("not syncing offsets of group %s on the target: %s", group, error)
            return
        refused = [tp for tp in result.topic_partitions or [] if tp.error is not None]
        for tp in refused:
            log.info(
                "group %s on the target kept %s[%d]: %s", group, tp.topic, tp.partition, tp.error
            )
        self.metrics.group_offsets_synced.labels(group).inc(len(updates) - len(refused))

    def _target_offsets(self, group: str) -> dict[tuple[str, int], int]:
        futures = self.target_admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)]
        )
        try:
            result = futures[group].result(timeout=ADMIN_TIMEOUT)
        except KafkaException:
            return {}
        return {(tp.topic, tp.partition): tp.offset for tp in result.topic_partitions or []}
