"""Promote, fail over and return: `spec.operation` carried out one phase per status refresh.

Every phase is decided again from the status and from Kafka on each refresh, and every action is
idempotent (stopping the workers, committing exactly the offsets the checkpoints name), so an
operator restarted midway carries on where the status says; a completed id is never run again.
Kafka is read and written through each side's `Cluster` (operation_kafka.py), so the phases are
tested against clusters in memory. docs/runbook-dr.md describes the phases and what the status
reports.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from confluent_kafka import KafkaException
from kubernetes.client.exceptions import ApiException

from kafka_mirror.api.models import KafkaMirrorSpec
from kafka_mirror.api.operations import (
    CommittedOffset,
    MirrorOperation,
    OperationStatus,
    Phase,
    Rpo,
    record_of,
)
from kafka_mirror.api.status import KafkaMirrorStatus
from kafka_mirror.api.worker_config import WorkerConfig
from kafka_mirror.controller import applications, catch_up, fence, standby
from kafka_mirror.controller.conditions import condition
from kafka_mirror.controller.operation_kafka import Cluster
from kafka_mirror.controller.resume import Mirrors, resume_forward
from kafka_mirror.controller.status import Event
from kafka_mirror.kafka.client import Position
from kafka_mirror.kafka.formats import Checkpoint, checkpoints_topic
from kafka_mirror.kafka.groups import CheckpointKey
from kafka_mirror.topics import TopicNamer

MAX_COMMITTED = 200  # offsets listed in the status; the count is exact
MAX_SKIPPED_REASONS, MAX_REASON = 100, 300  # why groups were skipped, in the status
MAX_PENDING_SHOWN = 3
DONE_REASON = {"Promote": "Promoted", "Failover": "FailedOver", "Return": "Returned"}
RUNNING_REASON = {"Promote": "Promoting", "Failover": "FailingOver", "Return": "Returning"}


@dataclass(frozen=True)
class Access:
    """What this refresh can reach: the two clusters (None: not usable now) and, for a Return,
    the mirrors of the namespace."""

    source: Cluster | None
    target: Cluster | None
    mirrors: Mirrors | None = None
    terminating_workers: int = 0  # worker pods being deleted, maybe flushing still
    uid: str = ""  # this mirror's: what its Return shows the forward mirror it starts again


def current(spec: KafkaMirrorSpec, status: OperationStatus | None) -> OperationStatus | None:
    """The status of the operation the spec asks for, if it has started."""
    return record_of(spec.operation, status)


def stops_workers(spec: KafkaMirrorSpec, status: OperationStatus | None) -> bool:
    """Whether the workers must be stopped: from a failover's start, after the catch-up of a
    promote or a return, and for as long as the spec names the operation, unless the Return of
    the reverse mirror has started them again, or the Return completed on a mirror that stands
    by (the standby says then)."""
    requested = spec.operation
    if requested is None or standby.returned(spec, status):
        return False
    started = current(spec, status)
    if started is not None and started.resumed_by is not None:
        return False
    if requested.type == "Failover":
        return True
    return started is not None and started.phase not in ("Fencing", "CatchingUp", "Failed")


def running_spec(spec: KafkaMirrorSpec, status: OperationStatus | None) -> KafkaMirrorSpec:
    """The spec the workers are rendered from: an operation stops them as a pause does."""
    if stops_workers(spec, status):
        return spec.model_copy(update={"paused": True})
    return spec


def pending_checkpoints(
    positions: dict[str, dict[tuple[str, int], int]],
    mirrored: dict[str, str],
    checkpoints: dict[CheckpointKey, Checkpoint],
) -> list[str]:
    """The (group, topic, partition) whose newest checkpoint does not name the group's committed
    offset on the source yet; `positions` are the groups' offsets on the source."""
    pending = []
    for group, offsets in sorted(positions.items()):
        for (topic, partition), offset in sorted(offsets.items()):
            remote = mirrored.get(topic)
            if remote is None:
                continue
            found = checkpoints.get((group, remote, partition))
            if found is None or found.upstream_offset != offset:
                pending.append(f"{group} {topic}[{partition}]")
    return pending


def _reverse(config: WorkerConfig, source: Cluster) -> dict[str, dict[Position, int]]:
    """Reverse checkpoints (a failback's promote): for the groups that read the target's remote
    topics here (`t.A` on B, with A the target), where to resume in the originals on the target."""
    wanted = {}
    for group, offsets in source.group_offsets(config.groups_checkpointed()).items():
        originals = reversed_originals(config, {t for t, _ in offsets})
        if originals:
            wanted[group] = source.original_positions(offsets, config.target.alias, originals)
    return wanted


