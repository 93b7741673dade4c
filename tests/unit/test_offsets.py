"""Offset-sync emission and translation: MirrorMaker 2's rules, never skipping a record."""

from __future__ import annotations

import bisect
import itertools

from hypothesis import given
from hypothesis import strategies as st

from kafka_mirror.kafka.formats import OffsetSync
from kafka_mirror.worker.offsets import SLOTS, OffsetSyncStore, SyncEmitter


def test_first_record_then_every_max_lag_records() -> None:
    emitter = SyncEmitter(max_lag=100)
    due = [offset for offset in range(350) if emitter.update(offset, offset)]
    assert due == [0, 101, 202, 303]


def test_upstream_gaps_and_downstream_truncation_force_a_sync() -> None:
    emitter = SyncEmitter(max_lag=100)
    assert emitter.update(0, 0)
    assert not emitter.update(1, 1)
    assert emitter.update(5, 2)  # upstream skipped 2..4 (compaction, transaction markers)
    assert not emitter.update(6, 3)
    assert emitter.update(0, 4)  # upstream went backwards (topic re-created)
    assert emitter.update(1, 0)  # downstream went backwards (truncated)


def test_sampled_reports_follow_the_same_rules() -> None:
    emitter = SyncEmitter(max_lag=100)
    assert emitter.update(0, 0)
    assert not emitter.update(40, 40)  # 1..39 went through unreported: same distance both sides
    assert emitter.update(101, 101)  # translation would lag 100 records
    assert emitter.update(160, 150)  # ten upstream offsets had no record
    assert not emitter.update(170, 160)


def loaded(*syncs: tuple[int, int]) -> OffsetSyncStore:
    """A store whose syncs topic was read to its end, then given `syncs`."""
    store = OffsetSyncStore()
    store.mark_read_to_end()
    for upstream, downstream in syncs:
        store.add(OffsetSync("t", 0, upstream, downstream))
    return store


def test_translation_is_exact_at_a_sync_and_one_past_it_otherwise() -> None:
    store = loaded((0, 10), (100, 110), (200, 205))
    assert store.translate("t", 0, 100) == 110
    assert store.translate("t", 0, 150) == 111  # never beyond what could be the next record
    assert store.translate("t", 0, 500) == 206
    assert store.translate("t", 0, 0) == 10
    assert store.translate("t", 1, 0) is None  # no syncs for that partition


def test_translation_refuses_positions_older_than_every_sync() -> None:
    store = loaded((100, 0))
    assert store.translate("t", 0, 50) is None


def test_nothing_is_translated_before_the_syncs_topic_was_read_to_its_end() -> None:
    store = OffsetSyncStore(latest_only_while_loading=False)
    store.add(OffsetSync("t", 0, 100, 200))
    assert store.translate("t", 0, 100) is None  # a half-read history could be stale
    store.mark_read_to_end()
    assert store.translate("t", 0, 100) == 200


def mm2_scenario(latest_only_while_loading: bool) -> list[int]:
    """MirrorMaker 2's own test (OffsetSyncStoreTest.testPastOffsetTranslation*): a sync every 10
    offsets, 0 to 1,000 read at start-up, then up to 10,000; the upstream offsets kept."""
    store = OffsetSyncStore(latest_only_while_loading)
    for offset in range(0, 1001, 10):
        store.add(OffsetSync("t", 0, offset, offset))
    store.mark_read_to_end()
    for offset in range(1010, 10001, 10):
        store.add(OffsetSync("t", 0, offset, offset))
    return sorted(upstream for upstream, _ in store.kept("t", 0))


def test_keeps_exactly_the_syncs_mirrormaker_2_keeps() -> None:
    # The figures MirrorMaker 2's tests assert for its store, for both ways of starting.
    assert mm2_scenario(latest_only_while_loading=True) == [
        1000, 4840, 6760, 8680, 9160, 9640, 9880, 9940, 9970, 9990, 10000,
    ]  # fmt: skip
    assert mm2_scenario(latest_only_while_loading=False) == [
        0, 3840, 7680, 8640, 9120, 9600, 9840, 9900, 9960, 9990, 10000,
    ]  # fmt: skip


