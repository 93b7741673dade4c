"""Status as people read it: conditions, lag and latency, bounded lists, events, selections."""

from __future__ import annotations

from dataclasses import replace
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from kafka_mirror.api.status import (
    AuditResult,
    Condition,
    KafkaMirrorStatus,
    MirrorTopicSelectionStatus,
    SkippedTopic,
)
from kafka_mirror.controller.reconcile import deployment_problem
from kafka_mirror.controller.selections import selection_status
from kafka_mirror.controller.status import (
    MAX_SKIPPED,
    MAX_TOPIC_NAMES,
    MAX_TOPIC_STATUSES,
    DeploymentState,
    Event,
    KafkaState,
    MirrorObservation,
    Problem,
    mirror_events,
    mirror_status,
    unusable_spec_status,
)
from kafka_mirror.kafka.observe import PartitionProgress
from kafka_mirror.topics import NameFilter, TopicPlan
from tests.helpers.kstatus import kstatus

NOW = datetime(2025, 6, 1, 12, 0, 0, tzinfo=UTC)
NOW_MS = int(NOW.timestamp() * 1000)
LATER = NOW + timedelta(minutes=5)
MUCH_LATER = NOW + timedelta(hours=1)


def plan(*topics: str, skipped: tuple[SkippedTopic, ...] = ()) -> TopicPlan:
    """Source topics mirrored under the suffix policy from A to B."""
    return TopicPlan({t: f"{t}.A" for t in topics}, list(skipped))


def kafka_state(
    mirrored: TopicPlan | None = None,
    target_topics: set[str] | None = None,
    progress: list[PartitionProgress] | None = None,
    oldest_pending_ms: dict[tuple[str, int], int] | None = None,
    read_at: datetime = NOW,
) -> KafkaState:
    mirrored = mirrored if mirrored is not None else plan("orders", "payments")
    return KafkaState(
        plan=mirrored,
        target_topics=(
            target_topics if target_topics is not None else set(mirrored.mirrored.values())
        ),
        progress=progress if progress is not None else [],
        oldest_pending_ms=oldest_pending_ms if oldest_pending_ms is not None else {},
        read_at=read_at,
    )


def observation(**overrides: Any) -> MirrorObservation:
    """Two ready workers, one selection, both clusters fine, everything caught up."""
    base = MirrorObservation(
        generation=3,
        paused=False,
        label_selector="app.kubernetes.io/name=kafka-mirror",
        deployment=DeploymentState(desired=2, replicas=2, ready=2),
        selection_problems=[],
        selection_count=1,
        kafka=kafka_state(),
    )
    return replace(base, **overrides)


def status_of(
    obs: MirrorObservation, previous: KafkaMirrorStatus | None = None
) -> KafkaMirrorStatus:
    return mirror_status(obs, previous or KafkaMirrorStatus(), NOW)


def get(conditions: list[Condition], type_: str) -> Condition:
    [found] = [c for c in conditions if c.type == type_]
    return found


def ready_of(status: KafkaMirrorStatus | MirrorTopicSelectionStatus) -> Condition:
    return get(status.conditions, "Ready")


def topic(status: KafkaMirrorStatus, name: str) -> Any:
    [found] = [t for t in status.topics if t.name == name]
    return found


# --- Ready ---------------------------------------------------------------------------------------


def test_ready_when_workers_are_ready_and_the_clusters_fine() -> None:
    status = status_of(observation())
    ready = ready_of(status)
    assert (ready.status, ready.reason) == ("True", "Mirroring")
    assert ready.message == "2 workers mirroring 2 topics"
    assert ready.observed_generation == 3
    assert status.observed_generation == 3
    assert (status.replicas, status.ready_replicas) == (2, 2)
    assert status.label_selector == "app.kubernetes.io/name=kafka-mirror"


def test_ready_message_mentions_the_lag_while_there_is_some() -> None:
    progress = [PartitionProgress("orders", 0, 0, 50, 20)]
    status = status_of(observation(kafka=kafka_state(progress=progress)))
    assert ready_of(status).status == "True"
    assert ready_of(status).message.endswith("; lag 30 records")