def reversed_originals(config: WorkerConfig, topics: set[str]) -> dict[str, str]:
    """Of the topics a group read here, the target's remote topics (`t.A`) whose original this
    mirror selects (it mirrors the local `t` back): other mirrors' groups and topics get none."""
    naming = config.topic_naming
    namer = TopicNamer(config.target.alias, naming.policy, naming.separator)
    usable, _ = config.compiled_selections()
    originals = {t: namer.source_name(t) for t in topics}
    return {
        t: o for t, o in originals.items() if o is not None and any(s.matches(o) for s in usable)
    }


def _selected_remote(config: WorkerConfig, remote: str) -> bool:
    """Whether a checkpoint's topic is a remote topic of this mirror's selections: the
    checkpoints topic holds those of every mirror from the same source alias to this target."""
    original = (
        remote if config.topic_naming.policy == "identity" else config.namer().source_name(remote)
    )
    usable, _ = config.compiled_selections()
    return original is not None and any(selection.matches(original) for selection in usable)


def _commit(
    config: WorkerConfig, source: Cluster | None, target: Cluster, op: OperationStatus
) -> None:
    """Commit each selected group's newest checkpoint to the group on the target, and for a
    promote or a return the reverse checkpoints too."""
    # Only this mirror's: another mirror from the same alias writes the same topic.
    newest = target.read_checkpoints(checkpoints_topic(config.source.alias), config.mirror)
    wanted: dict[str, dict[Position, int]] = {}
    groups = config.groups_checkpointed()
    for (group, topic, partition), checkpoint in newest.items():
        if groups.matches(group) and _selected_remote(config, topic):
            wanted.setdefault(group, {})[(topic, partition)] = checkpoint.downstream_offset
    if op.type != "Failover" and source is not None:
        for group, offsets in _reverse(config, source).items():
            wanted.setdefault(group, {}).update(offsets)
    listed: list[CommittedOffset] = []
    skipped: dict[str, str] = {}
    for group, offsets in sorted(wanted.items()):
        if why := target.commit_exactly(group, offsets).skipped:
            skipped[group] = why[:MAX_REASON]
            continue
        # What the group holds now, committed by us or before: the offsets it resumes from.
        held = target.committed_offsets(group)
        listed += [
            CommittedOffset(group=group, topic=t, partition=p, offset=held.get((t, p), o))
            for (t, p), o in sorted(offsets.items())
        ]
    # Set once all went through: a pass cut short by Kafka is run again whole.
    op.committed, op.committed_count = listed[:MAX_COMMITTED], len(listed)
    op.skipped_groups = list(skipped)
    op.skipped_reasons = dict(list(skipped.items())[:MAX_SKIPPED_REASONS])


def _step(
    requested: MirrorOperation,
    op: OperationStatus,
    status: KafkaMirrorStatus,
    config: WorkerConfig,
    mirrored: dict[str, str] | None,
    access: Access,
    now: datetime,
) -> None:
    """Move `op` on by at most one phase, saying in its message what it waits for."""
    if op.phase == "Fencing":
        fence.step(config, op, access.source, mirrored, now)
    elif op.phase == "CatchingUp":
        if mirrored is None or access.source is None:
            op.message = (
                f"the source cannot be read: a {requested.type.lower()} mirrors it to lag 0 "
                "first; use Failover if it is lost"
            )
            return
        if fence.widened(config, op, access.source, mirrored, now):
            return
        op.catch_up = catch_up.progress(op.catch_up, status.total_lag, now)
        if status.total_lag and not status.replicas:
            op.message = (
                f"{status.total_lag} records to mirror but no worker runs: unpause the mirror "
                "(or scale it up) to catch up, or use Failover"
            )
        elif status.total_lag:
            op.message = (
                f"mirroring the last {status.total_lag} records{catch_up.pace(op.catch_up)}"
            )
        elif access.target is None:
            op.message = "lag 0; the target cannot be read for the final checkpoints"
        else:
            checkpoints = access.target.read_checkpoints(
                checkpoints_topic(config.source.alias), config.mirror
            )
            positions = access.source.group_offsets(config.groups_checkpointed())
            pending = pending_checkpoints(positions, mirrored, checkpoints)
            if pending:
                shown = ", ".join(pending[:MAX_PENDING_SHOWN])
                op.message = f"lag 0; waiting for the final checkpoints of {len(pending)}: {shown}"
            else:
                op.phase, op.message = "StoppingWorkers", "lag 0, final checkpoints written"
                op.message += catch_up.left_open(access.source, sorted(mirrored), now)
    elif op.phase == "StoppingWorkers":
        # A terminating pod may still copy, commit and sync group offsets: wait for it too.
        if running := status.replicas + access.terminating_workers:
            op.message = f"waiting for {running} worker{'' if running == 1 else 's'} to stop"
        elif fence.holds_back(config, op, access.source, mirrored, now):
            return  # unchecked yet, or passed after its check: failed, lifted, the workers run
        elif access.target is None:
            op.message = "workers stopped; the target cannot be read to count the RPO"
        else:
            op.rpo = access.target.rpo_on_target(status, config.source.alias)
            op.phase, op.message = "CommittingOffsets", "workers stopped"
    elif op.phase == "CommittingOffsets" and access.target is not None:
        _commit(config, access.source, access.target, op)
        applications.move(config, access.target, op)
        if requested.resume is None:
            _complete(requested, op, now)
        else:
            op.phase, op.message = "ResumingMirror", _committed_summary(op)
    elif op.phase == "ResumingMirror" and requested.resume and access.mirrors is not None:
        resumed = resume_forward(
            op, config.mirror_name, access.uid, config, requested.resume, access.mirrors, now
        )
        if resumed:
            _complete(requested, op, now, also=op.message)


