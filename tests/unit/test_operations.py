"""Promote, failover and return as the status loop carries them out, against the clusters in
memory: the phases, when the workers stop, the RPO from the status's figures, what the commit
hands over, and (a property against a small model) that under any sequence of refreshes, Kafka
failures and lost status patches the phases only move forward, offsets are committed only once
the workers stopped, and an id completes once."""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from kafka_mirror.api.operations import OperationStatus
from kafka_mirror.api.status import KafkaMirrorStatus, TopicStatus
from kafka_mirror.api.worker_config import SelectionPatterns
from kafka_mirror.controller import operations, rpo
from kafka_mirror.controller.operation_kafka import OpenTransactions
from kafka_mirror.controller.operations import Access, advance, pending_checkpoints
from kafka_mirror.controller.rpo import rpo_of
from kafka_mirror.controller.status import DeploymentState, MirrorObservation, mirror_status
from kafka_mirror.kafka.formats import Checkpoint
from tests.helpers.operations import (
    CONFIG,
    NOW,
    REVERSE,
    FakeKafka,
    FakeMirrors,
    failed_over,
    spec,
    status,
)

PHASES = ["CatchingUp", "StoppingWorkers", "CommittingOffsets", "ResumingMirror", "Completed"]


def test_the_workers_stop_at_once_for_a_failover_and_after_the_catch_up_for_a_promote() -> None:
    failover = spec({"type": "Failover", "id": "x"})
    assert operations.stops_workers(failover, None)
    assert operations.running_spec(failover, None).paused
    promote = spec({"type": "Promote", "id": "p"})
    catching_up = OperationStatus(id="p", type="Promote", phase="CatchingUp")
    assert not operations.stops_workers(promote, None)
    assert not operations.stops_workers(promote, catching_up)
    stopping = catching_up.model_copy(update={"phase": "StoppingWorkers"})
    assert operations.stops_workers(promote, stopping)
    # Another id's record does not count; without an operation the workers run.
    assert not operations.stops_workers(promote, stopping.model_copy(update={"id": "old"}))
    assert not operations.stops_workers(spec(), stopping)


def test_the_rpo_is_the_lag_and_age_the_status_last_saw() -> None:
    seen = status(lag=120, latency=7.25)
    seen.topics.append(TopicStatus(name="u", remote_name="u.A", lag=0, latency_seconds=0.0))
    seen.total_lag = 125  # 5 more on topics beyond the listed ones
    rpo = rpo_of(seen)
    assert (rpo.total_records, rpo.max_seconds, rpo.source_last_seen) == (125, 7.25, NOW)
    assert [(t.name, t.records, t.seconds) for t in rpo.topics] == [("t", 120, 7.25)]
    nothing = rpo_of(status(lag=0))
    assert (nothing.total_records, nothing.max_seconds, nothing.topics) == (0, 0.0, [])


@pytest.mark.parametrize(
    ("copied", "expected"),
    [
        (350, (70, True)),  # 70 of the 420 the source held when last read are not on B
        (500, (0, True)),  # B has copies of records the source took after it was last read
        (None, (120, False)),  # nothing to tell on B: the lag last seen, no bound
    ],
)
def test_the_rpo_checked_on_the_target_counts_what_the_source_held_and_b_lacks(
    monkeypatch: pytest.MonkeyPatch, copied: int | None, expected: tuple[int, bool]
) -> None:
    seen = status(lag=120)
    seen.topics[0].source_end = 420
    asked: list[tuple[str, str]] = []

    def copied_ends(_settings: Any, remote: str, alias: str) -> int | None:
        asked.append((remote, alias))
        return copied

    monkeypatch.setattr(rpo, "copied_ends", copied_ends)
    found = rpo.rpo_on_target(seen, {"bootstrap.servers": "b:9092"}, "A")
    assert (found.total_records, found.lower_bound) == expected and asked == [("t.A", "A")]
    assert [t.records for t in found.topics] == ([expected[0]] if expected[0] else [])
    seen.total_lag = 125  # 5 more on topics beyond the listed ones: counted, no bound
    beyond = rpo.rpo_on_target(seen, {"bootstrap.servers": "b:9092"}, "A")
    assert (beyond.total_records, beyond.lower_bound) == (expected[0] + 5, False)


