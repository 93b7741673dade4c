"""Offset syncs and their translation, with MirrorMaker 2's rules.

`SyncEmitter` decides, per source partition, when a mirrored record's (upstream, downstream)
offset pair must be published as an offset sync. `OffsetSyncStore` keeps a bounded history of
published syncs and translates a consumer group's upstream position to a downstream one that
never skips a record.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

from kafka_mirror.kafka.formats import OffsetSync


@dataclass
class SyncEmitter:
    """MirrorMaker 2's emission rule for one partition (MirrorSourceTask.PartitionState)."""

    max_lag: int
    last_sync_downstream: int = -1
    previous_upstream: int = -1
    previous_downstream: int = -1

    def update(self, upstream: int, downstream: int) -> bool:
        """Record an acknowledged record; True when its offsets must be published now.

        The worker reports a sample of its records (every record would give MirrorMaker 2's
        exact behaviour). A sync is due on the first report, when translation would otherwise
        lag `max_lag` records behind, when the offsets moved by different distances since the
        previous report (upstream gaps from compaction or transaction markers, a re-created
        topic) and when the downstream topic went backwards (truncation).
        """
        due = (
            self.last_sync_downstream == -1
            # Translation lands one past the last sync, hence the +1.
            or downstream - (self.last_sync_downstream + 1) >= self.max_lag
            or upstream - self.previous_upstream != downstream - self.previous_downstream
            or downstream < self.previous_downstream
        )
        if due:
            self.last_sync_downstream = downstream
        self.previous_upstream, self.previous_downstream = upstream, downstream
        return due


@dataclass
class _PartitionSyncs:
    upstream: list[int] = field(default_factory=list)
    downstream: list[int] = field(default_factory=list)


class OffsetSyncStore:
    """Published offset syncs per source partition, bounded in memory.

    The newest `recent` syncs are kept as they are; older ones are halved each time the history
    overflows, so coverage reaches far back with exponentially growing gaps (as MirrorMaker 2's
    store does). A sync whose upstream offset is at or below a kept one means the upstream offsets
    restarted (a re-created topic): the syncs it contradicts are dropped.
    """

    def __init__(self, capacity: int = 64, recent: int = 32) -> None:
        self.capacity, self.recent = capacity, recent
        self._partitions: dict[tuple[str, int], _PartitionSyncs] = {}

    def add(self, sync: OffsetSync) -> None:
        syncs = self._partitions.setdefault((sync.topic, sync.partition), _PartitionSyncs())
        cut = bisect.bisect_left(syncs.upstream, sync.upstream_offset)
        del syncs.upstream[cut:], syncs.downstream[cut:]
        syncs.upstream.append(sync.upstream_offset)
        syncs.downstream.append(sync.downstream_offset)
        if len(syncs.upstream) > self.capacity:
            split = len(syncs.upstream) - self.recent
            syncs.upstream[:split] = syncs.upstream[:split][::2]
            syncs.downstream[:split] = syncs.downstream[:split][::2]

    def translate(self, topic: str, partition: int, upstream_offset: int) -> int | None:
        """The downstream offset a consumer at `upstream_offset` resumes from, or None.

        With the newest sync (u, d) at or before the position g: d when g == u, else d + 1.
        Records after u may have been dropped upstream (compaction), so claiming more than one
        step past d could skip one. None when no sync is old enough to translate safely.
        """
        syncs = self._partitions.get((topic, partition))
        if syncs is None:
            return None
        index = bisect.bisect_right(syncs.upstream, upstream_offset) - 1
        if index < 0:
            return None
        step = 0 if syncs.upstream[index] == upstream_offset else 1
        return syncs.downstream[index] + step

    def history_size(self, topic: str, partition: int) -> int:
        syncs = self._partitions.get((topic, partition))
        return len(syncs.upstream) if syncs else 0
