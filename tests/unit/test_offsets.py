"""Offset-sync emission and translation: MirrorMaker 2's rules, never skipping a record."""

from __future__ import annotations

from kafka_mirror.kafka.formats import OffsetSync
from kafka_mirror.worker.offsets import OffsetSyncStore, SyncEmitter


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


def store_with(*syncs: tuple[int, int]) -> OffsetSyncStore:
    store = OffsetSyncStore()
    for upstream, downstream in syncs:
        store.add(OffsetSync("t", 0, upstream, downstream))
    return store


def test_translation_is_exact_at_a_sync_and_one_past_it_otherwise() -> None:
    store = store_with((0, 10), (100, 110), (200, 205))
    assert store.translate("t", 0, 100) == 110
    assert store.translate("t", 0, 150) == 111  # never beyond what could be the next record
    assert store.translate("t", 0, 500) == 206
    assert store.translate("t", 0, 0) == 10
    assert store.translate("t", 1, 0) is None  # no syncs for that partition


def test_translation_refuses_positions_older_than_every_sync() -> None:
    store = store_with((100, 0))
    assert store.translate("t", 0, 50) is None


def test_never_skips_a_record_under_compaction() -> None:
    """Every upstream record at or after the group's position lies at or after the translation."""
    upstream_offsets = [0, 1, 2, 7, 8, 9, 20, 21, 40]  # gaps: compacted away upstream
    downstream = {u: d for d, u in enumerate(upstream_offsets)}
    emitter, store = SyncEmitter(max_lag=3), OffsetSyncStore()
    for u, d in downstream.items():
        if emitter.update(u, d):
            store.add(OffsetSync("t", 0, u, d))
    for position in range(0, 42):
        translated = store.translate("t", 0, position)
        assert translated is not None
        for u, d in downstream.items():
            if u >= position:
                assert d >= translated, (position, u)


def test_a_recreated_topic_drops_the_syncs_it_contradicts() -> None:
    store = store_with((0, 0), (100, 100), (200, 200))
    store.add(OffsetSync("t", 0, 0, 300))  # upstream restarted at 0; downstream appends
    assert store.translate("t", 0, 150) == 301


def test_history_is_bounded_and_still_reaches_back() -> None:
    store = OffsetSyncStore(capacity=64, recent=32)
    for n in range(10_000):
        store.add(OffsetSync("t", 0, n * 100, n * 100))
    assert store.history_size("t", 0) <= 64
    assert store.translate("t", 0, 50) == 1  # the oldest sync (0, 0) is kept
    assert store.translate("t", 0, 999_900) == 999_900
