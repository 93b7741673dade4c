"""Records lost to retention: the note the workers commit, the loss the operator reads from it
and from the source's log start, and the status that shows it."""

from __future__ import annotations

import pytest
from confluent_kafka import OFFSET_BEGINNING, KafkaError, KafkaException, Message, TopicPartition
from hypothesis import assume, given
from hypothesis import strategies as st

from kafka_mirror.controller.status import unacknowledged_loss
from kafka_mirror.kafka.formats import LOSS_MARK, RetentionLoss, commit_note, read_commit_note
from kafka_mirror.kafka.observe import PartitionProgress
from kafka_mirror.topics import TopicPlan
from kafka_mirror.worker.metrics import WorkerMetrics
from kafka_mirror.worker.retention import RetentionLosses
from tests.helpers.audit import status_from

offsets = st.integers(min_value=0, max_value=2**62)


@given(
    problem=st.text(max_size=400),
    loss=st.none() | st.builds(RetentionLoss, offsets, offsets, offsets),
)
def test_the_commit_note_reads_back_what_was_written(
    problem: str, loss: RetentionLoss | None
) -> None:
    # The workers' problems are their own sentences ("stopped at", "stalled at"), never one
    # that starts like a loss line.
    assume(not problem.startswith(LOSS_MARK))
    assert read_commit_note(commit_note(problem, loss)) == (problem, loss)


def test_metadata_of_workers_that_counted_no_loss_is_the_problem_alone() -> None:
    assert read_commit_note("stopped at t[0] offset 5: too large") == (
        "stopped at t[0] offset 5: too large",
        None,
    )


def test_the_loss_is_what_the_workers_counted_plus_what_left_the_source_since() -> None:
    counted = RetentionLoss(30, 100, 130)
    # Nothing committed yet: nothing can have been lost.
    assert PartitionProgress("t", 0, start=50, end=80, committed=None).loss is None
    # A stopped mirror: the source's retention passed its committed offset.
    assert PartitionProgress("t", 0, start=130, end=150, committed=100).loss == counted
    # The worker counted it and went on: the same loss, not twice.
    assert (
        PartitionProgress("t", 0, start=130, end=150, committed=100, counted_loss=counted).loss
        == counted
    )
    assert (
        PartitionProgress("t", 0, start=130, end=150, committed=150, counted_loss=counted).loss
        == counted
    )
    # Stopped again and more left: both.
    assert PartitionProgress(
        "t", 0, start=170, end=180, committed=150, counted_loss=counted
    ).loss == RetentionLoss(50, 150, 170)


def test_a_loss_makes_the_mirror_degraded_with_what_to_do() -> None:
    progress = [
        PartitionProgress("orders", 0, start=130, end=150, committed=100),
        PartitionProgress("payments", 0, start=0, end=900, committed=100),
    ]
    plan = TopicPlan({"orders": "orders.A", "payments": "payments.A"}, [])
    status = status_from(plan, progress)
    # The topic that lost records comes first, though the other lags more.
    assert [(t.name, t.lost_to_retention, t.lag) for t in status.topics] == [
        ("orders", 30, 20),
        ("payments", 0, 800),
    ]
    assert status.total_lost_to_retention == 30
    degraded = next(c for c in status.conditions if c.type == "Degraded")
    assert (degraded.status, degraded.reason) == ("True", "RecordsLostToRetention")
    assert degraded.message == (
        "30 records left the source before they were mirrored (orders (30)): the mirror fell "
        "behind the source's retention. Raise the source topics' retention.ms above the "
        "longest time the mirror may be stopped or behind, or scale the mirror up "
        "(spec.replicas) so that it keeps up; the records lost are on neither cluster. Once "
        "dealt with, set spec.acknowledgedLostToRetention to 30 to clear this"
    )


def degraded_by(lost: int, acknowledged: int) -> tuple[str, str]:
    """The Degraded condition (status, reason) of a mirror that lost `lost` records of one
    partition to retention, with `acknowledged` of them acknowledged in its spec."""
    progress = [PartitionProgress("orders", 0, start=100 + lost, end=200, committed=100)]
    status = status_from(TopicPlan({"orders": "orders.A"}, []), progress, acknowledged)
    assert status.total_lost_to_retention == lost  # the count stays, acknowledged or not
    degraded = next(c for c in status.conditions if c.type == "Degraded")
    return degraded.status, degraded.reason