def test_an_upstream_rewind_drops_every_sync() -> None:
    store = loaded(*((offset, offset) for offset in range(0, 10001, 10)))
    store.add(OffsetSync("t", 0, 1500, 11000))  # upstream restarted lower: topic re-created
    assert store.translate("t", 0, 1499) is None
    assert store.translate("t", 0, 1500) == 11000
    assert store.translate("t", 0, 2000) == 11001
    assert store.kept("t", 0) == [(1500, 11000)]


def test_a_remote_partition_created_again_drops_every_sync() -> None:
    store = loaded(*((offset, offset) for offset in range(0, 10001, 10)))
    # Deleted and created again on the target: the copies go on from downstream offset 0.
    assert store.add(OffsetSync("t", 0, 10005, 0))
    assert store.translate("t", 0, 9000) is None  # its copies are gone
    assert store.translate("t", 0, 10005) == 0
    assert store.kept("t", 0) == [(10005, 0)]
    assert not store.add(OffsetSync("t", 0, 10100, 95))


def test_never_skips_a_record_under_compaction() -> None:
    """Every upstream record at or after the group's position lies at or after the translation."""
    upstream_offsets = [0, 1, 2, 7, 8, 9, 20, 21, 40]  # gaps: compacted away upstream
    downstream = {u: d for d, u in enumerate(upstream_offsets)}
    emitter, store = SyncEmitter(max_lag=3), loaded()
    for u, d in downstream.items():
        if emitter.update(u, d):
            store.add(OffsetSync("t", 0, u, d))
    for position in range(0, 42):
        translated = store.translate("t", 0, position)
        assert translated is not None
        for u, d in downstream.items():
            if u >= position:
                assert d >= translated, (position, u)


def test_history_is_bounded_and_keeps_the_oldest_sync() -> None:
    store = loaded(*((n * 100, n * 100) for n in range(10_000)))
    assert len(store.kept("t", 0)) <= SLOTS
    assert store.translate("t", 0, 50) == 1  # the oldest sync (0, 0) is still there
    assert store.translate("t", 0, 999_900) == 999_900


# --- properties ------------------------------------------------------------------------------

# Upstream offsets of mirrored records: increasing, with the gaps compaction and transaction
# markers leave.
gaps = st.lists(
    st.one_of(st.just(1), st.integers(1, 5), st.integers(1, 5_000)), min_size=1, max_size=400
)


def offsets_from(start: int, steps: list[int]) -> list[int]:
    return list(itertools.accumulate(steps, initial=start))


@given(st.integers(0, 10**12), gaps)
def test_slots_keep_mirrormaker_2s_invariants(start: int, steps: list[int]) -> None:
    """After every sync: slot 0 is the newest; a distinct sync in slot j is at most 2^j - 2^i
    behind the one in slot i < j, and at least 2^(i-2) behind it; the last slot keeps the
    oldest sync (its invariants A to D)."""
    store = loaded()
    for k, upstream in enumerate(offsets_from(start, steps)):
        store.add(OffsetSync("t", 0, upstream, k))
        slots = [u for u, _ in store.slots("t", 0)]
        assert slots[0] == upstream and slots[-1] == start
        for (i, newer), (j, older) in itertools.combinations(enumerate(slots), 2):
            if newer != older:
                assert newer <= older + 2**j - 2**i, (i, j, slots)
                assert newer >= older + 2 ** max(i - 2, 0), (i, j, slots)


