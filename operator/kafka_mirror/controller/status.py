"""Status as people read it: pure functions from what was observed to the status objects.

Conditions follow the Kubernetes convention (kstatus): `Ready` says whether the mirror does its
job, with a reason and a message a person can act on; `lastTransitionTime` only moves when a
condition's status changes. Lists are bounded so a mirror of 10,000 topics stays small.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime

from kafka_mirror.api.status import (
    Condition,
    KafkaMirrorStatus,
    TopicStatus,
)
from kafka_mirror.controller.conditions import condition, progress_conditions
from kafka_mirror.controller.schedule import runs_between
from kafka_mirror.kafka.formats import read_schema_wait
from kafka_mirror.kafka.observe import PartitionProgress
from kafka_mirror.topics import TopicPlan

MAX_TOPIC_STATUSES = 100  # per-topic lag and latency, largest lag first
MAX_TOPIC_NAMES = 500  # activeTopics and matchedTopics; the counts are exact
MAX_SKIPPED = 100
MAX_PARTITION_PROBLEMS = 20
SCHEMA_WAIT_REASONS = {
    "refused": "SchemaRefused",  # a person must act: the reason says what
    "unreachable": "RegistryUnreachable",
    "pending": "SchemaPending",
}
STALE_AFTER_RUNS = 3  # scheduled runs since the last report: the first two had time to report


@dataclass(frozen=True)
class Problem:
    """Why something cannot work: a condition reason and an actionable message."""

    reason: str
    message: str


@dataclass(frozen=True)
class DeploymentState:
    desired: int
    replicas: int
    ready: int
    # Pods being deleted, which may still flush their last records (`replicas` leaves them out;
    # the Deployment reports them from Kubernetes 1.35, 0 before).
    terminating: int = 0
    problem: str | None = None  # what the Deployment's conditions say holds its pods back


@dataclass(frozen=True)
class KafkaState:
    """What Kafka said on this refresh."""

    plan: TopicPlan
    target_topics: set[str]
    progress: list[PartitionProgress]
    oldest_pending_ms: dict[tuple[str, int], int]
    # When the pending records were read: their age is taken then, not at the tick's start (a
    # record the source took between the two had an age of 0, in a failover drill's RPO too).
    read_at: datetime
    acls_synced: int | None = None  # the bindings the workers' ACL sync holds on the target


@dataclass(frozen=True)
class MirrorObservation:
    generation: int
    paused: bool
    label_selector: str
    deployment: DeploymentState
    selection_problems: list[str]
    selection_count: int
    source_problem: Problem | None = None
    target_problem: Problem | None = None
    kafka: KafkaState | None = None
    audit_schedule: str | None = None  # None while the audit is suspended
    rpo_target_seconds: int | None = None
    acknowledged_lost_to_retention: int = 0  # spec.acknowledgedLostToRetention
    standby: str | None = None  # why the mirror stands by (spec.standbyFor), if it does
    schema_registry: bool = False  # spec.schemaRegistry is set


@dataclass(frozen=True)
class Event:
    type: str  # Normal or Warning
    reason: str
    message: str


def _topic_statuses(kafka: KafkaState) -> tuple[list[TopicStatus], int, float | None]:
    """Per-topic lag and latency (largest lag first, bounded), total lag, worst latency."""
    by_topic: dict[str, list[PartitionProgress]] = defaultdict(list)
    for progress in kafka.progress:
        by_topic[progress.topic].append(progress)
    read_ms = kafka.read_at.timestamp() * 1000
    statuses: list[TopicStatus] = []
    for topic, remote in kafka.plan.mirrored.items():
        partitions = by_topic.get(topic, [])
        lag = sum(p.lag for p in partitions)
        lost = sum(p.loss.records for p in partitions if p.loss is not None)
        latency: float | None = 0.0
        for p in partitions:
            if p.lag == 0:
                continue
            stamp = kafka.oldest_pending_ms.get((p.topic, p.partition))
            if stamp is None:
                latency = None  # not sampled this time: unknown rather than wrong
                break
            latency = max(latency or 0.0, round(max(read_ms - stamp, 0) / 1000, 3))
        statuses.append(
            TopicStatus(
                name=topic,
                remote_name=remote,
                lag=lag,
                latency_seconds=latency,
                source_end=sum(p.end for p in partitions),
                lost_to_retention=lost,
            )
        )
    # Topics that lost records first: the bound must not hide them.
    statuses.sort(key=lambda s: (-s.lost_to_retention, -s.lag, s.name))
    total = sum(s.lag for s in statuses)
    latencies = [s.latency_seconds for s in statuses if s.latency_seconds is not None]
    return statuses[:MAX_TOPIC_STATUSES], total, max(latencies) if latencies else None


def _ready(obs: MirrorObservation, active: int) -> tuple[bool, str, str]:
    deployment = obs.deployment
    for side, problem in (("Source", obs.source_problem), ("Target", obs.target_problem)):
        if problem is not None:
            return False, f"{side}{problem.reason}", problem.message
    if obs.paused:
        return False, "Paused", "spec.paused is true: the workers are stopped, their progress kept"
    if obs.standby is not None:
        return False, "Standby", obs.standby
    if deployment.desired == 0:
        return False, "NoWorkers", "spec.replicas is 0: scale the mirror up to mirror topics"
    if deployment.ready < deployment.desired:
        why = f": {deployment.problem}" if deployment.problem else ""
        return (
            False,
            "WorkersNotReady",
            f"{deployment.ready} of {deployment.desired} workers ready{why}",
        )
    if obs.selection_count == 0:
        return (
            True,
            "NoSelection",
            "workers run, but no MirrorTopicSelection names this mirror: nothing is mirrored",
        )
    workers = f"{deployment.ready} worker{'' if deployment.ready == 1 else 's'}"
    return True, "Mirroring", f"{workers} mirroring {active} topics"


def _audit_condition(
    previous: KafkaMirrorStatus, generation: int, now: datetime, schedule: str | None
) -> Condition:
    audit = previous.last_audit
    if audit is None or audit.result is None:
        message = "no audit has reported yet; it runs on spec.audit.schedule"
        return condition(
            previous.conditions, "AuditPassed", None, "NoAudit", message, generation, now
        )
    # Two scheduled runs came and went (each had until the next to report) with no report:
    # the last result no longer says anything about the mirror now.
    since = audit.time
    try:
        missed = runs_between(schedule, since, now, STALE_AFTER_RUNS) if schedule and since else 0
    except ValueError as error:  # never a failed refresh: Ready, lag and operations go on
        message = (
            f"spec.audit.schedule ({schedule}) cannot be read ({error}), so whether the last "
            f"audit (which said {audit.result}) is current is not known: fix the schedule"
        )
        return condition(
            previous.conditions, "AuditPassed", None, "ScheduleUnreadable", message, generation, now
        )
    if since is not None and missed >= STALE_AFTER_RUNS:
        message = (
            f"no audit has reported since {since.isoformat()} though "
            f"spec.audit.schedule ({schedule}) ran it twice since: check the mirror's audit "
            f"CronJob and its jobs' logs; the last audit said {audit.result}"
        )
        return condition(
            previous.conditions, "AuditPassed", None, "AuditStale", message, generation, now
        )
    passed = audit.result == "Passed"
    message = audit.message or (
        f"{audit.records_checked} records checked, {audit.missing} missing, "
        f"{audit.unsafe_checkpoints} unsafe checkpoints"
    )
    return condition(
        previous.conditions, "AuditPassed", passed, f"Audit{audit.result}", message, generation, now
    )


def unacknowledged_loss(total: int, acknowledged: int) -> int:
    """Records lost to retention that `spec.acknowledgedLostToRetention` does not cover: the
    loss keeps the mirror Degraded until someone has dealt with it and says so (the count
    never goes down by itself: the records are gone), and a later loss counts again."""
    return max(total - acknowledged, 0)


def _lost_message(status: KafkaMirrorStatus, acknowledged: int) -> str:
    lost = [t for t in status.topics if t.lost_to_retention]
    where = ", ".join(f"{t.name} ({t.lost_to_retention})" for t in lost[:3])
    total = status.total_lost_to_retention
    since = (
        f", {total - acknowledged} since the {acknowledged} acknowledged" if acknowledged else ""
    )
    return (
        f"{total} records left the source before they were mirrored ({where}{since}): the "
        "mirror fell behind the source's retention. Raise the source topics' retention.ms "
        "above the longest time the mirror may be stopped or behind, or scale the mirror up "
        "(spec.replicas) so that it keeps up; the records lost are on neither cluster. Once "
        f"dealt with, set spec.acknowledgedLostToRetention to {total} to clear this"
    )


def _degraded_reason(lost: bool, not_flowing: bool, degraded: bool) -> str:
    if lost:
        return "RecordsLostToRetention"
    if not_flowing:
        return "PartitionsNotFlowing"
    return "SelectionProblems" if degraded else "AsExpected"


def mirror_status(
    obs: MirrorObservation, previous: KafkaMirrorStatus, now: datetime
) -> KafkaMirrorStatus:
    """The KafkaMirror status for one observation."""
    status = KafkaMirrorStatus(
        observed_generation=obs.generation,
        replicas=obs.deployment.replicas,
        ready_replicas=obs.deployment.ready,
        label_selector=obs.label_selector,
        last_audit=previous.last_audit,
    )
    kafka = obs.kafka
    if kafka is not None:
        topics, total, worst = _topic_statuses(kafka)
        active = sorted(t for t, r in kafka.plan.mirrored.items() if r in kafka.target_topics)
        status.topics, status.total_lag, status.max_latency_seconds = topics, total, worst
        status.total_lost_to_retention = sum(
            p.loss.records for p in kafka.progress if p.loss is not None
        )
        status.active_topic_count, status.active_topics = len(active), active[:MAX_TOPIC_NAMES]
        status.skipped_topics = kafka.plan.skipped[:MAX_SKIPPED]
        status.partition_problems = [p.problem for p in kafka.progress if p.problem][
            :MAX_PARTITION_PROBLEMS
        ]
        status.source_last_seen = now
        status.acls_synced = kafka.acls_synced
    else:  # Kafka could not be read: keep the last known figures rather than claim zeros
        status.active_topic_count, status.active_topics = (
            previous.active_topic_count,
            previous.active_topics,
        )
        status.topics, status.total_lag = previous.topics, previous.total_lag
        status.total_lost_to_retention = previous.total_lost_to_retention
        status.max_latency_seconds = previous.max_latency_seconds
        status.skipped_topics = previous.skipped_topics
        status.partition_problems = previous.partition_problems
        status.source_last_seen = previous.source_last_seen
        status.acls_synced = previous.acls_synced

    before, gen = previous.conditions, obs.generation
    ready, reason, message = _ready(obs, status.active_topic_count)
    if ready and status.total_lag:
        message += f"; lag {status.total_lag} records"
    degraded: list[str] = list(obs.selection_problems)
    if status.skipped_topics:
        names = ", ".join(s.name for s in status.skipped_topics[:3])
        degraded.append(
            f"{len(status.skipped_topics)} selected topics cannot be mirrored ({names})"
        )
    problems = [p for p in kafka.progress if p.problem] if kafka is not None else []
    if problems:
        degraded.append(
            f"{len(problems)} partitions do not flow ({'; '.join(p.problem for p in problems[:2])})"
        )
    acknowledged = obs.acknowledged_lost_to_retention
    lost = unacknowledged_loss(status.total_lost_to_retention, acknowledged) > 0
    if lost:
        degraded.insert(0, _lost_message(status, acknowledged))
    ready_condition = condition(before, "Ready", ready, reason, message, gen, now)
    status.conditions = [
        ready_condition,
        *progress_conditions(ready_condition, before, gen, now),
        condition(
            before,
            "Paused",
            obs.paused,
            "Paused" if obs.paused else "Running",
            "workers stopped by spec.paused" if obs.paused else "workers run",
            gen,
            now,
        ),
        condition(
            before,
            "Degraded",
            bool(degraded),
            _degraded_reason(lost, bool(problems), bool(degraded)),
            "; ".join(degraded) or "every selected topic is mirrored",
            gen,
            now,
        ),
        _audit_condition(previous, gen, now, obs.audit_schedule),
    ]
    if obs.rpo_target_seconds is not None:
        status.conditions.append(_rpo_condition(status, obs.rpo_target_seconds, gen, before, now))
    if obs.schema_registry:
        status.conditions.append(_schemas_condition(kafka, gen, before, now))
    return status


def _schemas_condition(
    kafka: KafkaState | None, gen: int, before: list[Condition], now: datetime
) -> Condition:
    """Whether any record waits for its schema to reach the target's registry, as the workers'
    commit notes say (`read_schema_wait`); the worst state names the reason."""
    if kafka is None:
        message = "the workers' offsets were not read this time"
        return condition(before, "SchemasSynced", None, "NotObserved", message, gen, now)
    waits = [(found, p.problem) for p in kafka.progress if (found := read_schema_wait(p.problem))]
    if not waits:
        message = "no mirrored record waits for its schema"
        return condition(before, "SchemasSynced", True, "NoneWaiting", message, gen, now)
    states = {state for (_, state), _ in waits}
    worst = next(state for state in ("refused", "unreachable", "pending") if state in states)
    ids = sorted({schema_id for (schema_id, _), _ in waits})
    named = ", ".join(map(str, ids[:5])) + (", …" if len(ids) > 5 else "")
    first = next(problem for (_, state), problem in waits if state == worst)
    message = f"{len(waits)} partitions wait for schema ids {named}: {first}"
    return condition(before, "SchemasSynced", False, SCHEMA_WAIT_REASONS[worst], message, gen, now)


def _rpo_condition(
    status: KafkaMirrorStatus, target: int, gen: int, before: list[Condition], now: datetime
) -> Condition:
    """Whether a failover now would lose less than the objective: the oldest record not yet
    mirrored is younger than it."""
    latency = status.max_latency_seconds
    if latency is None:
        message = "the age of the oldest unmirrored record is not known now"
        return condition(before, "WithinRpo", None, "LatencyUnknown", message, gen, now)
    within = latency <= target
    message = f"oldest unmirrored record {latency} s old; RPO target {target} s"
    reason = "WithinTarget" if within else "OverTarget"
    return condition(before, "WithinRpo", within, reason, message, gen, now)


def unusable_spec_status(
    previous: KafkaMirrorStatus, generation: int, problem: Problem, now: datetime
) -> KafkaMirrorStatus:
    """The status of a mirror whose stored spec the operator cannot or may not use (reasons
    `InvalidSpec`, `NotAllowed`): only Ready changes."""
    status = previous.model_copy()
    status.observed_generation = generation
    ready = condition(
        previous.conditions, "Ready", False, problem.reason, problem.message, generation, now
    )
    progress = progress_conditions(ready, previous.conditions, generation, now)
    replaced = {"Ready", *(c.type for c in progress)}
    status.conditions = [
        ready,
        *progress,
        *(c for c in previous.conditions if c.type not in replaced),
    ]
    return status


def mirror_events(previous: KafkaMirrorStatus, current: KafkaMirrorStatus) -> list[Event]:
    """Notable changes between two statuses, as Kubernetes events."""
    events: list[Event] = []
    started = sorted(set(current.active_topics) - set(previous.active_topics))
    if started:
        shown = ", ".join(started[:10]) + (" …" if len(started) > 10 else "")
        events.append(Event("Normal", "TopicsActive", f"mirroring {len(started)} more: {shown}"))
    skipped_before = {s.name for s in previous.skipped_topics}
    for skipped in current.skipped_topics:
        if skipped.name not in skipped_before:
            events.append(Event("Warning", "TopicSkipped", f"{skipped.name}: {skipped.reason}"))
    old = {c.type: c for c in previous.conditions}
    for new in current.conditions:
        was = old.get(new.type)
        if was is not None and was.status == new.status and was.reason == new.reason:
            continue
        if new.type == "Ready":
            kind = "Normal" if new.status == "True" else "Warning"
            events.append(Event(kind, new.reason, new.message))
    return events
