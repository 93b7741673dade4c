"""Exact translation over a remote partition held in memory: the first copy at or past a group's
position, never a skipped record, never worse than MirrorMaker 2's rule (docs/translation.md)."""

from __future__ import annotations

from dataclasses import dataclass, field

from hypothesis import given
from hypothesis import strategies as st

from kafka_mirror.worker.translation import Seen, Translation, translate, translate_from_start

SCAN = 150  # offsetSyncs.maxLag 100 and the slack


@dataclass
class Partition:
    """A remote partition: (target offset, source offset or None when not ours), in order."""

    records: list[tuple[int, int | None]]
    low: int = 0
    reads_allowed: int = 1_000  # each read after these times out (returns nothing)
    records_read: int = 0
    reads: list[int] = field(default_factory=list)

    @classmethod
    def of(cls, sources: list[int | None], low: int = 0) -> Partition:
        return cls([(t, s) for t, s in enumerate(sources) if t >= low], low)

    def bounds(self) -> tuple[int, int] | None:
        high = self.records[-1][0] + 1 if self.records else self.low
        return self.low, high

    def read(self, start: int, limit: int) -> list[Seen]:
        self.reads.append(start)
        if len(self.reads) > self.reads_allowed:
            return []
        seen = [Seen(t, s) for t, s in self.records if t >= start][:limit]
        self.records_read += len(seen)
        return seen

    def copies(self) -> dict[int, list[int]]:
        found: dict[int, list[int]] = {}
        for t, s in self.records:
            if s is not None:
                found.setdefault(s, []).append(t)
        return found


def test_exact_at_the_first_copy_at_or_past_the_position() -> None:
    target = Partition.of(list(range(1000)))
    assert translate(target, (100, 100), 100, SCAN) == Translation(100, "exact")
    assert translate(target, (100, 100), 150, SCAN) == Translation(150, "exact")
    # MirrorMaker 2 would say 101: 49 records read again after a failover.
    assert translate(target, (100, 100), 999, SCAN) == Translation(999, "exact")


def test_upstream_gaps_land_on_the_next_record_that_exists() -> None:
    # Source offsets 0, 10, 20, …: compaction or transaction markers between them.
    target = Partition.of([10 * n for n in range(100)])
    assert translate(target, (0, 0), 15, SCAN) == Translation(2, "exact")


def test_a_far_sync_is_bridged_by_probes_with_a_short_scan() -> None:
    target = Partition.of(list(range(1_000_000)))
    assert translate(target, (0, 0), 654_321, SCAN) == Translation(654_321, "exact")
    assert target.records_read <= SCAN + 30 and len(target.reads) <= 30


def test_probes_bisect_when_upstream_gaps_make_the_guess_overshoot() -> None:
    # Every other source offset is missing: the position's copy is at half the distance.
    target = Partition.of([2 * n for n in range(500_000)])
    assert translate(target, (0, 0), 600_001, SCAN) == Translation(300_001, "exact")
    assert target.records_read <= SCAN + 30


def test_a_position_not_mirrored_yet_translates_to_the_end() -> None:
    target = Partition.of(list(range(300)))
    assert translate(target, (250, 250), 400, SCAN) == Translation(300, "end")


def test_another_clusters_records_are_passed_over() -> None:
    target = Partition.of([0, None, 1, None, None, 2, 3])
    assert translate(target, (0, 0), 2, SCAN) == Translation(5, "exact")


def test_a_target_that_contradicts_the_sync_gets_mirrormaker_2s_rule() -> None:
    target = Partition.of([0, 1, 7, 8, 9])  # the sync says 2 is at 2
    assert translate(target, (2, 2), 8, SCAN) == Translation(3, "sync")
    assert translate(Partition.of([0, 1, None, 3]), (2, 2), 3, SCAN) == Translation(3, "sync")


def test_a_read_timing_out_gets_mirrormaker_2s_rule_or_what_was_read() -> None:
    target = Partition.of(list(range(1000)))
    target.reads_allowed = 0
    assert translate(target, (100, 100), 150, SCAN) == Translation(101, "sync")
    # The scan from the anchor times out (its record at the sync was read): still safe.
    target = Partition.of(list(range(1000)))
    target.reads_allowed = 1
    assert translate(target, (100, 100), 150, SCAN) == Translation(101, "partial")


def test_records_deleted_by_retention_start_the_search_at_the_log_start() -> None:
    target = Partition.of(list(range(1000)), low=500)
    assert translate(target, (100, 100), 600, SCAN) == Translation(600, "exact")
    # The group's own records are gone too: the first one still there.
    assert translate(target, (100, 100), 200, SCAN) == Translation(500, "exact")


def test_a_sync_past_the_end_of_the_target_gets_mirrormaker_2s_rule() -> None:
    # The remote topic was re-created: its offsets restarted below the sync's.
    assert translate(Partition.of([0, 1, 2]), (500, 900), 600, SCAN) == Translation(901, "sync")