@pytest.mark.parametrize(
    ("problems", "reason"),
    [
        ({"source_problem": Problem("Unreachable", "cannot reach A")}, "SourceUnreachable"),
        (
            {"source_problem": Problem("AuthenticationFailed", "A refused the credentials")},
            "SourceAuthenticationFailed",
        ),
        ({"target_problem": Problem("SecretNotFound", "no Secret b")}, "TargetSecretNotFound"),
        ({"target_problem": Problem("Unreachable", "cannot reach B")}, "TargetUnreachable"),
    ],
)
def test_cluster_problems_make_ready_false_with_a_prefixed_reason(
    problems: dict[str, Problem], reason: str
) -> None:
    status = status_of(observation(kafka=None, **problems))
    ready = ready_of(status)
    assert (ready.status, ready.reason) == ("False", reason)
    [problem] = problems.values()
    assert ready.message == problem.message


def test_a_source_problem_is_reported_before_a_target_problem() -> None:
    obs = observation(
        kafka=None,
        source_problem=Problem("Unreachable", "cannot reach A"),
        target_problem=Problem("Unreachable", "cannot reach B"),
    )
    assert ready_of(status_of(obs)).reason == "SourceUnreachable"


def test_paused_mirror_is_not_ready_and_says_so() -> None:
    obs = observation(paused=True, deployment=DeploymentState(desired=0, replicas=0, ready=0))
    status = status_of(obs)
    ready = ready_of(status)
    assert (ready.status, ready.reason) == ("False", "Paused")
    assert "spec.paused" in ready.message
    paused = get(status.conditions, "Paused")
    assert (paused.status, paused.reason) == ("True", "Paused")


def test_a_mirror_standing_by_is_not_ready_and_says_for_what() -> None:
    waiting = "standing by for a-to-b: no workers until its Promote or Failover completes"
    obs = observation(standby=waiting, deployment=DeploymentState(desired=0, replicas=0, ready=0))
    ready = ready_of(status_of(obs))
    assert (ready.status, ready.reason, ready.message) == ("False", "Standby", waiting)


def test_running_mirror_has_paused_false() -> None:
    paused = get(status_of(observation()).conditions, "Paused")
    assert (paused.status, paused.reason) == ("False", "Running")


def test_workers_not_ready_says_how_many_are() -> None:
    obs = observation(deployment=DeploymentState(desired=2, replicas=2, ready=1))
    ready = ready_of(status_of(obs))
    assert (ready.status, ready.reason) == ("False", "WorkersNotReady")
    assert ready.message == "1 of 2 workers ready"