def test_pending_checkpoints_names_groups_whose_checkpoint_lags_their_source_offset() -> None:
    checkpoints = {
        ("g", "t.A", 0): Checkpoint("g", "t.A", 0, 10, 10, ""),
        ("g", "t.A", 1): Checkpoint("g", "t.A", 1, 4, 4, ""),
    }
    positions = {"g": {("t", 0): 10, ("t", 1): 5, ("other", 0): 3}, "h": {("t", 0): 1}}
    assert pending_checkpoints(positions, {"t": "t.A"}, checkpoints) == ["g t[1]", "h t[0]"]


def test_a_promote_waits_for_lag_0_and_the_final_checkpoints(kafka: FakeKafka) -> None:
    requested = spec({"type": "Promote", "id": "p"})
    access = kafka.access()
    op, events = advance(
        requested, None, status(lag=5, replicas=1), CONFIG, {"t": "t.A"}, access, NOW
    )
    assert op is not None and op.phase == "CatchingUp" and events[0].reason == "PromoteStarted"
    op, _ = advance(requested, op, status(lag=5, replicas=1), CONFIG, {"t": "t.A"}, access, NOW)
    assert op is not None and op.phase == "CatchingUp" and "last 5 records" in op.message
    idle, _ = advance(requested, op, status(lag=5), CONFIG, {"t": "t.A"}, access, NOW)
    assert idle is not None and idle.phase == "CatchingUp" and "no worker runs" in idle.message
    kafka.source.groups = {"g": {("t", 0): 7}}
    op, _ = advance(requested, op, status(replicas=1), CONFIG, {"t": "t.A"}, access, NOW)
    assert op is not None and op.phase == "CatchingUp" and "g t[0]" in op.message
    kafka.target.checkpoints = {("g", "t.A", 0): Checkpoint("g", "t.A", 0, 7, 7, "")}
    op, events = advance(requested, op, status(replicas=1), CONFIG, {"t": "t.A"}, access, NOW)
    assert op is not None and op.phase == "StoppingWorkers"
    assert [e.reason for e in events] == ["StoppingWorkers"]
    # Without the source a promote cannot go on, and says what to do instead.
    waiting = op.model_copy(update={"phase": "CatchingUp"})
    stuck, _ = advance(requested, waiting, status(), CONFIG, None, Access(None, kafka.target), NOW)
    assert stuck is not None and stuck.phase == "CatchingUp" and "Failover" in stuck.message
    assert not kafka.target.commits


def test_an_open_transaction_is_named_not_waited_for(kafka: FakeKafka) -> None:
    """Lag counts what a read_committed reader reaches: a transaction left open on the source
    does not hold the promote for ever, and the hand-over says what it leaves behind."""
    requested = spec({"type": "Promote", "id": "p"})
    kafka.source.open_transactions = {
        ("t", 2): OpenTransactions(5, NOW - timedelta(minutes=42)),
        ("other", 0): OpenTransactions(3),
    }
    op, _ = advance(requested, None, status(replicas=1), CONFIG, {"t": "t.A"}, kafka.access(), NOW)
    op, events = advance(
        requested, op, status(replicas=1), CONFIG, {"t": "t.A"}, kafka.access(), NOW
    )
    assert op is not None and op.phase == "StoppingWorkers"
    assert (
        "not mirrored: 5 records in or after open transactions on the source "
        "(t[2] 5, open for 42 min)"
    ) in events[0].message


def test_a_failover_stops_the_workers_then_commits_and_reports(kafka: FakeKafka) -> None:
    requested = spec({"type": "Failover", "id": "f"})
    kafka.target.checkpoints = {("g", "t.A", 0): Checkpoint("g", "t.A", 0, 90, 80, "")}
    lost = Access(None, kafka.target)
    op, _ = advance(requested, None, status(lag=120, replicas=2), CONFIG, None, lost, NOW)
    assert op is not None and op.phase == "StoppingWorkers"
    op, _ = advance(requested, op, status(lag=120, replicas=2), CONFIG, None, lost, NOW)
    assert op is not None and op.phase == "StoppingWorkers" and "2 workers" in op.message
    # Scaled to 0, a pod being deleted may still flush, commit and sync group offsets.
    flushing = Access(None, kafka.target, terminating_workers=1)
    op, _ = advance(requested, op, status(lag=120), CONFIG, None, flushing, NOW)
    assert op is not None and op.phase == "StoppingWorkers" and "1 worker to" in op.message
    op, _ = advance(requested, op, status(lag=120), CONFIG, None, lost, NOW)
    assert op is not None and op.phase == "CommittingOffsets"
    assert op.rpo is not None and op.rpo.total_records == 120
    later = NOW + timedelta(seconds=2)
    op, events = advance(requested, op, status(lag=120), CONFIG, None, lost, later)
    assert op is not None and op.phase == "Completed" and op.completed_at == later
    assert events[0].reason == "FailedOver" and "RPO 120 records" in op.message
    assert kafka.target.commits == [("g", {("t.A", 0): 80})] and op.committed_count == 1
    again, events = advance(requested, op, status(lag=120), CONFIG, None, lost, later)
    assert again == op and not events and len(kafka.target.commits) == 1
    # A can be read again: what it holds that B never had (the RPO and what it took after it
    # was last read), counted once, with an event.
    back, events = advance(requested, op, status(lag=150), CONFIG, {"t": "t.A"}, lost, later)
    assert back is not None and back.source_back is not None
    assert back.source_back.total_records == 150 and back.phase == "Completed"
    assert [e.reason for e in events] == ["SourceBack"] and "holds 150 records" in events[0].message
    again, events = advance(requested, back, status(lag=170), CONFIG, {"t": "t.A"}, lost, later)
    assert again == back and not events