def test_an_acknowledged_loss_clears_degraded_and_a_new_one_sets_it_again() -> None:
    assert degraded_by(30, 0) == ("True", "RecordsLostToRetention")
    assert degraded_by(30, 30) == ("False", "AsExpected")  # dealt with
    assert degraded_by(45, 30) == ("True", "RecordsLostToRetention")  # lost again since
    progress = [PartitionProgress("orders", 0, start=145, end=200, committed=100)]
    status = status_from(TopicPlan({"orders": "orders.A"}, []), progress, 30)
    degraded = next(c for c in status.conditions if c.type == "Degraded")
    assert "(orders (45), 15 since the 30 acknowledged)" in degraded.message
    assert "set spec.acknowledgedLostToRetention to 45" in degraded.message


@given(lost=st.integers(0, 10**9), acknowledged=st.integers(0, 10**9))
def test_the_loss_degrades_the_mirror_exactly_while_it_exceeds_the_acknowledged(
    lost: int, acknowledged: int
) -> None:
    lost_reason = degraded_by(lost, acknowledged)[1] == "RecordsLostToRetention"
    assert lost_reason == (unacknowledged_loss(lost, acknowledged) > 0) == (lost > acknowledged)


class ResetConsumer:
    """What `RetentionLosses.reset` asks of the consumer: the log start (or an error), and the
    partition assigned again."""

    def __init__(self, log_start: int | None) -> None:
        self.log_start = log_start  # None: the leader is moving, the request fails
        self.assigned: list[TopicPartition] = []

    def get_watermark_offsets(self, point: TopicPartition, timeout: float) -> tuple[int, int]:
        if self.log_start is None:
            raise KafkaException(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))
        return self.log_start, self.log_start + 100

    def incremental_unassign(self, partitions: list[TopicPartition]) -> None:
        pass

    def incremental_assign(self, partitions: list[TopicPartition]) -> None:
        self.assigned += partitions


def reset_event(offset: int) -> Message:
    error = KafkaError(KafkaError._AUTO_OFFSET_RESET)
    return Message(topic="t", partition=0, offset=offset, error=error)


@pytest.mark.parametrize(
    ("position", "log_start", "lost", "restart"),
    [
        (40, 100, 60, OFFSET_BEGINNING),  # below the log start: counted, from the start
        (40, None, 0, 40),  # the leader moving: the same position again, nothing counted yet
        (-1001, None, 0, OFFSET_BEGINNING),  # nothing committed: no loss, nothing to ask
    ],
)
def test_a_reset_counts_what_left_the_source_and_never_skips_on_an_error(
    position: int, log_start: int | None, lost: int, restart: int
) -> None:
    losses = RetentionLosses(WorkerMetrics())
    consumer = ResetConsumer(log_start)
    losses.reset(consumer, reset_event(position), "offset reset")  # type: ignore[arg-type]
    counted = losses.losses.get(("t", 0))
    assert (counted.records if counted else 0) == lost
    assert [(tp.partition, tp.offset) for tp in consumer.assigned] == [(0, restart)]


def test_a_log_truncated_below_the_position_goes_on_from_the_truncation_and_counts_it() -> None:
    """librdkafka's report when the commit's leader epoch ends below the position (an unclean
    leader election): nothing is counted lost to retention, and the partition is assigned at
    the truncation, where the new leader's records begin."""
    metrics = WorkerMetrics()
    losses = RetentionLosses(metrics)
    consumer = ResetConsumer(log_start=0)
    reason = (
        "Partition log truncation detected at offset 2000 (leader epoch 0): broker end offset "
        "is 1000 (offset leader epoch 0). Reset to INVALID.: Local: Partition log truncation "
        "detected (broker 3)"
    )
    truncated = losses.reset(consumer, reset_event(-1001), reason)  # type: ignore[arg-type]
    assert truncated == ("t", 0) and not losses.losses
    assert [(tp.partition, tp.offset) for tp in consumer.assigned] == [(0, 1000)]
    assert metrics.lost_to_truncation.labels("t", "0")._value.get() == 1000
