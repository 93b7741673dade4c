"""Return: the reverse mirror's promote, then the forward mirror it names started again, by a
mark on that mirror's operation record; and what the Return refuses to resume."""

from __future__ import annotations

from datetime import timedelta

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_mirror.api.operations import OperationStatus
from kafka_mirror.api.status import KafkaMirrorStatus
from kafka_mirror.controller import operations
from kafka_mirror.controller.operations import advance
from kafka_mirror.controller.resume import Forward, resume_forward
from kafka_mirror.kafka.formats import Checkpoint
from tests.helpers.operations import (
    CONFIG,
    NOW,
    REVERSE,
    REVERSE_UID,
    FakeKafka,
    FakeMirrors,
    failed_over,
    spec,
    status,
)


def test_a_return_mirrors_the_reverse_backlog_before_it_stops_anything(kafka: FakeKafka) -> None:
    """What B took during the outage and B→A has not copied yet stays on B if the return stops
    B→A first: it catches up, with its progress in the status, before any worker stops."""
    requested = spec({"type": "Return", "id": "back", "resume": "a-to-b"})
    access = kafka.access(FakeMirrors(failed_over()))
    op, events = advance(requested, None, status(60_000, 1), REVERSE, {"t": "t.B"}, access, NOW)
    assert op is not None and op.phase == "CatchingUp" and events[0].reason == "ReturnStarted"
    assert not operations.stops_workers(requested, op)
    later = NOW + timedelta(seconds=10)
    for lag, at in ((60_000, NOW), (40_000, later)):
        op, _ = advance(requested, op, status(lag, 1), REVERSE, {"t": "t.B"}, access, at)
        assert op is not None and op.phase == "CatchingUp"
        assert not operations.stops_workers(requested, op)
    assert op.catch_up is not None and op.catch_up.records_left == 40_000
    assert (op.catch_up.records_per_second, op.catch_up.estimated_seconds) == (2000.0, 20.0)
    assert "last 40000 records (2,000 records/s: about 20 s left)" in op.message
    # A refresh that reads the same lag (it is read less often) keeps the pace shown.
    same, _ = advance(requested, op, status(40_000, 1), REVERSE, {"t": "t.B"}, access, later)
    assert same is not None and same.catch_up == op.catch_up and "2,000 records/s" in same.message
    op, _ = advance(requested, op, status(0, 1), REVERSE, {"t": "t.B"}, access, later)
    assert op is not None and op.phase == "StoppingWorkers"
    unreadable = op.model_copy(update={"phase": "CatchingUp"})
    stuck, _ = advance(requested, unreadable, status(), REVERSE, None, access, NOW)
    assert stuck is not None and stuck.phase == "CatchingUp"
    assert "a return mirrors it to lag 0 first" in stuck.message


def test_a_return_is_asked_with_the_mirror_it_resumes_and_only_then() -> None:
    assert spec({"type": "Return", "id": "r", "resume": "a-to-b"}).operation is not None
    for wrong in ({"type": "Return", "id": "r"}, {"type": "Promote", "id": "p", "resume": "x"}):
        with pytest.raises(ValueError, match="resume names the mirror"):
            spec(wrong)


