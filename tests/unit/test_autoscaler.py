"""The autoscaler's decisions (`controller/autoscaler.py`), step by step and as properties over
random load: the count stays within its bounds, scale-ups wait for the last change to settle,
and a scale-down comes only after a whole window of low readings."""

from __future__ import annotations

import itertools
from datetime import UTC, datetime, timedelta

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from kafka_mirror.api.autoscaling import Autoscaling, AutoscalingStatus
from kafka_mirror.api.models import KafkaMirrorSpec
from kafka_mirror.controller.autoscaler import (
    Load,
    decide,
    processes_per_pod,
    scaling_event,
    starting_replicas,
)

T0 = datetime(2026, 11, 26, 12, 0, tzinfo=UTC)
POLICY = Autoscaling(
    min_replicas=1, max_replicas=6, target_latency_seconds=30, scale_down_window_seconds=300
)


def late(seconds: float) -> Load:
    return Load(partitions=24, lag=1_000_000, latency_seconds=seconds)


def test_a_backlog_scales_up_at_once_in_proportion_and_within_the_bounds() -> None:
    decided = decide(POLICY, None, 1, late(95), 1, T0)
    assert decided.replicas == 4  # 1 x 95/30, rounded up
    assert "oldest unmirrored record 95 s old (target 30 s)" in decided.reason
    assert decide(POLICY, None, 2, late(600), 1, T0).replicas == 6  # maxReplicas
    few = Load(partitions=3, lag=10_000, latency_seconds=600)
    fewest = decide(POLICY, None, 1, few, 1, T0)
    assert fewest.replicas == 3 and "3 partitions keep 3 pods busy" in fewest.reason
    assert decide(POLICY, None, 1, few, 2, T0).replicas == 2  # two processes a pod


def test_within_ten_percent_of_the_target_nothing_changes() -> None:
    assert decide(POLICY, None, 3, late(32), 1, T0).replicas == 3
    assert decide(POLICY, None, 3, late(28), 1, T0).low_since is None


def test_a_second_scale_up_waits_for_the_first_to_settle() -> None:
    first = decide(POLICY, None, 1, late(60), 1, T0)
    assert (first.replicas, first.last_scale_time) == (2, T0)
    soon = decide(POLICY, first, 2, late(90), 1, T0 + timedelta(seconds=20))
    assert soon.replicas == 2 and "once the last scaling has settled" in soon.reason
    later = T0 + timedelta(seconds=POLICY.scale_up_pause_seconds)
    assert POLICY.scale_up_pause_seconds == 60  # the default
    assert decide(POLICY, soon, 2, late(90), 1, later).replicas == 6
    # A shorter pause where pods start fast.
    brief = POLICY.model_copy(update={"scale_up_pause_seconds": 15})
    assert decide(brief, soon, 2, late(90), 1, T0 + timedelta(seconds=14)).replicas == 2
    assert decide(brief, soon, 2, late(90), 1, T0 + timedelta(seconds=15)).replicas == 6


def test_a_scale_down_waits_a_whole_window_of_low_readings_and_takes_their_highest() -> None:
    status = AutoscalingStatus(replicas=6, last_scale_time=T0)
    current = 6
    readings = [(0, 10.0), (100, 20.0), (200, 1.0)]  # ask for 2, 4, 1 pods
    for second, latency in readings:
        status = decide(POLICY, status, current, late(latency), 1, T0 + timedelta(seconds=second))
        assert status.replicas == 6, status
    assert status.highest_since_low == 4 and status.low_since == T0
    # One reading at the target resets the window.
    reset = decide(POLICY, status, current, late(30), 1, T0 + timedelta(seconds=250))
    assert reset.low_since is None and reset.replicas == 6
    down = decide(POLICY, status, current, late(1), 1, T0 + timedelta(seconds=300))
    assert down.replicas == 4 and down.last_scale_time == T0 + timedelta(seconds=300)
    assert down.low_since is None
    event = scaling_event(current, down)
    assert event is not None and event.message.startswith("workers scaled down from 6 to 4")


def test_no_reading_keeps_the_count() -> None:
    kept = decide(POLICY, AutoscalingStatus(replicas=3), 3, None, 1, T0)
    assert kept.replicas == 3 and "could not be read" in kept.reason
    assert scaling_event(3, kept) is None


def test_the_lag_target_counts_per_partition_and_the_larger_ratio_decides() -> None:
    both = POLICY.model_copy(update={"target_lag_per_partition": 10_000})
    decided = decide(both, None, 1, Load(partitions=8, lag=240_000, latency_seconds=40), 1, T0)
    assert decided.replicas == 3 and "lag 30,000 records per partition" in decided.reason


def test_the_starting_count_and_the_processes_per_pod() -> None:
    assert starting_replicas(POLICY, 10, None) == 6
    assert starting_replicas(POLICY, 0, None) == 1
    assert starting_replicas(POLICY, 1, AutoscalingStatus(replicas=4)) == 4
    spec = KafkaMirrorSpec.model_validate(
        {
            "source": {"alias": "A", "bootstrapServers": "a:9092"},
            "target": {"alias": "B", "bootstrapServers": "b:9092"},
            "worker": {"resources": {"limits": {"cpu": "1500m"}}},
        }
    )
    assert processes_per_pod(spec) == 2
    three = spec.model_copy(update={"worker": spec.worker.model_copy(update={"processes": 3})})
    assert processes_per_pod(three) == 3


def test_a_policy_without_a_target_or_with_crossed_bounds_is_refused() -> None:
    with pytest.raises(ValidationError, match="targetLatencySeconds"):
        Autoscaling(max_replicas=3)
    with pytest.raises(ValidationError, match="minReplicas must not exceed"):
        Autoscaling(min_replicas=4, max_replicas=3, target_latency_seconds=10)


@settings(max_examples=300, deadline=None)
@given(
    latencies=st.lists(st.floats(min_value=0, max_value=600), min_size=1, max_size=80),
    partitions=st.integers(min_value=1, max_value=40),
    processes=st.integers(min_value=1, max_value=4),
    step=st.integers(min_value=1, max_value=30),
)
def test_any_load_keeps_the_bounds_and_scales_down_at_most_once_a_window(
    latencies: list[float], partitions: int, processes: int, step: int
) -> None:
    """Whatever the readings (one every `step` seconds): the count stays within the policy and
    what the partitions can keep busy, two scale-ups are a pause apart, and two scale-downs a
    window apart."""
    status: AutoscalingStatus | None = None
    current = starting_replicas(POLICY, 1, None)
    ceiling = max(-(-partitions // processes), POLICY.min_replicas)
    ups: list[datetime] = []
    downs: list[datetime] = []
    for index, latency in enumerate(latencies):
        now = T0 + timedelta(seconds=index * step)
        status = decide(POLICY, status, current, Load(partitions, 0, latency), processes, now)
        assert (
            POLICY.min_replicas
            <= status.replicas
            <= min(POLICY.max_replicas, max(ceiling, current))
        )
        if status.replicas > current:
            ups.append(now)
        elif status.replicas < current:
            downs.append(now)
        current = status.replicas
    for earlier, later in itertools.pairwise(ups):
        assert (later - earlier).total_seconds() >= POLICY.scale_up_pause_seconds
    for earlier, later in itertools.pairwise(downs):
        assert (later - earlier).total_seconds() >= POLICY.scale_down_window_seconds