def test_kafka_failing_midway_keeps_the_phase_and_says_so(kafka: FakeKafka) -> None:
    requested = spec({"type": "Failover", "id": "f"})
    op = OperationStatus(id="f", type="Failover", phase="CommittingOffsets")
    kafka.target.down = True
    after, events = advance(requested, op, status(), CONFIG, None, kafka.access(), NOW)
    assert after is not None and after.phase == "CommittingOffsets" and not events
    assert "trying again" in after.message


@pytest.mark.parametrize("kind", ["Promote", "Failover"])
def test_the_commit_hands_over_exactly_what_the_checkpoints_say(
    kafka: FakeKafka, kind: str
) -> None:
    """Each selected group's newest checkpoint, backwards too, to every group without members on
    the target; a promote adds where the groups that read the target's copies on the source
    resume (reverse checkpoints). Other mirrors' topics and the workers' group get nothing."""
    kafka.target.checkpoints = {
        ("g", "t.A", 0): Checkpoint("g", "t.A", 0, 70, 7, ""),
        ("busy", "t.A", 0): Checkpoint("busy", "t.A", 0, 30, 3, ""),
        ("g", "u", 0): Checkpoint("g", "u", 0, 5, 5, ""),  # no remote topic of A
        ("kafka-mirror.ns.m", "t.A", 0): Checkpoint("kafka-mirror.ns.m", "t.A", 0, 9, 9, ""),
    }
    kafka.target.groups = {"g": {("t.A", 0): 10}}  # ahead of its checkpoint: moved back
    kafka.target.members = {"busy"}
    kafka.source.groups = {"r": {("t.B", 0): 4}}  # read B's copies on A (a failback)
    requested = spec({"type": kind, "id": "x"})
    op = OperationStatus(id="x", type=kind, phase="CommittingOffsets")
    done, _ = advance(requested, op, status(), CONFIG, {"t": "t.A"}, kafka.access(), NOW)
    assert done is not None and done.phase == "Completed"
    expected = [("g", "t.A", 0, 7)] + ([("r", "t", 0, 4)] if kind == "Promote" else [])
    assert [(c.group, c.topic, c.partition, c.offset) for c in done.committed] == expected
    assert done.committed_count == len(expected) and done.skipped_groups == ["busy"]
    assert kafka.target.groups["g"] == {("t.A", 0): 7}
    assert ("r" in kafka.target.groups) == (kind == "Promote")
    assert "busy" not in kafka.target.groups
    assert "not handed over: busy (members on the target)" in done.message


def test_a_group_whose_commit_the_target_refuses_in_part_is_skipped_and_not_listed(
    kafka: FakeKafka,
) -> None:
    """A member that joined between the check and the commit, or a right missing on one topic:
    the target keeps one partition. The group is skipped with Kafka's reason, none of its offsets
    listed (the status lists only what B holds as the hand-over wanted), the others committed."""
    kafka.target.checkpoints = {
        ("g", "t.A", 0): Checkpoint("g", "t.A", 0, 70, 7, ""),
        ("g", "t.A", 1): Checkpoint("g", "t.A", 1, 80, 8, ""),
        ("h", "t.A", 0): Checkpoint("h", "t.A", 0, 50, 5, ""),
    }
    kafka.target.refusing = {("t.A", 1): "UNKNOWN_MEMBER_ID"}
    requested = spec({"type": "Failover", "id": "x"})
    op = OperationStatus(id="x", type="Failover", phase="CommittingOffsets")
    done, _ = advance(requested, op, status(), CONFIG, {"t": "t.A"}, kafka.access(), NOW)
    assert done is not None and done.phase == "Completed"
    assert [(c.group, c.topic, c.partition, c.offset) for c in done.committed] == [
        ("h", "t.A", 0, 5)
    ]
    assert done.skipped_groups == ["g"]
    assert done.skipped_reasons == {"g": "the target refused t.A[1]: UNKNOWN_MEMBER_ID"}
    assert "not handed over: g (the target refused t.A[1]: UNKNOWN_MEMBER_ID)" in done.message