def test_a_return_promotes_then_starts_the_forward_mirror_again(kafka: FakeKafka) -> None:
    requested = spec({"type": "Return", "id": "back", "resume": "a-to-b"})
    kafka.target.checkpoints = {("g", "t.B", 0): Checkpoint("g", "t.B", 0, 5, 5, "")}
    forward = failed_over()
    mirrors = FakeMirrors(forward)
    access = kafka.access(mirrors)
    assert operations.stops_workers(forward.spec, forward.status.operation)
    op, _ = advance(requested, None, status(replicas=1), REVERSE, {"t": "t.B"}, access, NOW)
    phases = []
    for seen in (status(replicas=1), status(), status()):
        op, _ = advance(requested, op, seen, REVERSE, {"t": "t.B"}, access, NOW)
        assert op is not None
        phases.append(op.phase)
    assert phases == ["StoppingWorkers", "CommittingOffsets", "ResumingMirror"]
    assert kafka.target.commits == [("g", {("t.B", 0): 5})]
    # It marks the forward mirror's failover resumed, which then stops no worker.
    op, events = advance(requested, op, status(), REVERSE, None, access, NOW)
    assert op is not None and op.phase == "ResumingMirror" and "starting a-to-b" in op.message
    assert [e.reason for e in events] == ["ResumingMirror"]
    by = forward.status.operation.resumed_by if forward.status.operation else None
    assert by is not None and (by.mirror, by.id) == ("b-to-a", "back")
    assert not operations.stops_workers(forward.spec, forward.status.operation)
    # Done once the forward mirror's status counts its workers (a refresh that saw the mark).
    op, _ = advance(requested, op, status(), REVERSE, None, access, NOW)
    assert op is not None and op.phase == "ResumingMirror" and "paused" not in op.message
    mirrors.forward = Forward(forward.spec, forward.status.model_copy(update={"replicas": 1}))
    op, events = advance(requested, op, status(), REVERSE, None, access, NOW)
    assert op is not None and op.phase == "Completed" and events[0].reason == "Returned"
    assert "mirrors A→B again" in op.message and len(kafka.target.commits) == 1
    # The forward mirror is Ready on its own figures again; OperationDone says who resumed it.
    seen = status()
    seen.operation = mirrors.forward.status.operation
    operations.with_operation(seen, forward.spec, KafkaMirrorStatus(), NOW)
    done = {c.type: c for c in seen.conditions}
    assert "Ready" not in done and done["OperationDone"].reason == "Resumed"
    assert "b-to-a's Return back" in done["OperationDone"].message


@pytest.mark.parametrize(
    ("forward", "says"),
    [
        (None, "no KafkaMirror a-to-b"),
        (Forward(spec(), KafkaMirrorStatus()), "waiting for the workers of a-to-b"),
        (
            Forward(spec({"type": "Failover", "id": "new"}), failed_over().status),
            "waiting for a-to-b's Failover new",
        ),
    ],
)
def test_a_return_resumes_nothing_it_should_not(forward: Forward | None, says: str) -> None:
    op = OperationStatus(id="back", type="Return", phase="ResumingMirror")
    assert not resume_forward(
        op, "b-to-a", REVERSE_UID, REVERSE, "a-to-b", FakeMirrors(forward), NOW
    )
    assert says in op.message
    if forward is not None and forward.status.operation is not None:
        assert forward.status.operation.resumed_by is None  # another id's record is not marked
    wrong_way = Forward(spec(), KafkaMirrorStatus(replicas=1))
    assert not resume_forward(
        op, "b-to-a", REVERSE_UID, CONFIG, "a-to-b", FakeMirrors(wrong_way), NOW
    )
    assert "mirrors A→B, not B→A" in op.message


@pytest.mark.parametrize(
    ("reverse", "recorded", "uid", "says"),
    [
        (None, REVERSE_UID, REVERSE_UID, "a-to-b's spec.reverse names none"),
        ("other", REVERSE_UID, REVERSE_UID, "a-to-b's spec.reverse names other"),
        ("b-to-a", None, REVERSE_UID, "waiting for a-to-b to record its reverse mirror"),
        ("b-to-a", REVERSE_UID, "uid-re-created", "a mirror re-created under that name"),
    ],
)
def test_a_return_starts_only_the_mirror_whose_owner_named_it_by_uid(
    reverse: str | None, recorded: str | None, uid: str, says: str
) -> None:
    """Another team's mirror B→A in the namespace, or one re-created under the reverse's name,
    may not start a-to-b: its owner names the one mirror that may, and that one by uid."""
    forward = failed_over()
    assert forward.status.operation is not None
    forward.status.operation.reverse_uid = recorded
    named = Forward(forward.spec.model_copy(update={"reverse": reverse}), forward.status)
    op = OperationStatus(id="back", type="Return", phase="ResumingMirror")
    assert not resume_forward(op, "b-to-a", uid, REVERSE, "a-to-b", FakeMirrors(named), NOW)
    assert says in op.message
    assert forward.status.operation.resumed_by is None


