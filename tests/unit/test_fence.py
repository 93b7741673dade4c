"""A promote's fence on the source (controller/fence.py), against the clusters in memory: the
denies placed and recorded, the ends checked after they spread, the drain only once nothing was
written for the settle interval, a write past the fence failing the operation with the fence
lifted and the workers left running, and the lift after the Return."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from kafka_mirror.api.models import KafkaMirrorSpec
from kafka_mirror.api.operations import MirrorOperation, OperationStatus, ResumedBy
from kafka_mirror.api.status import KafkaMirrorStatus
from kafka_mirror.api.worker_config import WorkerConfig
from kafka_mirror.controller import applications, fence, operations
from kafka_mirror.controller.fence import FENCE_SETTLE, FENCE_SPREAD, denies, wanted
from kafka_mirror.controller.operations import advance
from kafka_mirror.controller.status import Event
from kafka_mirror.kafka.acl_grants import Grant, applications_of, fenced_by
from tests.helpers.operations import CONFIG, NOW, FakeKafka, spec, status

MIRRORED = {"t": "t.A", "u": "u.A"}
SWITCHOVER = {"type": "Promote", "id": "move"}
THEIRS = Grant("TOPIC", "u", "User:*", "*", "WRITE", "DENY")  # a deny someone else made


@pytest.fixture
def kafka() -> FakeKafka:
    kafka = FakeKafka()
    kafka.source.ends = {("t", 0): 100, ("t", 1): 40, ("u", 0): 7}
    return kafka


def refresh(
    kafka: FakeKafka,
    op: OperationStatus | None,
    at: datetime,
    requested: KafkaMirrorSpec | None = None,
    config: WorkerConfig = CONFIG,
    source_up: bool = True,
    selected: dict[str, str] = MIRRORED,
) -> tuple[OperationStatus, list[Event]]:
    requested = requested or spec(SWITCHOVER, reverse="b-to-a")
    access = operations.Access(kafka.source if source_up else None, kafka.target)
    mirrored = selected if source_up else None
    result, events = advance(requested, op, status(replicas=1), config, mirrored, access, at)
    assert result is not None
    return result, events


def fenced(kafka: FakeKafka) -> tuple[OperationStatus, datetime]:
    """A switchover whose fence was placed and whose ends were read: checking from `at`."""
    op, events = refresh(kafka, None, NOW)
    assert op.phase == "Fencing" and events[0].reason == "PromoteStarted"
    op, _ = refresh(kafka, op, NOW)  # places the denies
    at = NOW + FENCE_SPREAD
    op, _ = refresh(kafka, op, at)  # reads the ends
    assert op.fence is not None and op.fence.checked_from == at
    return op, at


def test_a_switchover_denies_writes_then_drains_once_the_ends_stood_still(
    kafka: FakeKafka,
) -> None:
    op, events = refresh(kafka, None, NOW)
    assert op.phase == "Fencing" and not operations.stops_workers(spec(SWITCHOVER), op)
    op, _ = refresh(kafka, op, NOW)
    assert op.fence is not None and op.fence.topics == ["t", "u"]
    assert kafka.source.acls == denies(["t", "u"])
    # Recorded as the fence's in Kafka, so a restarted operator (or a person) knows them.
    assert kafka.source.grant_records[fenced_by(CONFIG.mirror, "move")] == denies(["t", "u"])
    assert "waiting 3 s" in op.message
    # Not read before the deny reached every broker: a produce authorized before it may land.
    op, _ = refresh(kafka, op, NOW + FENCE_SPREAD / 2)
    assert op.fence is not None and op.fence.checked_from is None
    kafka.source.ends[("t", 0)] = 103  # landed before the ends were read: no write past it
    op, _ = refresh(kafka, op, NOW + FENCE_SPREAD)
    assert op.fence is not None and op.fence.ends == {"t": [103, 40], "u": [7]}
    op, _ = refresh(kafka, op, NOW + FENCE_SPREAD + FENCE_SETTLE / 2)
    assert op.phase == "Fencing"
    op, events = refresh(kafka, op, NOW + FENCE_SPREAD + FENCE_SETTLE)
    assert op.phase == "CatchingUp" and [e.reason for e in events] == ["CatchingUp"]
    assert op.fence is not None and op.fence.holds_since is not None
    assert "nothing written for 10 s" in op.message
    # The denies stay through the hand-over: nothing lifts them before the Return.
    assert kafka.source.acls == denies(["t", "u"])


def test_a_record_written_past_the_fence_lifts_it_and_fails_the_operation(
    kafka: FakeKafka,
) -> None:
    op, at = fenced(kafka)
    kafka.source.ends[("t", 1)] = 45
    kafka.source.markers = {(("t", 1), 44)}  # an aborted transaction's marker is no write
    failed, events = refresh(kafka, op, at + timedelta(seconds=1))
    assert failed.phase == "Failed" and failed.completed_at is not None
    assert "4 records written to the source after its fence (t 4)" in failed.message
    assert "super user" in failed.message and "new id" in failed.message
    assert [e.type for e in events] == ["Warning"] and events[0].reason == "PromoteFailed"
    assert kafka.source.acls == set() and failed.fence is not None
    assert failed.fence.lifted_at is not None
    # The mirror runs on, as before the operation; the id is done.
    requested = spec(SWITCHOVER, reverse="b-to-a")
    assert not operations.stops_workers(requested, failed)
    again, events = refresh(kafka, failed, at + timedelta(seconds=30))
    assert again == failed and events == []


def test_a_fence_that_hides_a_topic_from_the_mirror_is_lifted_and_fails(
    kafka: FakeKafka,
) -> None:
    """On a source allowing what no ACL names, the deny is the first ACL of a topic that had
    none: nobody may read it any more, the mirror neither, and its drain would find it gone."""
    op, _ = refresh(kafka, None, NOW)
    op, _ = refresh(kafka, op, NOW)
    del kafka.source.ends[("u", 0)]
    failed, _ = refresh(kafka, op, NOW + FENCE_SPREAD)
    assert (
        failed.phase == "Failed" and "the fence hid 1 topics from the mirror (u)" in failed.message
    )
    assert kafka.source.acls == set()


def test_only_markers_past_the_fence_let_it_hold(kafka: FakeKafka) -> None:
    op, at = fenced(kafka)
    kafka.source.ends[("t", 0)] = 101
    kafka.source.markers = {(("t", 0), 100)}  # a transaction open before the fence committed
    op, _ = refresh(kafka, op, at + FENCE_SETTLE)
    assert op.phase == "CatchingUp"


def test_a_failed_operation_leaves_ready_to_the_mirror(kafka: FakeKafka) -> None:
    op, at = fenced(kafka)
    kafka.source.ends[("u", 0)] = 9
    failed, _ = refresh(kafka, op, at + FENCE_SETTLE)
    requested = spec(SWITCHOVER, reverse="b-to-a")
    seen = KafkaMirrorStatus(operation=failed)
    operations.with_operation(seen, requested, KafkaMirrorStatus(), NOW)
    assert [(c.type, c.status, c.reason) for c in seen.conditions] == [
        ("OperationDone", "False", "Failed")
    ]


def test_without_an_authorizer_the_ends_are_still_checked(kafka: FakeKafka) -> None:
    kafka.source.acls = None
    op, at = fenced(kafka)
    assert op.fence is not None and not op.fence.authorizer and op.fence.topics == []
    quiet, _ = refresh(kafka, op, at + FENCE_SETTLE)
    assert quiet.phase == "CatchingUp" and "no authorizer: nothing is denied" in quiet.message
    kafka.source.ends[("t", 0)] = 150
    written, _ = refresh(kafka, op, at + FENCE_SETTLE)
    assert written.phase == "Failed" and "the source has no authorizer" in written.message


def test_a_fence_the_source_refuses_fails_before_anything_is_denied(kafka: FakeKafka) -> None:
    kafka.source.acls_refused = True
    op, _ = refresh(kafka, None, NOW)
    op, _ = refresh(kafka, op, NOW)
    assert op.phase == "Failed" and "the fence could not be placed" in op.message
    assert "fence: false" in op.message and kafka.source.acls == set()


def test_a_deny_someone_else_made_is_neither_listed_nor_lifted(kafka: FakeKafka) -> None:
    kafka.source.acls = {THEIRS}
    op, at = fenced(kafka)
    assert op.fence is not None and op.fence.topics == ["t"]
    kafka.source.ends[("t", 0)] = 101
    op, _ = refresh(kafka, op, at + FENCE_SETTLE)
    assert op.phase == "Failed" and kafka.source.acls == {THEIRS}


def test_a_placement_cut_short_finds_its_recorded_denies_again(kafka: FakeKafka) -> None:
    op, _ = refresh(kafka, None, NOW)
    kafka.source.acls = denies(["t"])  # made and recorded before the operator was killed
    kafka.source.grant_records[fenced_by(CONFIG.mirror, "move")] = denies(["t"])
    op, _ = refresh(kafka, op, NOW)
    assert op.fence is not None and op.fence.topics == ["t", "u"]


def test_the_return_lifts_the_fence_and_a_source_down_only_delays_it(kafka: FakeKafka) -> None:
    op, at = fenced(kafka)
    other = Grant("TOPIC", "v", "User:*", "*", "WRITE", "DENY")
    kafka.source.acls |= {other}  # made by someone else meanwhile
    done = op.model_copy(update={"phase": "Completed"})
    # Completed, not yet started again: the fence holds.
    kept, events = refresh(kafka, done, at)
    assert kept.fence is not None and kept.fence.lifted_at is None and not events
    resumed = done.model_copy(update={"resumed_by": ResumedBy(mirror="b-to-a", id="back")})
    kafka.source.down = True
    later, events = refresh(kafka, resumed, at)
    assert later.fence is not None and later.fence.lifted_at is None and not events
    assert "the source did not answer" in later.fence.message
    kafka.source.down = False
    lifted, events = refresh(kafka, later, at + timedelta(seconds=5))
    assert lifted.fence is not None and lifted.fence.lifted_at == at + timedelta(seconds=5)
    assert [e.reason for e in events] == ["FenceLifted"] and kafka.source.acls == {other}
    assert kafka.source.grant_records[fenced_by(CONFIG.mirror, "move")] == set()


def test_which_promotes_fence() -> None:
    def asked(fence: bool | None = None, **extra: object) -> bool:
        operation = {**SWITCHOVER, **({} if fence is None else {"fence": fence})}
        mirror = spec(operation, **extra)
        assert mirror.operation is not None
        return wanted(mirror, mirror.operation)

    assert asked(reverse="b-to-a")  # the one-step switchover
    assert not asked()  # a plain promote, unless it asks
    assert asked(fence=True)
    assert not asked(fence=False, reverse="b-to-a")
    # Under identity naming the way back writes the same topics: only if asked.
    identity = {"topicNaming": {"policy": "identity"}}
    assert not asked(reverse="b-to-a", **identity)
    with pytest.raises(ValueError, match="fence is for Promote only"):
        MirrorOperation.model_validate({"type": "Failover", "id": "f", "fence": True})


def test_an_asked_fence_under_identity_naming_fails_saying_why(kafka: FakeKafka) -> None:
    identity = WorkerConfig.model_validate(
        {**CONFIG.model_dump(by_alias=True), "topicNaming": {"policy": "identity"}}
    )
    requested = spec({**SWITCHOVER, "fence": True}, topicNaming={"policy": "identity"})
    op, _ = refresh(kafka, None, NOW, requested, identity)
    op, _ = refresh(kafka, op, NOW, requested, identity)
    assert op.phase == "Failed" and "identity naming" in op.message
    assert kafka.source.acls == set()


def test_the_fence_waits_for_a_source_it_cannot_read(kafka: FakeKafka) -> None:
    op, _ = refresh(kafka, None, NOW)
    op, _ = refresh(kafka, op, NOW, source_up=False)
    assert op.phase == "Fencing" and "cannot be read" in op.message and op.fence is None


def test_the_fences_denies_are_no_applications_rights_to_move(kafka: FakeKafka) -> None:
    moving = CONFIG.model_copy(
        update={"acl_sync": CONFIG.acl_sync.model_copy(update={"move_applications": True})}
    )
    producer = Grant("TOPIC", "t", "User:app", "*", "WRITE", "ALLOW")
    # The sync listed the source's bindings while the fence stood: the deny among them.
    kafka.target.grant_records[applications_of(moving.mirror)] = denies(["t"]) | {producer}
    op, _ = fenced(kafka)
    applications.move(moving, kafka.target, op)
    assert kafka.target.acls == {producer}


def test_a_fence_outlives_no_request_but_a_failovers(kafka: FakeKafka) -> None:
    """Removed from the spec, or replaced by another Promote: the old fence is lifted first. A
    Failover carries it on (A is lost; it stays fenced until the Return lifts it)."""
    op, at = fenced(kafka)
    removed, events = refresh(kafka, op, at, requested=spec(reverse="b-to-a"))
    assert removed.fence is not None and removed.fence.lifted_at == at
    assert [e.reason for e in events] == ["FenceLifted"] and kafka.source.acls == set()

    op, at = fenced(kafka)
    again = spec({"type": "Promote", "id": "move-2", "fence": False}, reverse="b-to-a")
    kafka.source.down = True  # the old fence cannot be lifted: the new promote waits
    held, _ = refresh(kafka, op, at, requested=again)
    assert held.id == "move" and kafka.source.acls == denies(["t", "u"])
    kafka.source.down = False
    started, _ = refresh(kafka, held, at, requested=again)
    assert started.id == "move-2" and started.phase == "CatchingUp" and kafka.source.acls == set()

    op, at = fenced(kafka)
    lost = spec({"type": "Failover", "id": "a-lost"}, reverse="b-to-a")
    failover, _ = refresh(kafka, op, at, requested=lost, source_up=False)
    assert failover.id == "a-lost" and failover.fence == op.fence
    assert kafka.source.acls == denies(["t", "u"])
    resumed = failover.model_copy(
        update={"phase": "Completed", "resumed_by": ResumedBy(mirror="b-to-a", id="back")}
    )
    _, events = refresh(kafka, resumed, at, requested=lost)
    assert [e.reason for e in events] == ["FenceLifted"] and kafka.source.acls == set()


def test_a_write_past_the_fence_after_its_check_fails_before_the_hand_over(
    kafka: FakeKafka,
) -> None:
    op, at = fenced(kafka)
    op, _ = refresh(kafka, op, at + FENCE_SETTLE)
    assert op.phase == "CatchingUp"
    stopping = op.model_copy(update={"phase": "StoppingWorkers"})
    kafka.source.ends[("u", 0)] = 8  # a super user wrote after the check
    requested = spec(SWITCHOVER, reverse="b-to-a")
    access = operations.Access(kafka.source, kafka.target)
    failed, _ = advance(requested, stopping, status(), CONFIG, MIRRORED, access, at)
    assert failed is not None and failed.phase == "Failed" and "(u 1)" in failed.message
    assert not kafka.target.commits and kafka.source.acls == set()


def test_more_partitions_than_the_status_holds_fail_the_fence(kafka: FakeKafka) -> None:
    kafka.source.ends = {("t", p): 0 for p in range(20_001)}
    op, _ = refresh(kafka, None, NOW)
    op, _ = refresh(kafka, op, NOW)
    failed, _ = refresh(kafka, op, NOW + FENCE_SPREAD)
    assert failed.phase == "Failed" and "20001 partitions to fence" in failed.message
    assert failed.fence is not None and failed.fence.ends == {} and kafka.source.acls == set()


WIDER = {**MIRRORED, "v": "v.A"}  # a topic created on the source during the operation


def test_a_topic_selected_during_the_check_is_fenced_too_and_the_check_starts_again(
    kafka: FakeKafka,
) -> None:
    op, at = fenced(kafka)
    kafka.source.ends[("v", 0)] = 5
    op, _ = refresh(kafka, op, at + FENCE_SETTLE / 2, selected=WIDER)
    assert op.phase == "Fencing" and "(v): fenced too" in op.message
    assert op.fence is not None and op.fence.topics == ["t", "u", "v"]
    assert kafka.source.acls == denies(["t", "u", "v"]) and op.fence.checked_from is None
    again = at + FENCE_SETTLE / 2 + FENCE_SPREAD
    op, _ = refresh(kafka, op, again, selected=WIDER)
    assert op.fence is not None and op.fence.ends["v"] == [5]
    op, _ = refresh(kafka, op, at + FENCE_SETTLE, selected=WIDER)
    assert op.phase == "Fencing"  # the settle counts from the second reading
    op, _ = refresh(kafka, op, again + FENCE_SETTLE, selected=WIDER)
    assert op.phase == "CatchingUp"


def test_a_topic_selected_during_the_drain_sends_it_back_to_fencing(kafka: FakeKafka) -> None:
    op, at = fenced(kafka)
    op, _ = refresh(kafka, op, at + FENCE_SETTLE)
    assert op.phase == "CatchingUp"
    kafka.source.ends[("v", 0)] = 0
    op, events = refresh(kafka, op, at + FENCE_SETTLE, selected=WIDER)
    assert op.phase == "Fencing" and [e.reason for e in events] == ["Fencing"]
    assert kafka.source.acls == denies(["t", "u", "v"])
    assert op.fence is not None and op.fence.holds_since is None


def test_a_topic_selected_once_the_workers_stopped_fails_before_the_hand_over(
    kafka: FakeKafka,
) -> None:
    op, at = fenced(kafka)
    op, _ = refresh(kafka, op, at + FENCE_SETTLE)
    stopping = op.model_copy(update={"phase": "StoppingWorkers"})
    requested = spec(SWITCHOVER, reverse="b-to-a")
    access = operations.Access(kafka.source, kafka.target)
    failed, _ = advance(requested, stopping, status(), CONFIG, WIDER, access, at)
    assert failed is not None and failed.phase == "Failed"
    assert "1 topics selected since the fence was checked are not fenced (v)" in failed.message
    assert not kafka.target.commits and kafka.source.acls == set()


def stopping(kafka: FakeKafka) -> tuple[OperationStatus, datetime]:
    """A switchover whose fence held and whose workers are stopping."""
    op, at = fenced(kafka)
    op, _ = refresh(kafka, op, at + FENCE_SETTLE)
    assert op.phase == "CatchingUp"
    return op.model_copy(update={"phase": "StoppingWorkers"}), at + FENCE_SETTLE


def test_the_last_check_waits_for_a_source_it_cannot_read(kafka: FakeKafka) -> None:
    op, at = stopping(kafka)
    kafka.source.ends[("u", 0)] = 57  # written after the check, while the source is away
    requested = spec(SWITCHOVER, reverse="b-to-a")
    for access, mirrored in (
        (operations.Access(None, kafka.target), None),  # not reachable
        (operations.Access(kafka.source, kafka.target), MIRRORED),  # times out once
    ):
        kafka.source.failing = {kafka.source._calls}
        waiting, _ = advance(requested, op, status(), CONFIG, mirrored, access, at)
        assert waiting is not None and waiting.phase == "StoppingWorkers"
        assert "the fence's last check waits for the source" in waiting.message
    access = operations.Access(kafka.source, kafka.target)
    failed, _ = advance(requested, op, status(), CONFIG, MIRRORED, access, at)
    assert failed is not None and failed.phase == "Failed" and "(u 50)" in failed.message
    assert not kafka.target.commits
    # A Failover asked instead hands over without the source, carrying the fence on.
    lost = spec({"type": "Failover", "id": "lost"}, reverse="b-to-a")
    away = operations.Access(None, kafka.target)
    failover, _ = advance(lost, op, status(), CONFIG, None, away, at)
    assert failover is not None and failover.fence == op.fence
    failover, _ = advance(lost, failover, status(), CONFIG, None, away, at)
    assert failover is not None and failover.phase == "CommittingOffsets", failover.message


def test_a_topic_deleted_during_the_drain_is_no_hidden_one(kafka: FakeKafka) -> None:
    op, at = fenced(kafka)
    op, _ = refresh(kafka, op, at + FENCE_SETTLE)
    del kafka.source.ends[("u", 0)]  # deleted by its team
    kafka.source.ends[("v", 0)] = 0
    selected = {"t": "t.A", "v": "v.A"}
    op, _ = refresh(kafka, op, at + FENCE_SETTLE, selected=selected)
    op, _ = refresh(kafka, op, at + FENCE_SETTLE + FENCE_SPREAD, selected=selected)
    assert op.phase == "Fencing" and "checking its ends" in op.message, op.message


def test_topics_created_faster_than_the_fence_checks_fail_it(kafka: FakeKafka) -> None:
    op, at = fenced(kafka)
    selected = dict(MIRRORED)
    for n in range(fence.MAX_WIDENINGS + 1):
        selected[f"x{n}"] = f"x{n}.A"
        kafka.source.ends[(f"x{n}", 0)] = 0
        at += timedelta(seconds=1)
        op, _ = refresh(kafka, op, at, selected=selected)  # widened: the spread again
        if op.phase == "Failed":
            break
        op, _ = refresh(kafka, op, at + FENCE_SPREAD, selected=selected)
    assert op.phase == "Failed" and n == fence.MAX_WIDENINGS
    assert "faster than its fence can check them (the latest: x5)" in op.message
    assert kafka.source.acls == set()  # every deny lifted, the widenings' too


def test_a_topic_selected_after_the_hand_over_is_fenced_and_its_records_told(
    kafka: FakeKafka,
) -> None:
    op, at = stopping(kafka)
    done = op.model_copy(update={"phase": "Completed"})
    kafka.source.ends[("v", 0)] = 1000  # a forgotten producer creates v and writes to it
    widened, events = refresh(kafka, done, at, selected=WIDER)
    assert [e.reason for e in events] == ["FenceWidened"] and events[0].type == "Warning"
    assert "(v) fenced too: the 1000 records they hold on the source" in events[0].message
    assert kafka.source.acls == denies(["t", "u", "v"])
    assert widened.fence is not None and widened.fence.topics == ["t", "u", "v"]
    _, again = refresh(kafka, widened, at, selected=WIDER)
    assert again == []  # told once
    resumed = widened.model_copy(update={"resumed_by": ResumedBy(mirror="b-to-a", id="back")})
    _, events = refresh(kafka, resumed, at, selected=WIDER)
    assert [e.reason for e in events] == ["FenceLifted"] and kafka.source.acls == set()


def test_a_fence_lifted_for_a_new_id_says_so(kafka: FakeKafka) -> None:
    op, at = fenced(kafka)
    unfenced = spec({**SWITCHOVER, "id": "move-2", "fence": False}, reverse="b-to-a")
    started, events = refresh(kafka, op, at, requested=unfenced)
    assert [e.reason for e in events] == ["FenceLifted", "PromoteStarted"]
    assert started.fence is None and kafka.source.acls == set()