@given(
    st.integers(0, 1000),
    gaps,
    st.integers(1, 50),
    st.data(),
)
def test_translation_never_skips_a_record(
    first_downstream: int, steps: list[int], max_lag: int, data: st.DataObject
) -> None:
    """Whatever the worker reports of its records, a group's translated position is at or
    before the target offset of the first record at or past its upstream position."""
    upstream = offsets_from(0, steps)
    downstream = [first_downstream + index for index in range(len(upstream))]
    reported = data.draw(st.lists(st.booleans(), min_size=len(upstream), max_size=len(upstream)))
    emitter, store = SyncEmitter(max_lag), loaded()
    for u, d, report in zip(upstream, downstream, reported, strict=True):
        if (report or d == first_downstream) and emitter.update(u, d):
            store.add(OffsetSync("t", 0, u, d))
    for position in data.draw(st.lists(st.integers(0, upstream[-1] + 3), max_size=50)):
        translated = store.translate("t", 0, position)
        if translated is None:
            continue  # older than every kept sync
        first = bisect.bisect_left(upstream, position)
        true_position = downstream[first] if first < len(upstream) else downstream[-1] + 1
        assert translated <= true_position, (position, translated, true_position)


@given(st.integers(1, 1000), gaps, st.integers(1, 50), st.data())
def test_translation_follows_a_remote_partition_created_again(
    first_downstream: int, steps: list[int], max_lag: int, data: st.DataObject
) -> None:
    """The remote partition is deleted and created again after any record: the copies from
    then on start at offset 0. A position at or past the first record copied into the new
    partition never translates past that record's copy, nor past its new end."""
    upstream = offsets_from(0, steps)
    cut = data.draw(st.integers(1, len(upstream)))
    downstream = [first_downstream + i for i in range(cut)] + list(range(len(upstream) - cut))
    emitter, store = SyncEmitter(max_lag), loaded()
    for index, (u, d) in enumerate(zip(upstream, downstream, strict=True)):
        report = data.draw(st.booleans()) or index in (0, cut)
        if report and emitter.update(u, d):
            store.add(OffsetSync("t", 0, u, d))
    if cut == len(upstream):
        return  # nothing copied since
    for position in data.draw(st.lists(st.integers(upstream[cut], upstream[-1] + 3), max_size=50)):
        translated = store.translate("t", 0, position)
        assert translated is not None
        first = bisect.bisect_left(upstream, position)
        true_position = downstream[first] if first < len(upstream) else downstream[-1] + 1
        assert translated <= true_position, (position, translated, true_position)


@given(st.integers(0, 10**9), st.integers(1, 1000), st.integers(1, 3000), st.data())
def test_regular_syncs_cover_every_position_within_a_constant_factor(
    start: int, spacing: int, count: int, data: st.DataObject
) -> None:
    """With a sync every `spacing` offsets (every offsetSyncs.maxLag records, no gaps), the sync a
    position is translated from is less than three times as far behind it as the newest sync is
    ahead of it (or as the spacing, near the live end): coverage of the whole range, precise
    near the end. (Not twice: syncs every 267 offsets from 282,999, 173 of them, translate
    328,575, 348 behind the newest, from 327,855, 720 behind it. Searches found up to 2.997.)"""
    store = loaded(*((start + n * spacing, n) for n in range(count)))
    newest = start + (count - 1) * spacing
    kept = [upstream for upstream, _ in store.kept("t", 0)]
    # The worst positions lie just before a kept sync; and some anywhere.
    anywhere = data.draw(st.lists(st.integers(start, newest), max_size=20))
    for position in [*(upstream - 1 for upstream in kept[:-1]), *anywhere]:
        sync = store.sync_for("t", 0, position)
        assert sync is not None
        assert position - sync[0] < 3 * max(newest - position, spacing), (position, sync)


def test_twice_is_not_a_bound_mirrormaker_2s_store_keeps() -> None:
    store = loaded(*((282_999 + n * 267, n) for n in range(173)))
    assert store.sync_for("t", 0, 328_575) == (327_855, 168)  # 720 behind; the newest 348 ahead