def test_workers_not_ready_says_why_when_the_deployment_does() -> None:
    # As a ResourceQuota leaves the Deployment: no pod, and the reason only in its conditions.
    quota = (
        'pods "a-to-b-worker-7d9f-x2" is forbidden: exceeded quota: pods, requested: pods=1, '
        "used: pods=10, limited: pods=10"
    )
    conditions = [
        {"type": "Available", "status": "False", "reason": "MinimumReplicasUnavailable"},
        {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate", "message": quota},
        {"type": "Progressing", "status": "True", "reason": "ReplicaSetUpdated"},
    ]
    state = DeploymentState(1, 0, 0, problem=deployment_problem(conditions))
    ready = ready_of(status_of(observation(deployment=state)))
    assert ready.message == f"0 of 1 workers ready: FailedCreate: {quota}"
    stuck = [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]
    assert deployment_problem(stuck) == "ProgressDeadlineExceeded"
    assert deployment_problem(conditions[:1] + conditions[2:]) is None


def test_no_workers_when_scaled_to_zero() -> None:
    obs = observation(deployment=DeploymentState(desired=0, replicas=0, ready=0))
    ready = ready_of(status_of(obs))
    assert (ready.status, ready.reason) == ("False", "NoWorkers")
    assert "spec.replicas" in ready.message


def test_ready_without_selections_says_nothing_is_mirrored() -> None:
    obs = observation(selection_count=0, kafka=kafka_state(mirrored=plan()))
    ready = ready_of(status_of(obs))
    assert (ready.status, ready.reason) == ("True", "NoSelection")
    assert "MirrorTopicSelection" in ready.message


# --- lastTransitionTime --------------------------------------------------------------------------


def test_transition_time_is_kept_while_the_status_holds_and_moves_when_it_flips() -> None:
    first = mirror_status(observation(), KafkaMirrorStatus(), NOW)
    assert ready_of(first).last_transition_time == NOW
    # Still True, another reason: the condition did not transition.
    second = mirror_status(observation(selection_count=0), first, LATER)
    assert (ready_of(second).status, ready_of(second).reason) == ("True", "NoSelection")
    assert ready_of(second).last_transition_time == NOW
    # Now False: it did.
    not_ready = observation(deployment=DeploymentState(desired=2, replicas=2, ready=0))
    third = mirror_status(not_ready, second, MUCH_LATER)
    assert ready_of(third).status == "False"
    assert ready_of(third).last_transition_time == MUCH_LATER
    # The conditions that held keep their time.
    assert get(third.conditions, "Paused").last_transition_time == NOW
    assert get(third.conditions, "Degraded").last_transition_time == NOW


# --- lag and latency -----------------------------------------------------------------------------


def test_partition_lag_is_end_minus_committed_or_minus_start_when_nothing_is_committed() -> None:
    assert PartitionProgress("t", 0, start=0, end=100, committed=40).lag == 60
    assert PartitionProgress("t", 0, start=10, end=50, committed=None).lag == 40
    assert PartitionProgress("t", 0, start=10, end=50, committed=50).lag == 0
    # Records deleted by retention before they were mirrored are no longer lag.
    assert PartitionProgress("t", 0, start=50, end=80, committed=10).lag == 30


def test_topic_lag_sums_its_partitions() -> None:
    progress = [
        PartitionProgress("orders", 0, start=0, end=100, committed=40),  # 60
        PartitionProgress("orders", 1, start=10, end=50, committed=None),  # 40
        PartitionProgress("payments", 0, start=0, end=7, committed=7),  # 0
    ]
    pending = {("orders", 0): NOW_MS - 1_000, ("orders", 1): NOW_MS - 2_000}
    status = status_of(observation(kafka=kafka_state(progress=progress, oldest_pending_ms=pending)))
    assert topic(status, "orders").lag == 100
    assert topic(status, "orders").remote_name == "orders.A"
    assert topic(status, "payments").lag == 0
    assert status.total_lag == 100


def test_latency_is_the_age_of_the_oldest_pending_record() -> None:
    progress = [
        PartitionProgress("orders", 0, start=0, end=100, committed=40),
        PartitionProgress("orders", 1, start=0, end=100, committed=90),
    ]
    pending = {("orders", 0): NOW_MS - 12_500, ("orders", 1): NOW_MS - 3_000}
    status = status_of(observation(kafka=kafka_state(progress=progress, oldest_pending_ms=pending)))
    assert topic(status, "orders").latency_seconds == 12.5
    assert status.max_latency_seconds == 12.5


def test_latency_is_the_age_when_the_record_was_read_not_at_the_ticks_start() -> None:
    """A record the source took after the tick began (the tick's `now`), read later in it."""
    progress = [PartitionProgress("orders", 0, start=0, end=100, committed=40)]
    pending = {("orders", 0): NOW_MS + 2_000}
    read = kafka_state(
        progress=progress, oldest_pending_ms=pending, read_at=NOW + timedelta(seconds=5)
    )
    status = status_of(observation(kafka=read))
    assert topic(status, "orders").latency_seconds == 3.0


def test_latency_is_zero_when_caught_up() -> None:
    progress = [PartitionProgress("orders", 0, start=0, end=100, committed=100)]
    status = status_of(observation(kafka=kafka_state(progress=progress)))
    assert topic(status, "orders").latency_seconds == 0
    assert topic(status, "payments").latency_seconds == 0  # no partitions seen: nothing pending
    assert status.max_latency_seconds == 0


def test_latency_is_unknown_when_a_lagging_partition_was_not_sampled() -> None:
    progress = [
        PartitionProgress("orders", 0, start=0, end=100, committed=40),
        PartitionProgress("orders", 1, start=0, end=100, committed=50),
        PartitionProgress("payments", 0, start=0, end=10, committed=5),
    ]
    pending = {("orders", 0): NOW_MS - 4_000, ("payments", 0): NOW_MS - 2_000}
    status = status_of(observation(kafka=kafka_state(progress=progress, oldest_pending_ms=pending)))
    assert topic(status, "orders").latency_seconds is None
    assert topic(status, "payments").latency_seconds == 2.0
    assert status.max_latency_seconds == 2.0  # from what is known


def test_topics_are_sorted_by_lag_and_bounded_while_the_total_covers_all() -> None:
    count = MAX_TOPIC_STATUSES + 50
    names = [f"topic-{i:04d}" for i in range(count)]
    progress = [PartitionProgress(name, 0, 0, i + 1, 0) for i, name in enumerate(names)]
    status = status_of(observation(kafka=kafka_state(mirrored=plan(*names), progress=progress)))
    assert len(status.topics) == MAX_TOPIC_STATUSES
    lags = [t.lag for t in status.topics]
    assert lags == sorted(lags, reverse=True)
    assert status.topics[0].name == names[-1]
    assert status.total_lag == sum(range(1, count + 1))


def test_active_topics_are_those_whose_remote_exists_on_the_target() -> None:
    kafka = kafka_state(
        mirrored=plan("orders", "payments", "refunds"),
        target_topics={"orders.A", "refunds.A", "payments"},  # not payments.A
    )
    status = status_of(observation(kafka=kafka))
    assert status.active_topics == ["orders", "refunds"]
    assert status.active_topic_count == 2
    assert ready_of(status).message == "2 workers mirroring 2 topics"


def test_ten_thousand_topics_keep_the_status_small_and_the_count_exact() -> None:
    # Long names, as real ones can be: the bound has to hold for them too.
    names = [f"{'business-unit.' * 12}topic-{i:05d}" for i in range(10_000)]
    skipped = tuple(SkippedTopic(name=f"{n}.B", reason="came from B: a cycle") for n in names[:300])
    mirrored = plan(*names, skipped=skipped)
    progress = [
        PartitionProgress(n, p, 0, 1_000 + i, 10) for i, n in enumerate(names) for p in (0, 1)
    ]
    pending = {(p.topic, p.partition): NOW_MS - 60_000 for p in progress}
    kafka = kafka_state(mirrored=mirrored, progress=progress, oldest_pending_ms=pending)
    status = status_of(observation(kafka=kafka))
    assert status.active_topic_count == 10_000
    assert len(status.active_topics) == MAX_TOPIC_NAMES
    assert status.active_topics == sorted(names)[:MAX_TOPIC_NAMES]
    assert len(status.topics) == MAX_TOPIC_STATUSES
    assert len(status.skipped_topics) == MAX_SKIPPED
    assert status.total_lag == sum(2 * (1_000 + i - 10) for i in range(10_000))
    size = len(status.model_dump_json(by_alias=True))
    assert size < 250_000, f"status is {size} bytes"


# --- when Kafka cannot be read -------------------------------------------------------------------


def test_previous_figures_are_kept_when_kafka_cannot_be_read() -> None:
    progress = [PartitionProgress("orders", 0, 0, 100, 40)]
    pending = {("orders", 0): NOW_MS - 5_000}
    kafka = kafka_state(
        mirrored=plan("orders", "payments", skipped=(SkippedTopic(name="x.B", reason="cycle"),)),
        progress=progress,
        oldest_pending_ms=pending,
    )
    before = status_of(observation(kafka=kafka))
    unreachable = observation(kafka=None, source_problem=Problem("Unreachable", "down"))
    after = mirror_status(unreachable, before, LATER)
    assert after.active_topics == before.active_topics == ["orders", "payments"]
    assert after.active_topic_count == 2
    assert after.topics == before.topics
    assert after.total_lag == 60
    assert after.max_latency_seconds == 5.0
    assert after.skipped_topics == before.skipped_topics
    assert (ready_of(after).status, ready_of(after).reason) == ("False", "SourceUnreachable")


# --- Degraded and AuditPassed --------------------------------------------------------------------


def test_not_degraded_when_every_selected_topic_is_mirrored() -> None:
    degraded = get(status_of(observation()).conditions, "Degraded")
    assert (degraded.status, degraded.reason) == ("False", "AsExpected")


def test_degraded_by_selection_problems() -> None:
    problem = "selection broken: invalid regular expression '(': missing )"
    degraded = get(status_of(observation(selection_problems=[problem])).conditions, "Degraded")
    assert (degraded.status, degraded.reason) == ("True", "SelectionProblems")
    assert problem in degraded.message


def test_degraded_by_skipped_topics() -> None:
    skipped = SkippedTopic(
        name="orders.B", reason="came from B: mirroring it back would be a cycle"
    )
    status = status_of(observation(kafka=kafka_state(mirrored=plan("orders", skipped=(skipped,)))))
    assert status.skipped_topics == [
        SkippedTopic(name="orders.B", reason="came from B: mirroring it back would be a cycle")
    ]
    degraded = get(status.conditions, "Degraded")
    assert degraded.status == "True"
    assert "1 selected topics cannot be mirrored (orders.B)" in degraded.message
    assert ready_of(status).status == "True"  # the rest is mirrored


def test_audit_is_unknown_until_one_reports() -> None:
    audit = get(status_of(observation()).conditions, "AuditPassed")
    assert (audit.status, audit.reason) == ("Unknown", "NoAudit")


@pytest.mark.parametrize(
    ("result", "status", "reason"),
    [("Passed", "True", "AuditPassed"), ("Failed", "False", "AuditFailed")],
)
def test_audit_condition_follows_the_last_audit(result: Any, status: str, reason: str) -> None:
    previous = KafkaMirrorStatus(last_audit=AuditResult(time=NOW, result=result))
    current = mirror_status(observation(), previous, NOW)
    audit = get(current.conditions, "AuditPassed")
    assert (audit.status, audit.reason) == (status, reason)
    assert current.last_audit == previous.last_audit


@pytest.mark.parametrize(
    ("schedule", "hours_later", "stale"),
    [
        ("0 */6 * * *", 11.9, False),  # 12:00: runs at 18:00 and 00:00 may still report
        ("0 */6 * * *", 18.0, True),  # the third run since: two came and went
        ("0 */6 * * *", 18.0 - 1 / 60, False),
        ("@daily", 47.0, False),
        ("@daily", 60.0, True),
        ("0 3 * * MON-FRI", 40.0, False),  # NOW is a Monday noon: Tuesday 03:00, Wednesday 03:00
        ("0 3 * * MON-FRI", 63.0, True),  # and Thursday 03:00
        ("0 3 ? * SAT", 24 * 12, False),  # Saturdays only: two in 12 days, the third is day 19
        ("0 0 31 2 *", 24 * 1000, False),  # fires never (Kubernetes accepts it)
        (None, 1000.0, False),  # a suspended audit does not age
    ],
)
def test_an_audit_that_stopped_reporting_goes_unknown(
    schedule: str | None, hours_later: float, stale: bool
) -> None:
    previous = KafkaMirrorStatus(last_audit=AuditResult(time=NOW, result="Passed"))
    later = NOW + timedelta(hours=hours_later)
    current = mirror_status(observation(audit_schedule=schedule), previous, later)
    audit = get(current.conditions, "AuditPassed")
    if not stale:
        assert (audit.status, audit.reason) == ("True", "AuditPassed")
        return
    assert (audit.status, audit.reason) == ("Unknown", "AuditStale")
    assert audit.message == (
        f"no audit has reported since 2025-06-01T12:00:00+00:00 though spec.audit.schedule "
        f"({schedule}) ran it twice since: check the mirror's audit CronJob and its jobs' "
        "logs; the last audit said Passed"
    )


# --- events --------------------------------------------------------------------------------------


def test_newly_active_topics_are_announced() -> None:
    before = status_of(observation(kafka=kafka_state(mirrored=plan("orders"))))
    after = mirror_status(
        observation(kafka=kafka_state(mirrored=plan("orders", "payments", "refunds"))),
        before,
        LATER,
    )
    events = mirror_events(before, after)
    assert Event("Normal", "TopicsActive", "mirroring 2 more: payments, refunds") in events
    assert [e for e in events if e.reason == "TopicsActive"] == [
        Event("Normal", "TopicsActive", "mirroring 2 more: payments, refunds")
    ]


def test_newly_skipped_topics_are_warned_about_once() -> None:
    old = SkippedTopic(name="a.B", reason="cycle")
    new = SkippedTopic(name="b.B", reason="came from B: mirroring it back would be a cycle")
    before = status_of(observation(kafka=kafka_state(mirrored=plan("x", skipped=(old,)))))
    after = mirror_status(
        observation(kafka=kafka_state(mirrored=plan("x", skipped=(old, new)))), before, LATER
    )
    skipped_events = [e for e in mirror_events(before, after) if e.reason == "TopicSkipped"]
    assert skipped_events == [Event("Warning", "TopicSkipped", f"b.B: {new.reason}")]


def test_no_events_when_nothing_changed() -> None:
    before = status_of(observation())
    after = mirror_status(observation(), before, LATER)
    assert mirror_events(before, after) == []


def test_a_ready_event_only_when_ready_status_or_reason_changes() -> None:
    mirroring = status_of(observation())
    # Degraded flips, Ready holds: no Ready event.
    degraded = mirror_status(observation(selection_problems=["broken"]), mirroring, LATER)
    assert mirror_events(mirroring, degraded) == []
    # Ready goes False.
    not_ready_obs = observation(deployment=DeploymentState(desired=2, replicas=2, ready=1))
    not_ready = mirror_status(not_ready_obs, mirroring, LATER)
    assert mirror_events(mirroring, not_ready) == [
        Event("Warning", "WorkersNotReady", "1 of 2 workers ready")
    ]
    # Back to True.
    recovered = mirror_status(observation(), not_ready, MUCH_LATER)
    assert mirror_events(not_ready, recovered) == [
        Event("Normal", "Mirroring", "2 workers mirroring 2 topics")
    ]
    # Still True, another reason.
    unselected = mirror_status(observation(selection_count=0), recovered, MUCH_LATER)
    assert [e.reason for e in mirror_events(recovered, unselected)] == ["NoSelection"]


# --- selections ----------------------------------------------------------------------------------

SOURCE_TOPICS = [
    "payments",
    "orders",
    "__consumer_offsets",
    "__transaction_state",
    "mm2-offset-syncs.B.internal",
    "orders.eu",
]


def test_selection_lists_matched_topics_but_never_internal_ones() -> None:
    status = selection_status(
        2, MirrorTopicSelectionStatus(), [], None, NameFilter((".*",)), SOURCE_TOPICS, NOW
    )
    assert status.matched_topics == ["orders", "orders.eu", "payments"]
    assert status.matched_topic_count == 3
    assert status.observed_generation == 2
    ready = ready_of(status)
    assert (ready.status, ready.reason) == ("True", "Applied")
    assert ready.message == "matches 3 topics on the source now"


def test_selection_with_excludes_matches_whole_names() -> None:
    selection = NameFilter(("orders.*",), ("orders\\.eu",))
    status = selection_status(
        1, MirrorTopicSelectionStatus(), [], None, selection, SOURCE_TOPICS, NOW
    )
    assert status.matched_topics == ["orders"]


def test_selection_matched_topics_are_bounded_but_counted_exactly() -> None:
    topics = [f"t-{i:05d}" for i in range(MAX_TOPIC_NAMES + 100)]
    status = selection_status(
        1, MirrorTopicSelectionStatus(), [], None, NameFilter(("t-.*",)), topics, NOW
    )
    assert status.matched_topic_count == MAX_TOPIC_NAMES + 100
    assert len(status.matched_topics) == MAX_TOPIC_NAMES


def test_selection_is_applied_before_the_source_topics_are_known() -> None:
    status = selection_status(
        1, MirrorTopicSelectionStatus(), [], None, NameFilter(("orders",)), None, NOW
    )
    ready = ready_of(status)
    assert (ready.status, ready.reason) == ("True", "Applied")
    assert status.matched_topics == []


def test_invalid_pattern_makes_the_selection_not_ready() -> None:
    invalid = ["includes[0] '(': missing ): ("]
    status = selection_status(
        1, MirrorTopicSelectionStatus(), invalid, None, None, SOURCE_TOPICS, NOW
    )
    ready = ready_of(status)
    assert (ready.status, ready.reason) == ("False", "InvalidPattern")
    assert invalid[0] in ready.message
    patterns = get(status.conditions, "PatternsValid")
    assert (patterns.status, patterns.reason) == ("False", "InvalidPattern")
    assert status.invalid_patterns == invalid
    assert status.matched_topics == []


def test_missing_mirror_makes_the_selection_not_ready() -> None:
    problem = Problem("MirrorNotFound", "no KafkaMirror a-to-b in namespace team-a")
    status = selection_status(
        1, MirrorTopicSelectionStatus(), [], problem, NameFilter(("orders",)), None, NOW
    )
    ready = ready_of(status)
    assert (ready.status, ready.reason, ready.message) == (
        "False",
        "MirrorNotFound",
        problem.message,
    )
    found = get(status.conditions, "MirrorFound")
    assert (found.status, found.reason) == ("False", "MirrorNotFound")


def test_valid_selection_of_an_existing_mirror_has_all_conditions_true() -> None:
    status = selection_status(
        1, MirrorTopicSelectionStatus(), [], None, NameFilter(("orders",)), SOURCE_TOPICS, NOW
    )
    assert {c.type: (c.status, c.reason) for c in status.conditions} == {
        "Ready": ("True", "Applied"),
        "Reconciling": ("False", "Settled"),
        "Stalled": ("False", "NotStalled"),
        "PatternsValid": ("True", "Valid"),
        "MirrorFound": ("True", "Found"),
    }


def test_selection_transition_time_is_kept_while_ready_holds() -> None:
    first = selection_status(
        1, MirrorTopicSelectionStatus(), [], None, NameFilter(("orders",)), SOURCE_TOPICS, NOW
    )
    second = selection_status(2, first, [], None, NameFilter(("o.*",)), SOURCE_TOPICS, LATER)
    assert ready_of(second).last_transition_time == NOW
    third = selection_status(3, second, ["bad"], None, None, SOURCE_TOPICS, MUCH_LATER)
    assert ready_of(third).last_transition_time == MUCH_LATER


# --- invalid spec --------------------------------------------------------------------------------


def test_invalid_spec_makes_ready_false_and_keeps_the_figures() -> None:
    before = status_of(observation())
    status = unusable_spec_status(
        before, 4, Problem("InvalidSpec", "source.alias: field required"), LATER
    )
    ready = ready_of(status)
    assert (ready.status, ready.reason) == ("False", "InvalidSpec")
    assert "source.alias: field required" in ready.message
    assert ready.last_transition_time == LATER
    assert ready.observed_generation == 4
    assert status.observed_generation == 4
    assert status.active_topics == before.active_topics
    assert status.total_lag == before.total_lag
    assert before.observed_generation == 3  # the previous status is not modified


def test_invalid_spec_keeps_the_other_conditions_and_their_transition_times() -> None:
    degraded_obs = observation(selection_problems=["selection s: bad pattern"])
    before = status_of(degraded_obs)
    invalid = unusable_spec_status(
        before, 4, Problem("InvalidSpec", "source.alias: field required"), LATER
    )
    assert {c.type for c in invalid.conditions} == {c.type for c in before.conditions}
    assert get(invalid.conditions, "Degraded") == get(before.conditions, "Degraded")
    # Once fixed, conditions whose status never changed keep their transition time.
    fixed = mirror_status(replace(degraded_obs, generation=5), invalid, MUCH_LATER)
    assert get(fixed.conditions, "Degraded").last_transition_time == NOW
    assert get(fixed.conditions, "Paused").last_transition_time == NOW


def test_a_spec_not_allowed_is_ready_false_with_its_message_and_a_warning_event() -> None:
    before = status_of(observation())
    problem = Problem("NotAllowed", "spec.worker.image 'evil.example/steal:1' is not allowed")
    status = unusable_spec_status(before, 4, problem, LATER)
    ready = ready_of(status)
    assert (ready.status, ready.reason, ready.message) == ("False", "NotAllowed", problem.message)
    assert mirror_events(before, status) == [Event("Warning", "NotAllowed", problem.message)]
    assert mirror_events(status, status) == []  # once, on the transition


def test_partitions_that_do_not_flow_degrade_the_mirror_and_are_named() -> None:
    stopped = (
        "stopped at orders[1] offset 77: the record is 2000123 bytes, over orders.A's "
        "max.message.bytes (1048588): raise it on the target to go on"
    )
    progress = [
        PartitionProgress("orders", 0, 0, 50, 50),
        PartitionProgress("orders", 1, 0, 90, 77, stopped),
    ]
    status = status_of(observation(kafka=kafka_state(progress=progress)))
    degraded = next(c for c in status.conditions if c.type == "Degraded")
    assert (degraded.status, degraded.reason) == ("True", "PartitionsNotFlowing")
    assert "offset 77" in degraded.message and "2000123 bytes" in degraded.message
    assert status.partition_problems == [stopped]
    assert ready_of(status).status == "True"  # the other partitions mirror


def test_a_schedule_that_cannot_be_read_never_fails_the_refresh() -> None:
    """The CRD's pattern lets through five words croniter cannot read: the status still
    refreshes, and the audit's condition says what to fix."""
    previous = KafkaMirrorStatus(last_audit=AuditResult(time=NOW, result="Passed"))
    later = NOW + timedelta(hours=1)
    current = mirror_status(observation(audit_schedule="0 3 * * FUNDAY"), previous, later)
    audit = get(current.conditions, "AuditPassed")
    assert (audit.status, audit.reason) == ("Unknown", "ScheduleUnreadable")
    assert audit.message.startswith("spec.audit.schedule (0 3 * * FUNDAY) cannot be read")
    assert ready_of(current).status == "True"


# --- what GitOps tools read (kstatus) ----------------------------------------------------------


def as_stored(status: KafkaMirrorStatus | MirrorTopicSelectionStatus) -> dict[str, Any]:
    body = status.model_dump(mode="json", by_alias=True, exclude_none=True)
    return {"metadata": {"generation": status.observed_generation}, "status": body}


def test_kstatus_reads_a_mirror_that_cannot_run_as_failed_and_a_starting_one_as_in_progress() -> (
    None
):
    running = status_of(observation())
    assert kstatus(as_stored(running)) == "Current"
    starting = status_of(observation(deployment=DeploymentState(desired=2, replicas=2, ready=1)))
    assert kstatus(as_stored(starting)) == "InProgress"
    paused = status_of(observation(paused=True))
    assert kstatus(as_stored(paused)) == "Current"  # as the spec asks
    for reason in ("InvalidSpec", "NotAllowed", "ChildNameTaken"):
        unusable = unusable_spec_status(running, 4, Problem(reason, "fix it"), LATER)
        assert kstatus(as_stored(unusable)) == "Failed", reason
        stalled = get(unusable.conditions, "Stalled")
        assert (stalled.reason, stalled.message) == (reason, "fix it")
    refused = status_of(observation(source_problem=Problem("AuthenticationFailed", "refused")))
    assert kstatus(as_stored(refused)) == "Failed"
    away = status_of(observation(target_problem=Problem("Unreachable", "cannot reach B")))
    assert kstatus(as_stored(away)) == "InProgress"
    # Exactly once on a target that cannot take its transactions (kafka/client.py).
    for reason, read in (
        ("TransactionsNotGranted", "Failed"),
        ("TransactionsUnsupported", "Failed"),
        ("TransactionsUnavailable", "InProgress"),  # a coordinator may yet come
    ):
        refusing = status_of(observation(target_problem=Problem(reason, "no transactions")))
        assert ready_of(refusing).reason == f"Target{reason}"
        assert kstatus(as_stored(refusing)) == read, reason
    fixed = status_of(observation(), unusable)
    assert kstatus(as_stored(fixed)) == "Current"


def test_kstatus_reads_a_selection_with_a_bad_pattern_as_failed() -> None:
    bad = selection_status(1, MirrorTopicSelectionStatus(), ["("], None, None, SOURCE_TOPICS, NOW)
    assert kstatus(as_stored(bad)) == "Failed"
    problem = Problem("MirrorNotFound", "no KafkaMirror a-to-b in namespace team-a")
    waiting = selection_status(1, MirrorTopicSelectionStatus(), [], problem, None, None, NOW)
    assert kstatus(as_stored(waiting)) == "InProgress"  # the mirror may come with the next sync