def _committed_summary(op: OperationStatus) -> str:
    rpo = op.rpo or Rpo()
    reasons = [f"{g} ({op.skipped_reasons.get(g, 'see the log')})" for g in op.skipped_groups]
    skipped = f"; not handed over: {', '.join(reasons[:MAX_PENDING_SHOWN])}" + (
        f" and {len(reasons) - MAX_PENDING_SHOWN} more" if len(reasons) > MAX_PENDING_SHOWN else ""
    )
    return (
        f"{op.committed_count} group offsets committed on the target; "
        # A promote's source is there to read what it took after the catch-up: no bound.
        f"RPO {'at least ' if rpo.lower_bound and op.type == 'Failover' else ''}"
        f"{rpo.total_records} records"
        + (f", {rpo.max_seconds} s" if rpo.max_seconds else "")
        + (skipped if op.skipped_groups else "")
        + (f"; applications' rights: {op.moved_rights.message}" if op.moved_rights else "")
    )


def _complete(
    requested: MirrorOperation, op: OperationStatus, now: datetime, also: str = ""
) -> None:
    op.phase, op.completed_at = "Completed", now
    summary = f"{DONE_REASON[requested.type].lower()}: {_committed_summary(op)}"
    op.message = f"{summary}; {also}" if also else summary


def advance(
    spec: KafkaMirrorSpec,
    previous: OperationStatus | None,
    status: KafkaMirrorStatus,
    config: WorkerConfig,
    mirrored: dict[str, str] | None,
    access: Access,
    now: datetime,
) -> tuple[OperationStatus | None, list[Event]]:
    """The operation's status after this refresh, and an event per phase entered.
    `mirrored` is the plan's source topic → remote topic, None when the source was not read."""
    requested = spec.operation
    previous, lifted, waiting = fence.lift_left_behind(
        config, access.source, requested, previous, now
    )
    if requested is None or waiting:
        return previous, lifted  # the record of the last operation stays
    op = current(spec, previous)
    if op is None:
        # A promote and a return hand over from a live source: nothing it took is left behind.
        first: Phase = "StoppingWorkers" if requested.type == "Failover" else "CatchingUp"
        if fence.wanted(spec, requested):
            first = "Fencing"
        op = OperationStatus(id=requested.id, type=requested.type, phase=first, started_at=now)
        if fence.left_behind(requested, previous) and previous is not None:
            op.fence = previous.fence
        started = Event("Normal", f"{requested.type}Started", f"{requested.type} {requested.id}")
        return _with_reverse(spec, config, op, access), [*lifted, started]
    op = _with_reverse(spec, config, op, access)
    if fence.to_lift(op):
        op = op.model_copy(deep=True)
        return op, fence.lift(config, access.source, op, now)
    if op.phase == "Failed":
        return op, []
    if op.phase == "Completed":
        if applications.to_return(op):
            return applications.move_back(config, access.target, op, now)
        op = op.model_copy(deep=True)
        try:
            widened = fence.widened_after(config, op, access.source, mirrored, now)
        except (KafkaException, TimeoutError):
            widened = []  # the next refresh looks again
        if widened:
            return op, widened
        return _source_back(op, status, config, mirrored, access)
    op = op.model_copy(deep=True)
    before, said = op.phase, op.message
    try:
        _step(requested, op, status, config, mirrored, access, now)
    except (KafkaException, TimeoutError) as error:
        op.message = f"{op.phase}: Kafka did not answer, trying again: {error}"
    if op.phase == before:
        # Each step of starting the forward mirror again is worth an event of its own.
        resuming = op.phase == "ResumingMirror" and op.message != said
        return op, [Event("Normal", op.phase, op.message)] if resuming else []
    if op.phase == "Failed":
        return op, [Event("Warning", f"{requested.type}Failed", op.message)]
    reason = DONE_REASON[requested.type] if op.phase == "Completed" else op.phase
    return op, [Event("Normal", reason, op.message)]


