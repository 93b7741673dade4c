"""The audit's watermark logic that needs no Kafka nor Spark: when a kept watermark is still in
effect, how far a run moves it, and which partitions a checkpoint sends back to their start."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kafka_mirror.audit.checks import judged_in_full
from kafka_mirror.audit.records import AuditInputs, PartitionWindow
from kafka_mirror.audit.report import PartitionFinding
from kafka_mirror.audit.translation import EARLIEST, offset_syncs_start
from kafka_mirror.audit.watermarks import Watermark, in_effect, verified_to
from kafka_mirror.kafka.formats import Checkpoint

ID = bytes(range(16))
KEPT = Watermark("t", 0, ID, source_offset=100, target_offset=140, records=100, full_request="r1")


def test_a_watermark_round_trips_through_its_record() -> None:
    assert Watermark.decode(KEPT.key("ns/m"), KEPT.value()) == ("ns/m", KEPT)
    without_id = Watermark("t", 3, None, 5, 6, 5)
    assert Watermark.decode(without_id.key("ns/m"), without_id.value())[1] == without_id
    with_syncs = Watermark("t", 3, ID, 5, 6, 5, None, {0: 42, 1: 7})
    assert Watermark.decode(with_syncs.key("ns/m"), with_syncs.value())[1] == with_syncs


def test_the_offset_syncs_are_read_from_the_lowest_position_kept() -> None:
    def window(partition: int, position: dict[int, int] | None) -> PartitionWindow:
        kept = Watermark("t", partition, ID, 10, 10, 10, None, position)
        return PartitionWindow("t", "A.t", partition, 0, 20, previous=kept)

    def starts(*windows: PartitionWindow) -> dict[int, int]:
        return offset_syncs_start(
            AuditInputs(
                "ns/m",
                "A",
                "B",
                {},
                {},
                {},
                {},
                list(windows),
                False,
                offset_syncs_end={0: 50, 1: 60},
            )
        )

    assert starts(window(0, {0: 42, 1: 7}), window(1, {0: 30, 1: 9})) == {0: 30, 1: 7}
    # A partition with no position kept (a first run, one started over, an older watermark).
    assert starts(window(0, {0: 42, 1: 7}), window(1, None)) == {0: EARLIEST, 1: EARLIEST}
    assert starts(window(0, {0: 42})) == {0: 42, 1: EARLIEST}


def test_a_watermark_is_in_effect_for_the_same_incarnation_and_request() -> None:
    assert in_effect(KEPT, ID, "r1", log_end=120, target_end=160) == KEPT
    assert in_effect(None, ID, "r1", 120, 160) is None  # first run
    assert in_effect(KEPT, bytes(16), "r1", 120, 160) is None  # the topic created again
    assert in_effect(KEPT, ID, "r2", 120, 160) is None  # a new full-audit request
    assert in_effect(KEPT, ID, None, 120, 160) is None
    assert in_effect(KEPT, ID, "r1", 99, 160) is None  # the log is shorter: created again
    assert in_effect(KEPT, ID, "r1", 120, 139) is None  # the remote topic created again


def test_a_run_moves_the_watermark_to_the_end_or_the_first_failure() -> None:
    assert verified_to(100, 150, None, bad_sync=False) == 150
    missing = PartitionFinding(topic="t", partition=0, missing=2, missing_offsets=[120, 130])
    assert verified_to(100, 150, missing, bad_sync=False) == 120
    assert verified_to(100, 150, missing, bad_sync=True) == 100
    assert verified_to(100, 90, None, bad_sync=False) == 100  # never backwards


offsets = st.lists(st.integers(0, 1000), max_size=12).map(sorted)


@given(
    resume=st.integers(0, 500),
    end=st.integers(0, 1000),
    missing=offsets,
    altered=offsets,
    lost=st.none() | st.tuples(st.integers(0, 1000), st.integers(1, 100)),
    bad_sync=st.booleans(),
)
def test_the_watermark_never_passes_an_unverified_record(
    resume: int,
    end: int,
    missing: list[int],
    altered: list[int],
    lost: tuple[int, int] | None,
    bad_sync: bool,
) -> None:
    """Failing offsets are at or after where the run began; whatever they are, the new watermark
    is not past any of them nor past the end of what was audited, nor before where it was."""
    missing = [resume + o for o in missing]
    altered = [resume + o for o in altered]
    finding = PartitionFinding(
        topic="t",
        partition=0,
        missing_offsets=missing[:10],  # the report lists the first ten
        altered_offsets=altered[:10],
        lost_offsets=[resume + lost[0], resume + lost[0] + lost[1]] if lost else [],
    )
    failed = missing + altered + finding.lost_offsets[:1]
    moved = verified_to(resume, end, finding, bad_sync)
    assert moved >= resume
    assert moved <= max(resume, end)
    assert all(moved <= offset for offset in failed)
    if bad_sync:
        assert moved == resume


def window(partition: int, previous: Watermark | None) -> PartitionWindow:
    return PartitionWindow("t", "t.A", partition, 0, 200, 0, 240, previous=previous)


def test_a_partition_with_a_checkpoint_behind_its_watermark_is_audited_from_its_start() -> None:
    windows = [window(0, KEPT), window(1, KEPT), window(2, KEPT), window(3, None)]
    checkpoints = [
        Checkpoint("app", "t.A", 0, 150, 190),  # after the watermark: judged from it
        Checkpoint("app", "t.A", 1, 50, 190),  # a group behind the verified records
        Checkpoint("app", "t.A", 2, 100, 130),  # translated to before the copies read
        Checkpoint("app", "other.A", 0, 0, 0),  # another topic
    ]
    judged = judged_in_full(windows, checkpoints)
    assert [w.previous for w in judged] == [KEPT, None, None, None]
    assert (judged[1].audit_from, judged[1].target_resume) == (0, 0)
