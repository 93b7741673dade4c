"""Consumer-group checkpoints, as MirrorMaker 2's MirrorCheckpointTask writes them.

Each pass reads the source groups' committed offsets for the partitions this worker mirrors,
translates them (from the offset syncs, then exactly from the provenance headers on the target:
`translation.py`), writes the checkpoints that changed as MirrorMaker 2 would to
`<source>.checkpoints.internal` on the target (forward, or backward only when the group itself
was rewound on the source or the remote partition was created again), and (when enabled)
commits them to the same group on the target while that group has no active members there;
that commit never goes backwards.
"""

from __future__ import annotations

import logging
import time

from confluent_kafka import (
    KafkaException,
    Producer,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient, OffsetSpec

from kafka_mirror.kafka.client import ADMIN_TIMEOUT
from kafka_mirror.kafka.coordinator import GroupCoordinator
from kafka_mirror.kafka.formats import WRITER_HEADER, Checkpoint, OffsetSync
from kafka_mirror.kafka.groups import commit_to_idle_group
from kafka_mirror.kafka.tail import TopicTail
from kafka_mirror.topics import NameFilter
from kafka_mirror.worker.metrics import WorkerMetrics
from kafka_mirror.worker.offsets import OffsetSyncStore
from kafka_mirror.worker.translation import ProvenanceReader

log = logging.getLogger(__name__)

CheckpointKey = tuple[str, str, int]  # group, downstream topic, partition


def is_news(previous: Checkpoint | None, upstream: int, downstream: int) -> bool:
    """Whether a translated position is emitted: MirrorMaker 2's rule (checkpointIsMoreRecent).

    Forward on the target, or after the group was rewound on the source (a reset to an earlier
    offset there is the group's own decision: its checkpoint follows it back). Otherwise not: a
    less precise translation of the same or a later position (the offset syncs thinned out) must
    not move a checkpoint backwards, and an unchanged one is not written again.
    """
    if previous is None:
        return True
    if upstream < previous.upstream_offset or downstream > previous.downstream_offset:
        return True
    # The group moved on over records that have no copy (aborted, markers, cycles, an empty
    # partition's end): the same target position, named for its new upstream offset.
    return upstream > previous.upstream_offset and downstream == previous.downstream_offset


class Checkpointer:
    """Checkpoints and group-offset sync for the partitions this worker owns."""

    def __init__(
        self,
        source_admin: AdminClient,
        target_admin: AdminClient,
        source_coordinator: GroupCoordinator,
        target_coordinator: GroupCoordinator,
        target_producer: Producer,
        offset_syncs: TopicTail,
        checkpoints_topic: str,
        groups: NameFilter,
        sync_group_offsets: bool,
        metrics: WorkerMetrics,
        target_reader: ProvenanceReader | None = None,
        writer: str = "",
    ) -> None:
        self.source_admin, self.target_admin = source_admin, target_admin
        self.source_coordinator, self.target_coordinator = source_coordinator, target_coordinator
        self.producer = target_producer
        self.offset_syncs, self.checkpoints_topic = offset_syncs, checkpoints_topic
        self.groups, self.sync_group_offsets = groups, sync_group_offsets
        self.metrics = metrics
        self.target_reader = target_reader
        self.headers: list[tuple[str, str | bytes | None]] = [(WRITER_HEADER, writer.encode())]
        if target_reader is None:
            log.warning("no reader on the target: checkpoints use MirrorMaker 2's translation only")
        self.store = OffsetSyncStore()
        self.emitted: dict[CheckpointKey, Checkpoint] = {}
        self.passes = 0

    def load_emitted(self, checkpoints: TopicTail, timeout: float = 10.0) -> None:
        """Load what earlier workers wrote, so a restart never emits a checkpoint backwards."""
        deadline = time.monotonic() + timeout
        while True:
            for key, value in checkpoints.read_new(timeout=max(deadline - time.monotonic(), 0)):
                c = Checkpoint.decode(key, value)
                self.emitted[(c.group, c.topic, c.partition)] = c
            # A topic just created can be unknown to the client for a moment: read again.
            if checkpoints.caught_up or time.monotonic() >= deadline:
                break
            time.sleep(0.2)
        # Read only in part: keep only the newest sync of each partition while the syncs are
        # first read, as MirrorMaker 2 does, so that translations start no older than what
        # earlier workers may have emitted.
        self.store.latest_only_while_loading = not checkpoints.caught_up
        if not checkpoints.caught_up:
            log.warning("could not read the earlier checkpoints to their end")

    def close(self) -> None:
        if self.target_reader is not None:
            self.target_reader.close()

    def run_once(self, owned: dict[tuple[str, int], str]) -> None:
        """One pass over the groups. `owned` maps (source topic, partition) → remote topic."""
        for key, value in self.offset_syncs.read_new():
            sync = OffsetSync.decode(key, value)
            if self.store.add(sync):
                self._forget(owned.get((sync.topic, sync.partition)), sync.partition)
        if self.offset_syncs.caught_up:
            self.store.mark_read_to_end()  # until then, the store translates nothing
        if not owned or not self.store.read_to_end:
            return
        started = time.monotonic()
        topics = {topic for topic, _ in owned}
        listing = self.source_admin.list_consumer_groups(request_timeout=ADMIN_TIMEOUT).result(
            timeout=ADMIN_TIMEOUT
        )
        for error in listing.errors:
            log.warning("listing the source's consumer groups: %s", error)
        groups = [g.group_id for g in listing.valid if self.groups.matches(g.group_id)]
        # Each pass starts one group further on: when the pass's time for reading the target
        # runs out, it is not always the same groups that go without an exact translation.
        self.passes += 1
        turn = self.passes % len(groups) if groups else 0
        try:
            emitted = sum(
                self._emit(group, owned, topics) for group in groups[turn:] + groups[:turn]
            )
        finally:
            if self.target_reader is not None:
                self.target_reader.release()
        if emitted:
            remaining = self.producer.flush(ADMIN_TIMEOUT)
            if remaining:
                raise KafkaException(f"{remaining} checkpoints not acknowledged by the target")
            self.metrics.checkpoint_latency.observe(time.monotonic() - started)
        if self.sync_group_offsets:
            for group in groups:
                self._sync_group(group, owned)

    def _emit(self, group: str, owned: dict[tuple[str, int], str], topics: set[str]) -> int:
        checkpoints = self._checkpoints_for(group, owned, topics)
        for checkpoint in checkpoints:
            self.producer.produce(
                self.checkpoints_topic,
                key=checkpoint.key(),
                value=checkpoint.value(),
                headers=self.headers,
            )
            self.emitted[(checkpoint.group, checkpoint.topic, checkpoint.partition)] = checkpoint
        if checkpoints:
            self.metrics.checkpoints.labels(group).inc(len(checkpoints))
        return len(checkpoints)

    def _checkpoints_for(
        self, group: str, owned: dict[tuple[str, int], str], topics: set[str]
    ) -> list[Checkpoint]:
        checkpoints, behind = [], []
        for (topic, partition), found in self.source_coordinator.committed(group).items():
            remote = owned.get((topic, partition)) if topic in topics else None
            if remote is None:
                continue
            downstream = self._translate(topic, remote, partition, found.offset)
            if downstream is None:
                continue
            checkpoint = Checkpoint(
                group, remote, partition, found.offset, downstream, found.metadata
            )
            previous = self.emitted.get((group, remote, partition))
            if is_news(previous, found.offset, downstream):
                checkpoints.append(checkpoint)
            elif previous is not None and downstream < previous.downstream_offset:
                behind.append((checkpoint, previous.downstream_offset))
        if behind:
            # A checkpoint past the end of its remote partition names copies that are gone (the
            # remote topic was deleted and created again, or truncated): a failover would land
            # out of range. The new translation replaces it, backwards.
            ends = self._remote_ends({(c.topic, c.partition) for c, _ in behind})
            checkpoints += [
                c for c, before in behind if before > ends.get((c.topic, c.partition), before)
            ]
        return checkpoints

    def _forget(self, remote: str | None, partition: int) -> None:
        """The offsets of `remote[partition]` started over (it was created again, or truncated):
        the checkpoints emitted for it name copies that are gone, so the next translation of
        each group's position replaces them, backwards too."""
        self.emitted = {
            key: c
            for key, c in self.emitted.items()
            if (c.topic, c.partition) != (remote, partition)
        }
        if self.target_reader is not None:
            self.target_reader.forget()

    def _remote_ends(self, partitions: set[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The end offsets of remote partitions on the target; those it cannot tell are left
        out (their checkpoints stay as they are until a later pass)."""
        latest = OffsetSpec.latest()  # type: ignore[no-untyped-call]
        asked = {TopicPartition(t, p): latest for t, p in sorted(partitions)}
        futures = self.target_admin.list_offsets(asked, request_timeout=ADMIN_TIMEOUT)
        ends = {}
        for tp, future in futures.items():
            try:
                ends[(tp.topic, tp.partition)] = future.result(timeout=ADMIN_TIMEOUT).offset
            except KafkaException as error:
                log.info("end of %s[%d] on the target: %s", tp.topic, tp.partition, error)
        return ends

    def _translate(self, topic: str, remote: str, partition: int, position: int) -> int | None:
        if self.target_reader is None:
            return self._mm2_rule(topic, partition, position)
        # No sync at or before the position (MirrorMaker 2 emits nothing then: an empty or idle
        # partition, a position past records never copied) is no obstacle to reading the target
        # from its log start, or to naming its end when it holds nothing.
        sync = self.store.sync_for(topic, partition, position)
        read = self.target_reader.translate(remote, partition, sync, position)
        if read is None:  # the target cannot tell now: MirrorMaker 2's rule, where it has one
            return self._mm2_rule(topic, partition, position)
        self.metrics.checkpoint_translations.labels(read.how).inc()
        return read.offset

    def _mm2_rule(self, topic: str, partition: int, position: int) -> int | None:
        translation = self.store.translate(topic, partition, position)
        if translation is not None:
            self.metrics.checkpoint_translations.labels("sync").inc()
        return translation

    def _sync_group(self, group: str, owned: dict[tuple[str, int], str]) -> None:
        """Commit the checkpointed offsets to `group` on the target, if it is idle there."""
        remotes = set(owned.values())
        wanted = {
            (topic, partition): checkpoint.downstream_offset
            for (g, topic, partition), checkpoint in self.emitted.items()
            if g == group and topic in remotes
        }
        if wanted:
            committed = commit_to_idle_group(self.target_coordinator, group, wanted)
            self.metrics.group_offsets_synced.labels(group).inc(len(committed.offsets))