def _with_reverse(
    spec: KafkaMirrorSpec, config: WorkerConfig, op: OperationStatus, access: Access
) -> OperationStatus:
    """A promote or failover's record with the uid of the mirror `spec.reverse` names, once seen
    (the only one whose Return may start this mirror again), kept from then on. That mirror
    must stand by for this one (`standbyFor`): the pair is declared from both sides."""
    if op.type == "Return" or spec.reverse is None or op.reverse_uid is not None:
        return op
    if access.mirrors is None or op.resumed_by is not None:
        return op
    try:
        reverse = access.mirrors.read(spec.reverse)
    except (ValueError, ApiException):
        return op  # the next refresh records it
    way_back = (spec.target.alias, spec.source.alias)
    if reverse is None or (reverse.spec.source.alias, reverse.spec.target.alias) != way_back:
        return op
    if reverse.spec.standby_for != config.mirror_name:
        return op
    return op.model_copy(update={"reverse_uid": reverse.uid})


def _source_back(
    op: OperationStatus,
    status: KafkaMirrorStatus,
    config: WorkerConfig,
    mirrored: dict[str, str] | None,
    access: Access,
) -> tuple[OperationStatus, list[Event]]:
    """Once a failed-over source can be read again: what it holds that the target never had
    (its RPO, exact now, and what it took after it was last read), counted once, per topic."""
    if op.type != "Failover" or op.source_back is not None or op.resumed_by is not None:
        return op, []
    if mirrored is None or access.target is None:
        return op, []  # the source is still away (or the target cannot be read now)
    try:
        back = access.target.rpo_on_target(status, config.source.alias)
    except (KafkaException, TimeoutError):
        return op, []  # the next refresh counts
    op = op.model_copy(update={"source_back": back})
    topics = ", ".join(f"{t.name} {t.records}" for t in back.topics[:MAX_PENDING_SHOWN])
    message = (
        f"{config.source.alias} can be read again and holds {back.total_records} records "
        f"{config.target.alias} never had{f' ({topics})' if topics else ''}: a Return of the "
        "reverse mirror starts this mirror again, which copies them"
    )
    return op, [Event("Normal", "SourceBack", message)]


def with_operation(
    status: KafkaMirrorStatus, spec: KafkaMirrorSpec, previous: KafkaMirrorStatus, now: datetime
) -> None:
    """Ready and OperationDone as the operation has them: a mirror that was promoted or failed
    over no longer mirrors, which is what its owner asked; once the Return of the reverse
    mirror has started it again, Ready is its own again."""
    op = current(spec, status.operation)
    if op is None:
        return
    done = op.phase == "Completed"
    reason = DONE_REASON[op.type] if done else RUNNING_REASON[op.type]
    message = f"{op.type} {op.id}: {op.message or op.phase}"
    gen = status.observed_generation
    others = [c for c in status.conditions if c.type not in ("Ready", "OperationDone")]
    ready = [c for c in status.conditions if c.type == "Ready"]
    if op.resumed_by is not None:
        by = op.resumed_by
        reason, message = "Resumed", f"{message}; started again by {by.mirror}'s Return {by.id}"
    elif op.phase != "Failed" and not standby.returned(spec, previous.operation):
        # A failed operation left the mirror running, and a returned standby's Ready is its own
        # (Standby, or Mirroring in the next cycle), from the refresh after the one its Return
        # completed in (the standby read that record): their Ready is their own.
        ready = [condition(previous.conditions, "Ready", False, reason, message, gen, now)]
    status.conditions = [
        *ready,
        *others,
        condition(
            previous.conditions,
            "OperationDone",
            done,
            reason if done else op.phase,
            message,
            gen,
            now,
        ),
    ]
