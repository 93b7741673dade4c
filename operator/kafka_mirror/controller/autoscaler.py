"""`spec.autoscaling`: the worker count from the load each status refresh reads, as pure functions.

The load is how far the mirror is behind its target, as a ratio: the age of the oldest record
not yet mirrored over `targetLatencySeconds`, the lag per source partition over
`targetLagPerPartition`, the larger of the two where both are set. As Kubernetes' HPA does, the
wanted count is the current one times that ratio (rounded up), within a tolerance of 10 % around
1, and within the spec's bounds and the partitions' (more pods than the partitions can keep
busy only rebalance). So a load that stays above its target after a step (the target is slow,
the new workers did not help) asks for more again. A scale-up goes at once, though not again
until the workers it added had time to join and take partitions (`scaleUpPauseSeconds`); a
scale-down only after every reading of `scaleDownWindowSeconds` asked for fewer, and then to the
most any of them asked for.

The status is the autoscaler's memory (`status.autoscaling`): the count it wants, why, and the
low readings so far. The next refresh converges the Deployment to that count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from kubernetes.utils import parse_quantity

from kafka_mirror.api.autoscaling import Autoscaling, AutoscalingStatus
from kafka_mirror.api.models import KafkaMirrorSpec
from kafka_mirror.controller.status import Event

TOLERANCE = 0.1  # HPA's: a load within 10 % of the target changes nothing


@dataclass(frozen=True)
class Load:
    """What this refresh read of the mirror's source."""

    partitions: int  # source partitions mirrored
    lag: int  # records not yet mirrored
    latency_seconds: float | None  # the oldest of them's age; None when not sampled


def processes_per_pod(spec: KafkaMirrorSpec) -> int:
    """The mirroring processes in each worker pod, as the pod's supervisor counts them."""
    if spec.worker.processes is not None:
        return spec.worker.processes
    limit = spec.worker.resources.limits.get("cpu")
    return max(1, math.ceil(parse_quantity(limit))) if limit else 1


def starting_replicas(
    policy: Autoscaling, spec_replicas: int, last: AutoscalingStatus | None
) -> int:
    """The worker count to run now: the autoscaler's last decision, or `spec.replicas` within
    the bounds before its first."""
    count = last.replicas if last is not None else spec_replicas
    return min(max(count, policy.min_replicas), policy.max_replicas)


def _ratio(policy: Autoscaling, load: Load) -> tuple[float, str]:
    """The load over its target, and what it was."""
    readings: list[tuple[float, str]] = []
    if policy.target_latency_seconds is not None and load.latency_seconds is not None:
        readings.append(
            (
                load.latency_seconds / policy.target_latency_seconds,
                f"oldest unmirrored record {load.latency_seconds:.0f} s old "
                f"(target {policy.target_latency_seconds} s)",
            )
        )
    if policy.target_lag_per_partition is not None:
        per_partition = load.lag / max(load.partitions, 1)
        readings.append(
            (
                per_partition / policy.target_lag_per_partition,
                f"lag {per_partition:,.0f} records per partition "
                f"(target {policy.target_lag_per_partition:,})",
            )
        )
    if not readings:  # a latency target only, and no sample this time
        return 1.0, "latency not sampled this refresh"
    return max(readings)


def wanted(policy: Autoscaling, current: int, load: Load, processes: int) -> tuple[int, str]:
    """The worker count this reading asks for, and why."""
    ratio, reading = _ratio(policy, load)
    count = current
    if abs(ratio - 1) > TOLERANCE:
        count = math.ceil(current * ratio)
    ceiling = max(math.ceil(load.partitions / processes), policy.min_replicas)
    if count > ceiling and ceiling < policy.max_replicas:
        return ceiling, f"{reading}; {load.partitions} partitions keep {ceiling} pods busy"
    if count > policy.max_replicas:
        return policy.max_replicas, f"{reading}; at maxReplicas"
    if count < policy.min_replicas:
        return policy.min_replicas, f"{reading}; at minReplicas"
    return count, reading


def decide(
    policy: Autoscaling,
    last: AutoscalingStatus | None,
    current: int,
    load: Load | None,
    processes: int,
    now: datetime,
) -> AutoscalingStatus:
    """The next `status.autoscaling` from this refresh's reading."""
    last_scale = last.last_scale_time if last is not None else None
    if load is None:
        reason = "the source could not be read this refresh: keeping the count"
        return AutoscalingStatus(replicas=current, reason=reason, last_scale_time=last_scale)
    count, reading = wanted(policy, current, load, processes)
    if count > current:
        pause = policy.scale_up_pause_seconds
        paused = last_scale is not None and (now - last_scale).total_seconds() < pause
        if paused:
            return AutoscalingStatus(
                replicas=current,
                reason=f"{reading}: {count} wanted, once the last scaling has settled",
                last_scale_time=last_scale,
            )
        return AutoscalingStatus(replicas=count, reason=reading, last_scale_time=now)
    if count == current:
        return AutoscalingStatus(replicas=current, reason=reading, last_scale_time=last_scale)
    # Fewer wanted: only once every reading of the window asked for fewer.
    low_since, highest = now, count
    if last is not None and last.low_since is not None:  # the window runs already
        low_since, highest = last.low_since, max(count, last.highest_since_low or 0)
    if (now - low_since).total_seconds() >= policy.scale_down_window_seconds:
        return AutoscalingStatus(replicas=highest, reason=reading, last_scale_time=now)
    return AutoscalingStatus(
        replicas=current,
        reason=f"{reading}: {highest} wanted if the load stays low for "
        f"{policy.scale_down_window_seconds} s",
        last_scale_time=last_scale,
        low_since=low_since,
        highest_since_low=highest,
    )


def scaling_event(current: int, decided: AutoscalingStatus) -> Event | None:
    """The event of a change of the count."""
    if decided.replicas == current:
        return None
    way = "up" if decided.replicas > current else "down"
    return Event(
        "Normal",
        "Scaled",
        f"workers scaled {way} from {current} to {decided.replicas}: {decided.reason}",
    )
