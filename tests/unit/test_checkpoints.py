"""When the checkpointer writes a checkpoint, and from what: MirrorMaker 2's rules."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

from kafka_mirror.kafka.coordinator import CommittedOffset
from kafka_mirror.kafka.formats import Checkpoint, OffsetSync
from kafka_mirror.kafka.tail import TopicTail
from kafka_mirror.topics import NameFilter
from kafka_mirror.worker.checkpoints import Checkpointer, is_news
from kafka_mirror.worker.metrics import WorkerMetrics
from kafka_mirror.worker.offsets import Sync
from kafka_mirror.worker.translation import ProvenanceReader, Translation

PREVIOUS = Checkpoint("g", "t.A", 0, upstream_offset=500, downstream_offset=480)


def test_a_checkpoint_moves_forward_on_the_target() -> None:
    assert is_news(None, 500, 480)  # the first one
    assert is_news(PREVIOUS, 600, 580)
    assert is_news(PREVIOUS, 500, 500)  # a better translation of the same position


def test_a_rewound_group_takes_its_checkpoint_back() -> None:
    # Reset on the source to an earlier offset: its own decision, which MirrorMaker 2 follows.
    assert is_news(PREVIOUS, 100, 90)


def test_a_group_moved_over_records_without_copies_gets_its_position_named() -> None:
    # Past an aborted transaction, markers or cycles, or at an empty partition's end: the same
    # offset on B for a later one on A. MirrorMaker 2 writes none, so a group that only moved
    # so would never see its final checkpoint (a promote waits for it).
    assert is_news(PREVIOUS, 550, 480)


def test_nothing_new_or_less_precise_is_not_written() -> None:
    assert not is_news(PREVIOUS, 500, 480)  # unchanged
    assert not is_news(PREVIOUS, 500, 470)  # a coarser translation of the same position
    assert not is_news(PREVIOUS, 600, 470)  # a coarser translation of a later one


class Tail:
    """Stands in for a TopicTail: hands out `records`, then reports whether it read to the end."""

    def __init__(self, records: list[tuple[bytes, bytes]], reaches_end: bool) -> None:
        self.records, self.reaches_end = records, reaches_end
        self.caught_up = False
        self.reads = 0

    def read_new(self, timeout: float = 5.0) -> list[tuple[bytes, bytes]]:
        self.reads += 1
        records, self.records = self.records, []
        self.caught_up = self.reaches_end
        return records


def checkpointer(syncs: Tail, reader: Any = None) -> Checkpointer:
    unused: Any = None  # the admin clients and producer are not reached in these tests
    return Checkpointer(
        unused,
        unused,
        unused,
        unused,
        unused,
        cast(TopicTail, syncs),
        "A.checkpoints.internal",
        NameFilter((".*",)),
        False,
        WorkerMetrics(),
        cast(ProvenanceReader | None, reader),
    )


def sync_records(*syncs: tuple[int, int]) -> list[tuple[bytes, bytes]]:
    return [(s.key(), s.value()) for s in (OffsetSync("t", 0, u, d) for u, d in syncs)]


def test_nothing_is_translated_before_the_syncs_were_read_to_their_end() -> None:
    syncs = Tail(sync_records((0, 0), (100, 100)), reaches_end=False)
    worker = checkpointer(syncs)
    worker.run_once({("t", 0): "t.A"})  # would list the groups if it went on
    assert not worker.store.read_to_end and worker.store.translate("t", 0, 100) is None
    syncs.reaches_end = True
    worker.run_once({})
    assert worker.store.translate("t", 0, 100) == 100


def test_earlier_checkpoints_read_in_full_keep_the_whole_sync_history() -> None:
    earlier = Tail([(PREVIOUS.key(), PREVIOUS.value())], reaches_end=True)
    syncs = Tail(sync_records((0, 0), (100, 100)), reaches_end=True)
    worker = checkpointer(syncs)
    worker.load_emitted(cast(TopicTail, earlier))
    assert worker.emitted == {("g", "t.A", 0): PREVIOUS}
    worker.run_once({})
    assert worker.store.translate("t", 0, 50) == 1  # the sync at 0 was kept


def test_earlier_checkpoints_not_read_in_full_keep_only_the_newest_syncs_at_first() -> None:
    earlier = Tail([], reaches_end=False)  # e.g. not readable
    syncs = Tail(sync_records((0, 0), (100, 100)), reaches_end=True)
    worker = checkpointer(syncs)
    worker.load_emitted(cast(TopicTail, earlier), timeout=0.3)
    assert earlier.reads > 1  # tried again: a topic just created can be unknown for a moment
    worker.run_once({})
    assert worker.store.translate("t", 0, 50) is None  # only (100, 100) was kept
    assert worker.store.translate("t", 0, 100) == 100


class Reader:
    """Stands in for the ProvenanceReader: answers `answer`, and notes what it was asked."""

    def __init__(self, answer: Translation | None) -> None:
        self.answer = answer
        self.asked: list[tuple[Sync | None, int]] = []

    def translate(
        self, remote: str, partition: int, sync: Sync | None, position: int
    ) -> Translation | None:
        self.asked.append((sync, position))
        return self.answer

    def release(self) -> None:
        pass


def loaded_checkpointer(reader: Reader) -> Checkpointer:
    worker = checkpointer(Tail(sync_records((100, 100), (200, 200)), reaches_end=True), reader)
    worker.load_emitted(cast(TopicTail, Tail([], reaches_end=True)))  # none written before
    worker.run_once({})
    return worker


def test_the_target_is_read_from_the_nearest_sync_or_from_its_start() -> None:
    reader = Reader(Translation(150, "exact"))
    worker = loaded_checkpointer(reader)
    assert worker._translate("t", "t.A", 0, 150) == 150
    assert worker._translate("t", "t.A", 0, 50) == 150  # older than every sync: from the start
    assert reader.asked == [((100, 100), 150), (None, 50)]
    # No sync at all (an empty or idle partition): the target is read from its start too.
    assert worker._translate("t", "t.A", 1, 0) == 150
    assert reader.asked[2:] == [(None, 0)]


def test_where_the_target_cannot_tell_mirrormaker_2s_rule_applies() -> None:
    worker = loaded_checkpointer(Reader(None))  # timed out, or the pass had its time
    assert worker._translate("t", "t.A", 0, 150) == 101
    assert worker._translate("t", "t.A", 0, 50) is None  # the rule has nothing older either


def test_a_pass_stops_reading_the_target_when_its_time_is_up() -> None:
    reader = ProvenanceReader({"bootstrap.servers": "127.0.0.1:9"}, "A", max_lag=100)
    reader._spent = 5.0  # a pass that spent its time
    assert reader.translate("t.A", 0, (100, 100), 150) is None
    reader.release()  # the next pass
    assert reader._spent == 0.0


class Answered:
    """An admin future that has its result."""

    def __init__(self, value: Any) -> None:
        self.value = value

    def result(self, timeout: float | None = None) -> Any:
        return self.value


class Admins:
    """The source's groups and their offsets, and the target's partition ends, as the admin
    clients and the group coordinator give them; and the producer of checkpoints, which keeps
    what it is given."""

    def __init__(self, position: int, remote_end: int) -> None:
        self.position, self.remote_end = position, remote_end
        self.produced: list[Checkpoint] = []

    def list_consumer_groups(self, request_timeout: float) -> Any:
        return Answered(SimpleNamespace(valid=[SimpleNamespace(group_id="g")], errors=[]))

    def committed(self, group: str) -> dict[tuple[str, int], CommittedOffset]:
        return {("t", 0): CommittedOffset(self.position, "", None)}

    def list_offsets(self, asked: Any, request_timeout: float) -> Any:
        return {tp: Answered(SimpleNamespace(offset=self.remote_end)) for tp in asked}

    def produce(self, topic: str, key: bytes, value: bytes, headers: Any) -> None:
        assert [name for name, _ in headers] == ["kmirror.mirror"]  # whose checkpoint it is
        self.produced.append(Checkpoint.decode(key, value))

    def flush(self, timeout: float) -> int:
        return 0


def checkpoints_written(syncs: list[tuple[int, int]], remote_end: int) -> list[Checkpoint]:
    """What one pass writes for group g, at 520 on the source and checkpointed before at
    500 → 480, given the offset syncs and where the remote partition t.A[0] ends now."""
    fakes: Any = Admins(position=520, remote_end=remote_end)
    worker = Checkpointer(
        fakes,
        fakes,
        fakes,
        fakes,
        fakes,
        cast(TopicTail, Tail(sync_records(*syncs), reaches_end=True)),
        "A.checkpoints.internal",
        NameFilter((".*",)),
        False,
        WorkerMetrics(),
    )
    worker.load_emitted(cast(TopicTail, Tail([(PREVIOUS.key(), PREVIOUS.value())], True)))
    worker.run_once({("t", 0): "t.A"})
    return fakes.produced


def test_checkpoints_of_a_remote_partition_created_again_start_over() -> None:
    # The newest sync says the copies went on from offset 0 in t.A[0], created again: the
    # checkpoint at 480 names copies that are gone, even where the new t.A[0] reaches past it.
    written = checkpoints_written([(400, 380), (500, 480), (510, 0)], remote_end=600)
    assert written == [Checkpoint("g", "t.A", 0, upstream_offset=520, downstream_offset=1)]


def test_a_checkpoint_past_its_remote_partitions_end_is_replaced_backwards() -> None:
    # No sync tells (the history thinned out), but t.A[0] ends at 11 now: a failover would
    # commit 480 out of range.
    written = checkpoints_written([(400, 380)], remote_end=11)
    assert written == [Checkpoint("g", "t.A", 0, upstream_offset=520, downstream_offset=381)]


def test_a_coarser_translation_within_the_partition_leaves_the_checkpoint() -> None:
    assert checkpoints_written([(400, 380)], remote_end=600) == []