def test_a_position_older_than_every_sync_is_read_from_the_log_start() -> None:
    # The worker reports a sample of its records: the first sync can be past a group at 0.
    target = Partition.of(list(range(100_000)))
    assert translate_from_start(target, 0, SCAN) == Translation(0, "exact")
    assert translate_from_start(target, 4_321, SCAN) == Translation(4_321, "exact")
    assert target.records_read <= SCAN + 30
    retained = Partition.of(list(range(1000)), low=600)
    assert translate_from_start(retained, 10, SCAN) == Translation(600, "exact")
    # Nothing there (an empty partition, or all of it deleted): whatever comes next is new.
    assert translate_from_start(Partition.of([]), 0, SCAN) == Translation(0, "end")
    assert translate_from_start(Partition([], low=700), 10, SCAN) == Translation(700, "end")
    retained.reads_allowed = 0
    assert translate_from_start(retained, 10, SCAN) is None  # no answer in time


def test_a_resent_run_after_the_position_keeps_the_first_copy() -> None:
    # A worker mirrored 0..59, was killed, its successor resumed at 40 (its last commit).
    target = Partition.of([*range(60), *range(40, 100)])
    result = translate(target, (0, 0), 50, SCAN)
    assert result == Translation(50, "exact")
    # Everything at or past 50 is read after a failover: 50..59 twice, nothing skipped.
    assert {s for t, s in target.records if t >= result.offset and s is not None} >= set(
        range(50, 100)
    )


# --- the property -----------------------------------------------------------------------------


@st.composite
def mirrored(draw: st.DrawFn) -> tuple[list[int], Partition]:
    """Source offsets and the remote partition our worker could have written for them.

    The worker writes runs: each run copies consecutive source records in order; the next run
    (a restarted or rebalanced worker resuming at its group's commit, a new producer resuming at
    the last acknowledged record) starts at or before one past where this one stopped. Other
    clusters' records may sit in between; compaction and retention remove records.
    """
    steps = draw(st.lists(st.integers(1, 3), min_size=1, max_size=300))
    source = [sum(steps[: i + 1]) for i in range(len(steps))]
    last = len(source) - 1
    written: list[int | None] = []
    start = 0
    for run in range(draw(st.integers(1, 8)), 0, -1):
        # The run stops after source[end]; the last one reaches the end of the source.
        end = last if run == 1 else draw(st.integers(start, last))
        for index in range(start, end + 1):
            if draw(st.integers(0, 20)) == 20:
                written.append(None)  # another cluster's record
            written.append(source[index])
        start = draw(st.integers(max(0, end - 30), min(end + 1, last)))
    # Compaction keeps the last record of a key: of a source record's copies (which share its
    # key) it removes the earlier ones, or all of them when a later source record has its key.
    last_copy = {s: t for t, s in enumerate(written) if s is not None}
    superseded = draw(st.sets(st.sampled_from(source), max_size=len(source) // 10))
    holes = {
        t
        for t, s in enumerate(written)
        if s is not None and (s in superseded or (t != last_copy[s] and draw(st.booleans())))
    }
    low = draw(st.integers(0, len(written) // 4)) if draw(st.booleans()) else 0  # retention
    partition = Partition(
        [(t, s) for t, s in enumerate(written) if t >= low and t not in holes], low
    )
    return source, partition


@given(mirrored(), st.data())
def test_translation_never_skips_and_never_falls_behind_mirrormaker_2(
    mirror: tuple[list[int], Partition], data: st.DataObject
) -> None:
    """From any sync (a record of ours and its target offset) at or before a position, or from
    the log start: every source record at or past the position that the target holds has a copy
    at or after the answer, and the answer is at or after MirrorMaker 2's."""
    source, target = mirror
    ours = [(t, s) for t, s in target.records if s is not None]
    if not ours:
        return
    downstream, upstream = data.draw(st.sampled_from(ours))
    position = data.draw(st.integers(upstream, source[-1] + 2))
    scan = data.draw(st.sampled_from([1, 5, SCAN]))
    if data.draw(st.booleans()):
        result = translate(target, (upstream, downstream), position, scan)
        assert result.offset >= (downstream if position == upstream else downstream + 1)
    else:  # no sync at or before the position: from the log start
        found = translate_from_start(target, position, scan)
        assert found is not None
        result = found
    for offset, targets in target.copies().items():
        if offset >= position:
            assert max(targets) >= result.offset, (offset, targets, result)


@given(st.lists(st.integers(1, 3), min_size=1, max_size=500), st.data())
def test_translation_without_resends_rereads_nothing(steps: list[int], data: st.DataObject) -> None:
    """One run, nothing removed: the answer is the copy of the first record at or past the
    position (or the end when there is none yet), whatever sync it starts from."""
    source = [sum(steps[: i + 1]) for i in range(len(steps))]
    target = Partition.of(list(source))
    downstream = data.draw(st.integers(0, len(source) - 1))
    position = data.draw(st.integers(source[downstream], source[-1] + 2))
    result = translate(target, (source[downstream], downstream), position, SCAN)
    first = next((t for t, s in enumerate(source) if s >= position), len(source))
    assert result.offset == first
    assert result.how == ("exact" if first < len(source) else "end")
