"""Offset syncs and their translation, with MirrorMaker 2's rules.

`SyncEmitter` decides, per source partition, when a mirrored record's (upstream, downstream)
offset pair must be published as an offset sync. `OffsetSyncStore` keeps a bounded history of
published syncs and translates a consumer group's upstream position to a downstream one that
never skips a record.
"""

from __future__ import annotations

from dataclasses import dataclass

from kafka_mirror.kafka.formats import OffsetSync

SLOTS = 64  # syncs kept per partition: one per bit of an offset, as MirrorMaker 2 keeps

Sync = tuple[int, int]  # (upstream offset, downstream offset)


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


def _close_enough(newer: Sync, older: Sync, i: int, j: int) -> bool:
    """MirrorMaker 2's bound on age: the sync in slot j (older) is at most 2^j - 2^i upstream
    offsets behind the one in slot i. Repeats of one sync always pass."""
    return newer == older or newer[0] <= older[0] + (1 << j) - (1 << i)


def _far_enough(newer: Sync, older: Sync, i: int) -> bool:
    """MirrorMaker 2's bound on spacing: a distinct sync older than slot i's is at least
    2^(i-2) upstream offsets behind it, so that the slots do not fill with near-equal syncs."""
    return newer == older or newer[0] >= older[0] + (1 << max(i - 2, 0))


def _insert(slots: list[Sync], sync: Sync) -> None:
    """Make `sync` the newest (slot 0) and repair the slots after it, MirrorMaker 2's way.

    A slot needs a new value only when the one before it changed so much that its own sync is
    now too old for it (`_close_enough` fails); from the first slot that still satisfies it, the
    older slots are left as they are (they satisfied it before, and nothing they are compared
    with changed). A slot that needs a new value takes the most recent sync the store held before
    this one that fits between its neighbours, else a repeat of its newer neighbour; walking the
    old values in order keeps as many distinct syncs as the bounds allow.
    """
    before = slots.copy()
    slots[0] = sync
    candidate = sync  # always fits the slot being repaired: a repeat of the slot before it
    cursor = 0  # the next old value that might move one slot further back
    for i in range(1, SLOTS):
        newer = slots[i - 1]
        while cursor < i:
            old = before[cursor]
            spaced = _far_enough(newer, old, i - 1)
            fits = (
                spaced
                and _close_enough(newer, old, i - 1, i)
                and (i + 1 == SLOTS or _far_enough(old, slots[i + 1], i))
            )
            if fits:
                candidate = old
            # Too close to the newer neighbour now means too close in every older slot too;
            # a repeat will be met again at the next old slot.
            useless = not spaced or (cursor + 1 < SLOTS and before[cursor + 1] == old)
            if fits or useless:
                cursor += 1
            if not useless:
                break
        if _close_enough(newer, slots[i], i - 1, i):
            return
        slots[i] = candidate


class OffsetSyncStore:
    """Published offset syncs per source partition: MirrorMaker 2's OffsetSyncStore (Kafka 3.6+).

    Per partition, 64 slots hold syncs spaced exponentially back from the newest: slot 0 is the
    newest; a distinct sync in slot j lies at most 2^j - 2^i upstream offsets behind the one in
    slot i (i < j), and at least 2^(i-2) behind it. So translation is exact near the live end
    and its error grows only in proportion to how far behind a group is, while the slot last
    written is the oldest sync kept (never dropped while syncs keep coming in order).

    A sync whose upstream offset is below the newest means the upstream offsets restarted (a
    re-created topic); one whose downstream offset is below the newest, that the remote
    partition did (deleted and created again on the target, or truncated): either way every
    sync of the partition is dropped for it, since none of them names the new offsets.

    Nothing is translated until the offset-syncs topic has been read to its end once
    (`mark_read_to_end`), so that no checkpoint comes from a half-read history; when the
    previous checkpoints could not be loaded (`latest_only_while_loading`), that first read
    keeps only each partition's newest sync, so the first checkpoints cannot fall behind ones
    an earlier worker emitted.
    """

    def __init__(self, latest_only_while_loading: bool = True) -> None:
        self.latest_only_while_loading = latest_only_while_loading
        self.read_to_end = False
        self._slots: dict[tuple[str, int], list[Sync]] = {}

    def mark_read_to_end(self) -> None:
        self.read_to_end = True

    def add(self, sync: OffsetSync) -> bool:
        """Keep `sync`; True when it started its partition's history over (see the class)."""
        new = (sync.upstream_offset, sync.downstream_offset)
        slots = self._slots.get((sync.topic, sync.partition))
        loading = not self.read_to_end and self.latest_only_while_loading
        restarted = slots is not None and (new[0] < slots[0][0] or new[1] < slots[0][1])
        if slots is None or loading or restarted:
            self._slots[(sync.topic, sync.partition)] = [new] * SLOTS
        else:
            _insert(slots, new)
        return restarted

    def sync_for(self, topic: str, partition: int, upstream_offset: int) -> Sync | None:
        """The newest kept sync at or before `upstream_offset`; None before the first full read,
        for an unknown partition, and for a position older than every kept sync (what lies
        between it and the oldest sync is unknown: compacted, or never mirrored)."""
        slots = self._slots.get((topic, partition))
        if not self.read_to_end or slots is None:
            return None
        # Newest first: the first at or before the position is the closest one.
        return next((sync for sync in slots if sync[0] <= upstream_offset), None)

    def translate(self, topic: str, partition: int, upstream_offset: int) -> int | None:
        """MirrorMaker 2's translation of a group's position, or None (see `sync_for`).

        With the newest sync (u, d) at or before the position g: d when g == u, else d + 1.
        Records after u may have been dropped upstream (compaction), so claiming more than one
        step past d could skip one.
        """
        sync = self.sync_for(topic, partition, upstream_offset)
        if sync is None:
            return None
        upstream, downstream = sync
        return downstream if upstream == upstream_offset else downstream + 1

    def slots(self, topic: str, partition: int) -> list[Sync]:
        """A partition's slots, newest first (a sync repeats over the slots it fills)."""
        return list(self._slots.get((topic, partition), []))

    def kept(self, topic: str, partition: int) -> list[Sync]:
        """The distinct syncs kept for a partition, newest first."""
        slots = self.slots(topic, partition)
        return [sync for i, sync in enumerate(slots) if i == 0 or sync != slots[i - 1]]