def test_a_failover_records_the_uid_of_its_reverse_once_seen(kafka: FakeKafka) -> None:
    requested = spec({"type": "Failover", "id": "a-lost"}, reverse="b-to-a")
    way_back = {
        "source": {"alias": "B", "bootstrapServers": "b:9092"},
        "target": {"alias": "A", "bootstrapServers": "a:9092"},
    }
    back = Forward(spec(standbyFor="m", **way_back), status(), "uid-1")  # CONFIG is ns/m's

    class Reverse(FakeMirrors):
        def read(self, name: str) -> Forward | None:
            return back if name == "b-to-a" else None

    def recorded(previous: OperationStatus | None = None) -> str | None:
        access = kafka.access(Reverse(None))
        op, _ = advance(requested, previous, status(), CONFIG, None, access, NOW)
        assert op is not None
        return op.reverse_uid

    assert recorded() == "uid-1"
    first = OperationStatus(id="a-lost", type="Failover", phase="Completed", reverse_uid="uid-1")
    back = Forward(back.spec, back.status, "uid-2")  # re-created since: the first one stays
    assert recorded(first) == "uid-1"
    # Never recorded: one that goes the same way, or one that does not stand by for this
    # mirror (a name taken by someone else before the owner made it).
    for wrong in (spec(standbyFor="m"), spec(**way_back)):
        back = Forward(wrong, status(), "uid-3")
        assert recorded() is None


def test_a_return_waits_while_the_mirror_it_resumes_cannot_be_read() -> None:
    class Unreadable(FakeMirrors):
        def read(self, name: str) -> Forward | None:
            raise ValueError("spec.replicas: Input should be a valid integer")

    op = OperationStatus(id="back", type="Return", phase="ResumingMirror")
    assert not resume_forward(op, "b-to-a", REVERSE_UID, REVERSE, "a-to-b", Unreadable(None), NOW)
    assert "a-to-b cannot be read, trying again: spec.replicas" in op.message


RETURN_PHASES = [
    "CatchingUp",
    "StoppingWorkers",
    "CommittingOffsets",
    "ResumingMirror",
    "Completed",
]


@given(
    st.lists(st.tuples(st.booleans(), st.booleans(), st.booleans()), max_size=30),
)
def test_a_return_only_moves_forward_and_completes_once_the_forward_mirror_runs(
    refreshes: list[tuple[bool, bool, bool]],
) -> None:
    """Against a small model of the forward mirror: its own refresh renders workers once its
    record carries the mark; a refresh of it that began before the mark may write its status
    back without it (until one has counted workers); the Return's status patches may be lost."""
    requested = spec({"type": "Return", "id": "back", "resume": "a-to-b"})
    forward = failed_over()
    mirrors = FakeMirrors(forward)
    access = FakeKafka().access(mirrors)
    stored: OperationStatus | None = None
    for forward_refresh, stale_write, patch_lost in refreshes:
        result, _ = advance(requested, stored, status(), REVERSE, {"t": "t.B"}, access, NOW)
        assert result is not None
        before = RETURN_PHASES.index(stored.phase) if stored is not None else -1
        assert before <= RETURN_PHASES.index(result.phase) <= before + 1 or stored is None
        record = forward.status.operation
        assert record is not None
        if result.phase == "Completed":  # only once the forward mirror runs
            assert record.resumed_by is not None and forward.status.replicas
        if stale_write and not forward.status.replicas:
            record.resumed_by = None
        elif forward_refresh:
            running = not operations.stops_workers(forward.spec, record)
            forward.status.replicas = 1 if running else 0
        if not patch_lost:
            stored = result
    if stored is not None and stored.phase == "Completed":
        assert not operations.stops_workers(forward.spec, forward.status.operation)