def test_with_operation_says_ready_false_for_the_reason_asked() -> None:
    requested = spec({"type": "Failover", "id": "f"})
    current = status()
    current.operation = OperationStatus(id="f", type="Failover", phase="Completed", message="ok")
    operations.with_operation(current, requested, KafkaMirrorStatus(), NOW)
    by_type = {c.type: c for c in current.conditions}
    assert (by_type["Ready"].status, by_type["Ready"].reason) == ("False", "FailedOver")
    assert (by_type["OperationDone"].status, by_type["OperationDone"].reason) == (
        "True",
        "FailedOver",
    )


# --- the property: forward only, commits after the stop, once per id -------------------------


@dataclass(frozen=True)
class Refresh:
    """What happens around one refresh of the mirror's status."""

    copied: int  # records the running workers copy after it
    worker_stops: bool  # a worker told to stop stops after it
    checkpoint_current: bool  # the group's newest checkpoint names its offset on the source
    source_up: bool
    patch_lost: bool  # its status patch never reached the API server (a restart)
    forward_starts: bool  # a Return's forward mirror renders its workers if marked
    source_written: bool  # a producer nobody stopped writes a record to the source after it


@given(
    kind=st.sampled_from(["Promote", "FencedPromote", "Failover", "Return"]),
    refreshes=st.lists(
        st.builds(
            Refresh,
            st.integers(0, 3),
            st.booleans(),
            st.booleans(),
            st.booleans(),
            st.booleans(),
            st.booleans(),
            st.booleans(),
        ),
        min_size=10,
        max_size=40,
    ),
    failing=st.tuples(st.sets(st.integers(0, 150)), st.sets(st.integers(0, 150))),
)
def test_phases_only_move_forward_and_an_id_completes_once(
    kind: str, refreshes: list[Refresh], failing: tuple[set[int], set[int]]
) -> None:
    kafka = FakeKafka()
    kafka.source.failing, kafka.target.failing = failing  # Kafka raising at any of these calls
    kafka.source.groups = {"g": {("t", 0): 5}}
    kafka.source.ends = {("t", 0): 5}
    config = REVERSE if kind == "Return" else CONFIG
    remote = f"t.{config.source.alias}"
    forward = failed_over()
    mirrors = FakeMirrors(forward) if kind == "Return" else None
    fenced = kind == "FencedPromote"
    asked = {"type": "Promote", "fence": True} if fenced else {"type": kind}
    requested = spec({**asked, "id": "x", **({"resume": "a-to-b"} if mirrors else {})})
    phases = [p for p in PHASES if mirrors or p != "ResumingMirror"]
    phases = (["Fencing"] if fenced else []) + phases
    written_past = False  # a record reached the source after its ends were read
    lag, replicas = 3, 2
    stored: OperationStatus | None = None  # what the status on the API server holds
    stopped_seen = False  # a refresh stopping the workers saw none run
    at = NOW
    handovers: list[bool] = []  # per commit pass gone through: whether its patch was lost
    for refresh in refreshes:
        upstream = 5 if refresh.checkpoint_current else 4
        kafka.target.checkpoints = {("g", remote, 0): Checkpoint("g", remote, 0, upstream, 5, "")}
        source = kafka.source if refresh.source_up else None
        mirrored = {"t": remote} if refresh.source_up else None
        commits = len(kafka.target.commits)
        seen = status(lag=lag, replicas=replicas)
        access = Access(source, kafka.target, mirrors)
        result, events = advance(requested, stored, seen, config, mirrored, access, at)
        assert result is not None
        if stored is None:  # a failover stops at once; the others hand over from a live source
            first = {"Failover": "StoppingWorkers", "FencedPromote": "Fencing"}
            assert result.phase == first.get(kind, "CatchingUp")
        elif result.phase == "Failed":  # only a fence fails, and only once written past
            assert stored.phase in ("Fencing", "Failed") and written_past
            assert stored.phase == "Failed" or len(kafka.target.commits) == 0
        else:
            before, after = phases.index(stored.phase), phases.index(result.phase)
            assert before <= after <= before + 1  # never backwards, one phase at a time
            if stored.phase == "Completed":  # an id completes once: never run again
                # (A failed-over source read again is counted once, nothing else changes.)
                counted = result.model_copy(update={"source_back": stored.source_back})
                assert counted == stored and [e.reason for e in events] in ([], ["SourceBack"])
                assert not events or (kind == "Failover" and stored.source_back is None)
            if stored.phase == "CatchingUp" and after > before:  # caught up, checkpoints final
                assert lag == 0 and refresh.source_up and refresh.checkpoint_current
            if stored.phase == "CommittingOffsets" and after > before:  # a whole commit pass
                assert len(kafka.target.commits) > commits
                handovers.append(refresh.patch_lost)
            stopped_seen |= stored.phase == "StoppingWorkers" and not replicas
        if len(kafka.target.commits) > commits:  # offsets move only once no worker runs
            assert stored is not None and stored.phase == "CommittingOffsets" and stopped_seen
        if result.phase == "Completed" and mirrors:  # a Return once the forward mirror runs
            assert forward.status.replicas
        # A promote stops nothing before it has fenced and caught up, nor after it failed; a
        # failover stops at once.
        stopped = operations.stops_workers(requested, result)
        running = ("Fencing", "CatchingUp", "Failed")
        assert stopped == (kind == "Failover" or result.phase not in running)
        if result.phase == "Failed" and result.fence and result.fence.lifted_at:
            assert kafka.source.acls == set()  # the fence lifted whole
        # The operator keeps nothing in memory: a restart is a refresh like any other, and
        # a refresh whose status patch was lost (killed before it) is done again.
        if not refresh.patch_lost:
            stored = result
        # The workers run as the stored status renders them.
        if replicas:
            lag = max(0, lag - refresh.copied)
        if refresh.worker_stops and operations.stops_workers(requested, stored):
            replicas = max(0, replicas - 1)
        record = forward.status.operation
        if refresh.forward_starts and record is not None and record.resumed_by is not None:
            forward.status.replicas = 1
        if refresh.source_written and fenced and stored is not None and stored.phase == "Fencing":
            kafka.source.ends[("t", 0)] += 1
            written_past |= stored.fence is not None and stored.fence.checked_from is not None
        at += timedelta(seconds=2)
    # Again only where its patch was lost: the status never went back before the hand-over.
    assert all(handovers[:-1])
    if stored is not None and stored.phase == "Completed":
        assert stored.completed_at is not None


