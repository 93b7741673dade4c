"""Exact checkpoint translation, read from the provenance headers on the target.

MirrorMaker 2 translates a group's upstream position g with the newest offset sync (u, d) at or
before it: d when g == u, else d + 1, because it cannot see what lies after d. We can: every
record we mirror names its source offset in its provenance header. So we start where MirrorMaker
2's answer points and move forward, over records of ours from source offsets below g, to the first
record at or past g: a consumer failed over there re-reads nothing it had already processed (but
for records the mirror itself sent twice). A position older than every sync (the worker's first
sync of a partition may come some records in) is looked for from the log start instead.

Why that never skips a record (docs/translation.md has the proof, re-sends included): a record of
ours at target offset t with source offset q < g tells that every source record at or past g has
a copy after t. MirrorMaker 2's answer is safe for the same reason, and so is any offset of the
target past which a scan found only records below g. Probes (bisection over the partition) find
such records near g cheaply when the nearest sync is far behind, so the scan stays short.

Where the target cannot show it (the sync's record says something else, a read times out or
fails), the answer stays MirrorMaker 2's: never worse than its rule.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from confluent_kafka import Consumer, KafkaError, KafkaException, Message, TopicPartition

from kafka_mirror.kafka.client import reader
from kafka_mirror.kafka.formats import provenance_from
from kafka_mirror.worker.offsets import Sync

log = logging.getLogger(__name__)

# "exact": the first record at or past the position; "end": none mirrored yet, the partition's
# end; "partial": the scan stopped early (one past what it read); "sync": MirrorMaker 2's rule.
How = Literal["exact", "end", "partial", "sync"]

SCAN_SLACK = 50  # records read past offsetSyncs.maxLag before giving up on an exact answer
MAX_PROBES = 24  # bisection steps: enough to cross 2^24 records down to one scan
TRANSLATION_SECONDS = 0.3  # the time one translation may take reading the target
# The reads of one checkpoint pass, which holds up the worker's (single-threaded) loop: past
# this, the pass's other positions get MirrorMaker 2's rule, and an exact answer next pass.
PASS_SECONDS = 1.0
READ_POLL_SECONDS = 0.05
CACHE_SIZE = 10_000

# Small fetches, each answered at once: a read at a new offset must not wait behind a full queue.
READER_TUNING: dict[str, Any] = {
    "auto.offset.reset": "error",  # an offset gone (retention) is an error, not a silent jump
    "max.partition.fetch.bytes": 256 * 1024,
    "queued.min.messages": 1000,
    # Once that much is queued, fetching pauses this long (1 s by default) and a read at a new
    # offset would wait for it: measured, a tenth of the reads then took a second.
    "fetch.queue.backoff.ms": 1,
}


@dataclass(frozen=True)
class Seen:
    """One record of a remote partition: its target offset and, if it is ours, its source
    offset (None for another cluster's records and records without our header)."""

    offset: int
    source_offset: int | None


@dataclass(frozen=True)
class Translation:
    offset: int
    how: How


class PartitionView(Protocol):
    """One partition of a remote topic on the target, read on demand."""

    def bounds(self) -> tuple[int, int] | None:
        """Its first and one-past-last offsets, or None when they cannot be had in time."""

    def read(self, start: int, limit: int) -> list[Seen]:
        """Up to `limit` records from `start` (the first one may be later: compacted, deleted),
        fewer when the end, the time allowed or an error comes first."""


def translate(view: PartitionView, sync: Sync, position: int, scan: int) -> Translation:
    """The first target offset holding a copy of a source record at or past `position`, found
    from the offset sync `sync` (the newest at or before it), reading at most `scan` records in
    a row; or a safe offset before it (see the module's docstring)."""
    upstream, downstream = sync
    # MirrorMaker 2's answer: every source record at or past `position` has a copy at or after it.
    mm2 = Translation(downstream if upstream == position else downstream + 1, "sync")
    bounds = view.bounds()
    if bounds is None or downstream >= bounds[1]:
        return mm2  # no answer in time, or the sync names a record the target does not have
    low, high = bounds
    if low >= high:
        return Translation(high, "end")  # everything deleted: whatever comes next is new
    # The record at the sync, or the first one still there after it (compacted, deleted).
    first = view.read(max(downstream, low), 1)
    if not first:
        return mm2
    if first[0].offset == downstream and first[0].source_offset != upstream:
        return mm2  # the target contradicts the sync: nothing to build on but the rule
    return _forward(view, first[0], position, high, scan)


def translate_from_start(view: PartitionView, position: int, scan: int) -> Translation | None:
    """The same for a position older than every offset sync (the worker reports a sample of its
    records, so the first sync can come after a partition's first records): from the log start,
    which every record still on the target follows. None when the target cannot tell."""
    bounds = view.bounds()
    if bounds is None:
        return None
    if bounds[0] >= bounds[1]:
        return Translation(bounds[1], "end")  # nothing there: whatever comes next is new
    first = view.read(bounds[0], 1)
    return _forward(view, first[0], position, bounds[1], scan) if first else None


def _forward(view: PartitionView, record: Seen, position: int, high: int, scan: int) -> Translation:
    """From `record`, the first record at or after a safe start (see the module's docstring):
    it, or the first record of ours at or past the position after it."""
    if record.source_offset is not None and record.source_offset >= position:
        return Translation(record.offset, "exact")
    # A record of ours from a source offset below the position: copies of everything at or
    # past the position lie after it.
    anchor = record if record.source_offset is not None else None
    anchor, past = _probe(view, anchor, position, high, scan)
    begin = (anchor or record).offset + 1
    if begin >= high:
        return Translation(high, "end")
    end = min(high, past + 1) if past is not None else high
    seen = view.read(begin, min(scan, end - begin))
    for found in seen:
        if found.source_offset is not None and found.source_offset >= position:
            return Translation(found.offset, "exact")
    if seen and seen[-1].offset >= high - 1:
        return Translation(high, "end")
    # Only records below the position (or another cluster's) up to here: one past them is safe.
    return Translation(seen[-1].offset + 1 if seen else begin, "partial")


def _probe(
    view: PartitionView, anchor: Seen | None, position: int, high: int, scan: int
) -> tuple[Seen | None, int | None]:
    """Move the anchor towards the position, so that the scan after it is short.

    First jump to where the position's copy would be if nothing between the anchor and it had
    been compacted or re-sent; once a jump lands at or past the position, bisect between the
    anchor and the closest such offset (`past`). Returns the anchor and `past` (or None).
    """
    past: int | None = None
    for _ in range(MAX_PROBES):
        if anchor is None or anchor.source_offset is None:
            break
        if past is not None:
            if past - anchor.offset <= scan:
                break
            guess = (anchor.offset + past) // 2
        else:
            guess = min(anchor.offset + (position - anchor.source_offset) - 1, high - 1)
            if guess - anchor.offset <= scan:
                break
        found = view.read(guess, 1)
        if not found or found[0].source_offset is None or found[0].offset == past:
            break  # out of time, a record that is not ours (it tells nothing), no progress
        if found[0].source_offset < position:
            anchor = found[0]
        else:
            past = found[0].offset
    return anchor, past


class RemotePartition:
    """A PartitionView over a real consumer, every read within one deadline."""

    def __init__(
        self, consumer: Consumer, topic: str, partition: int, alias: str, deadline: float
    ) -> None:
        self.consumer, self.topic, self.partition = consumer, topic, partition
        self.alias, self.deadline = alias, deadline
        self.high = 0

    def bounds(self) -> tuple[int, int] | None:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            return None
        try:
            low, high = self.consumer.get_watermark_offsets(
                TopicPartition(self.topic, self.partition), timeout=remaining, cached=False
            )
        except KafkaException as error:
            log.debug("watermarks of %s[%d]: %s", self.topic, self.partition, error)
            return None
        self.high = high
        return low, high

    def read(self, start: int, limit: int) -> list[Seen]:
        self.consumer.unassign()  # drop what was fetched from the previous offset
        self.consumer.assign([TopicPartition(self.topic, self.partition, start)])
        seen: list[Seen] = []
        while len(seen) < limit and time.monotonic() < self.deadline:
            batch = self.consumer.consume(limit - len(seen), timeout=READ_POLL_SECONDS)
            for message in batch:
                error = message.error()
                if error is not None:
                    if error.code() != KafkaError._PARTITION_EOF:
                        log.debug("reading %s[%d]: %s", self.topic, self.partition, error)
                    return seen
                offset = message.offset()
                if offset is None or offset < start:
                    continue  # fetched for an earlier assignment
                seen.append(Seen(offset, self._source_offset(message)))
                if len(seen) == limit or offset >= self.high - 1:
                    return seen
        return seen

    def _source_offset(self, message: Message) -> int | None:
        provenance = provenance_from(message.headers(), self.alias, self.partition)
        return None if provenance is None else provenance.offset


class ProvenanceReader:
    """Exact translation for the Checkpointer: one consumer on the target, assigned on demand.

    `target_settings` are the target's client settings (connection and credentials);
    `source_alias` names our records' provenance; `max_lag` is offsetSyncs.maxLag, the longest
    run of records without a sync, which bounds the scan.
    """

    def __init__(self, target_settings: Mapping[str, Any], source_alias: str, max_lag: int) -> None:
        self.settings = dict(target_settings)
        self.alias, self.scan = source_alias, max_lag + SCAN_SLACK
        self._consumer: Consumer | None = None
        self._spent = 0.0  # reading, in this pass
        # Exact answers only: they stay right while the target only grows (records appended
        # later come after them); the others improve as the mirror catches up.
        self._exact: dict[tuple[str, int, Sync | None, int], int] = {}

    def forget(self) -> None:
        """Drop the exact answers: a remote partition was created again (or truncated), and
        the target no longer only grows."""
        self._exact.clear()

    def translate(
        self, remote: str, partition: int, sync: Sync | None, position: int
    ) -> Translation | None:
        """From `sync`, the newest at or before the position, or None: the position is older
        than every sync (then from the log start). None when the target cannot tell from the
        log start, or the pass has had its time."""
        key = (remote, partition, sync, position)
        if key in self._exact:
            return Translation(self._exact[key], "exact")
        if self._spent >= PASS_SECONDS:
            return None
        if self._consumer is None:
            self._consumer = reader(self.settings, "kafka-mirror.translation", **READER_TUNING)
        started = time.monotonic()
        view = RemotePartition(
            self._consumer, remote, partition, self.alias, started + TRANSLATION_SECONDS
        )
        if sync is None:
            result = translate_from_start(view, position, self.scan)
        else:
            result = translate(view, sync, position, self.scan)
        self._spent += time.monotonic() - started
        if result is not None and result.how == "exact":
            if len(self._exact) >= CACHE_SIZE:
                self._exact.clear()
            self._exact[key] = result.offset
        return result

    def release(self) -> None:
        """At the end of a pass: stop fetching, and give the next pass its time."""
        self._spent = 0.0
        if self._consumer is not None:
            self._consumer.unassign()

    def close(self) -> None:
        if self._consumer is not None:
            self._consumer.close()
            self._consumer = None
