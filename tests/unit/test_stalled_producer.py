"""A producer stuck without acknowledgements: given up on only when records have waited, with no
acknowledgement at all, for the whole patience; then each partition is consumed again from its
first record not acknowledged, and the old producer's late reports change nothing."""

from __future__ import annotations

from dataclasses import dataclass

from kafka_mirror.worker.mirror import DeliveryWatch, PartitionFlow, rewind_points
from kafka_mirror.worker.offsets import SyncEmitter


def test_waiting_without_progress_for_the_patience_is_a_stall() -> None:
    watch = DeliveryWatch(patience=60)
    assert not watch.stalled(100, now=0)
    assert not watch.stalled(100, now=59)
    assert watch.stalled(100, now=60)


def test_any_acknowledgement_starts_the_patience_again() -> None:
    watch = DeliveryWatch(patience=60)
    watch.stalled(100, now=0)
    assert not watch.stalled(101, now=50)
    assert not watch.stalled(101, now=109)
    assert watch.stalled(101, now=110)


def test_nothing_waiting_is_never_a_stall() -> None:
    watch = DeliveryWatch(patience=60)
    for now in range(0, 600, 5):
        assert not watch.stalled(None, now=now)
    # Records waiting again: the patience counts from then, not from the idle time.
    assert not watch.stalled(7, now=600)
    assert not watch.stalled(7, now=650)
    assert watch.stalled(7, now=660)


@dataclass
class Report:
    """What a delivery report carries that a flow reads: the record's offset on the target."""

    downstream: int

    def offset(self) -> int:
        return self.downstream


def flow(partition: int, first: int, failures: list[str]) -> PartitionFlow:
    return PartitionFlow(
        "orders",
        partition,
        "A.orders",
        b"",
        SyncEmitter(max_lag=100),
        lambda sync: None,
        failures.append,
        acknowledged=first,
    )


def sent(flow: PartitionFlow, offsets: range) -> None:
    """Records queued, each with its report asked for, as the loop does at a run's end."""
    for offset in offsets:
        flow.in_flight.append((offset, 0, 1, 10))
        flow.next_upstream = offset + 1


def test_each_waiting_partition_is_consumed_again_from_its_first_unacknowledged_record() -> None:
    failures: list[str] = []
    nothing_acknowledged, half_acknowledged, settled = (
        flow(0, 500, failures),
        flow(1, 0, failures),
        flow(2, 70, failures),
    )
    sent(nothing_acknowledged, range(500, 510))
    sent(half_acknowledged, range(0, 10))
    for downstream in range(5):
        half_acknowledged.delivered(None, Report(downstream))  # type: ignore[arg-type]
    sent(settled, range(70, 72))
    for downstream in range(2):
        settled.delivered(None, Report(downstream))  # type: ignore[arg-type]

    points = rewind_points([nothing_acknowledged, half_acknowledged, settled])

    assert [(p.partition, p.offset) for p in points] == [(0, 500), (1, 5)]
    assert not failures


def test_an_abandoned_flow_ignores_the_old_producers_reports() -> None:
    failures: list[str] = []
    abandoned = flow(0, 40, failures)
    sent(abandoned, range(40, 45))
    abandoned.abandoned = True
    # The purged records' reports (errors) and any late acknowledgement alike.
    abandoned.delivered(object(), Report(3))  # type: ignore[arg-type]
    abandoned.delivered(None, Report(4))  # type: ignore[arg-type]
    assert abandoned.acknowledged == 40
    assert not abandoned.failed and not failures