@pytest.mark.parametrize(
    ("latency", "expected"),
    [
        (None, ("Unknown", "LatencyUnknown")),
        (30.0, ("True", "WithinTarget")),
        (90.5, ("False", "OverTarget")),
    ],
)
def test_within_rpo_holds_the_latency_against_the_spec_target(
    latency: float | None, expected: tuple[str, str]
) -> None:
    observation = MirrorObservation(
        generation=1,
        paused=False,
        label_selector="",
        deployment=DeploymentState(1, 1, 1),
        selection_problems=[],
        selection_count=1,
        rpo_target_seconds=60,
    )
    previous = KafkaMirrorStatus(max_latency_seconds=latency)
    found = {c.type: c for c in mirror_status(observation, previous, NOW).conditions}
    assert (found["WithinRpo"].status, found["WithinRpo"].reason) == expected
    without = replace(observation, rpo_target_seconds=None)
    assert "WithinRpo" not in {c.type for c in mirror_status(without, previous, NOW).conditions}


def test_only_the_mirrors_own_remote_topics_get_offsets() -> None:
    """The checkpoints topic on B is shared by every mirror from A to B."""
    config = CONFIG.model_copy(
        update={"selections": [SelectionPatterns(name="s", includes=["orders.*"])]}
    )
    assert operations._selected_remote(config, "orders-eu.A")
    assert not operations._selected_remote(config, "payments.A")  # another mirror's
    assert not operations._selected_remote(config, "orders")  # not a remote name of A


def test_reverse_checkpoints_only_for_the_originals_this_mirror_selects() -> None:
    """A failback's promote on B→A: a group that read `orders.A` on B resumes in `orders` on A
    only if B→A mirrors `orders` back; another mirror's `payments.A` gets nothing."""
    config = CONFIG.model_copy(
        update={"selections": [SelectionPatterns(name="s", includes=["orders.*"])]}
    )
    target = config.target.alias
    read = {f"orders.{target}", f"payments.{target}", "orders", "orders.other"}
    assert operations.reversed_originals(config, read) == {f"orders.{target}": "orders"}
