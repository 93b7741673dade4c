"""A partition's flow: what it commits is never past a record the target has not acknowledged;
records skipped on purpose and offsets holding no record settle; a refused record freezes it; a
flow given up on ignores its old producer's reports; a producer stalled as a whole is noticed;
a copy's latency lasts until it can be read."""

from __future__ import annotations

from dataclasses import dataclass
from random import Random

from confluent_kafka import KafkaError

from kafka_mirror.kafka.formats import OffsetSync
from kafka_mirror.worker.flows import DeliveryWatch, PartitionFlow, Stop, commit_offsets
from kafka_mirror.worker.offsets import SyncEmitter
from tests.helpers.worker_fakes import (
    PARTITIONS,
    TOPIC,
    FakeClients,
    Message,
    Source,
    Target,
    fake_worker,
)


@dataclass
class Report:
    """What a delivery report carries that a flow reads: the record's offset on the target."""

    downstream: int

    def offset(self) -> int:
        return self.downstream


def new_flow(start: int, syncs: list[tuple[OffsetSync, bool]] | None = None) -> PartitionFlow:
    published = syncs if syncs is not None else []
    return PartitionFlow(
        "orders",
        0,
        "orders.A",
        b"",
        SyncEmitter(max_lag=100),
        lambda sync, due: published.append((sync, due)),
        start,
    )


def queue(flow: PartitionFlow, offset: int, report: bool) -> None:
    """What the loop does once produce() returned."""
    flow.next_upstream = offset + 1
    flow.unreported_records += 1
    flow.unreported_bytes += 10
    if report:
        flow.in_flight.append((offset, 0, flow.unreported_records, flow.unreported_bytes))
        flow.unreported_records = flow.unreported_bytes = 0


def test_a_new_flow_commits_where_it_started() -> None:
    assert new_flow(500).commit_offset() == 500


def test_records_waiting_hold_the_commit_at_the_first_unacknowledged() -> None:
    flow = new_flow(0)
    for offset in range(10):
        queue(flow, offset, report=offset in (4, 9))
    assert flow.commit_offset() == 0
    flow.delivered(None, Report(4))  # type: ignore[arg-type]
    assert flow.commit_offset() == 5
    flow.delivered(None, Report(9))  # type: ignore[arg-type]
    assert flow.commit_offset() == 10 and flow.settled()


def test_a_refused_record_freezes_the_commit_whatever_follows() -> None:
    flow = new_flow(0)
    for offset in range(6):
        queue(flow, offset, report=offset in (1, 3, 5))
    flow.delivered(None, Report(1))  # type: ignore[arg-type]
    flow.delivered(KafkaError(KafkaError.MSG_SIZE_TOO_LARGE), Report(-1))  # type: ignore[arg-type]
    flow.delivered(None, Report(5))  # type: ignore[arg-type]
    assert flow.refused is not None and "offset 3" in flow.refused
    assert flow.commit_offset() == 2


def test_skipped_records_and_markers_settle_the_partition() -> None:
    flow = new_flow(0)
    queue(flow, 0, report=True)
    flow.skipped(1)
    assert flow.commit_offset() == 0  # record 0 not acknowledged yet
    flow.delivered(None, Report(0))  # type: ignore[arg-type]
    assert flow.commit_offset() == 2
    flow.reached_end(4)  # offsets 2 and 3: a transaction's marker and an aborted record
    assert flow.commit_offset() == 4


def test_the_end_of_a_stopped_partition_does_not_move_its_commit() -> None:
    flow = new_flow(7)
    flow.stop = Stop(7, "too large", retry_at=0)
    flow.reached_end(20)
    assert flow.commit_offset() == 7


def test_an_abandoned_flow_ignores_the_old_producers_reports() -> None:
    flow = new_flow(40)
    for offset in range(40, 45):
        queue(flow, offset, report=True)
    flow.abandoned = True
    flow.delivered(KafkaError(KafkaError._PURGE_QUEUE), Report(-1))  # type: ignore[arg-type]
    flow.delivered(None, Report(4))  # type: ignore[arg-type]
    assert flow.acknowledged == 40 and flow.refused is None


def test_a_stopped_partition_commits_its_reason_with_its_offset() -> None:
    flow = new_flow(12)
    flow.stop = Stop(12, "the record is 2000000 bytes", retry_at=0)
    [offset] = commit_offsets([flow])
    assert offset.offset == 12
    assert offset.metadata == "stopped at orders[0] offset 12: the record is 2000000 bytes"


def test_a_partition_waiting_a_minute_is_stalled() -> None:
    flow = new_flow(0)
    queue(flow, 0, report=True)
    flow.waiting_since = 100.0
    assert flow.problem(now=159.0) is None
    problem = flow.problem(now=160.0)
    assert problem is not None and problem.startswith("stalled at orders[0] offset 0")


def test_offset_syncs_are_published_due_or_delayed() -> None:
    syncs: list[tuple[OffsetSync, bool]] = []
    flow = new_flow(0, syncs)
    for offset in range(3):
        queue(flow, offset, report=True)
        flow.delivered(None, Report(offset))  # type: ignore[arg-type]
    assert [(s.upstream_offset, due) for s, due in syncs] == [(0, True), (1, False), (2, False)]


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
    assert not watch.stalled(7, now=600)
    assert watch.stalled(7, now=660)


def test_a_copys_latency_ends_when_it_can_be_read() -> None:
    """At least once, a copy is readable once acknowledged; exactly once, only once its
    transaction commits, which the latency then counts up to."""
    worker = fake_worker(FakeClients(Source(logs=[[True]] * PARTITIONS), Target(), Random(1), 10))
    worker.sender.send([Message(TOPIC, 0, 0)])
    flow = worker.partitions.flows[(TOPIC, 0)]
    metric = worker.metrics.registry.get_sample_value

    flow.latencies.append((1_000.5, 1_000.0))  # acknowledged 0.5 s after it was written
    worker.partitions.publish_figures()
    assert metric("kafka_mirror_last_latency_seconds", {"topic": TOPIC}) == 0.5
    flow.latencies.append((1_000.5, 1_000.0))
    worker.partitions.publish_figures(readable_at=1_001.25)  # committed 0.75 s after that
    assert metric("kafka_mirror_last_latency_seconds", {"topic": TOPIC}) == 1.25
    assert metric("kafka_mirror_replication_latency_seconds_sum", {"topic": TOPIC}) == 1.75
