"""The operator's per-mirror gauges follow the status, and go with the mirror."""

from __future__ import annotations

import socket
from datetime import UTC, datetime

import pytest

from kafka_mirror.api.status import AuditResult, Condition, KafkaMirrorStatus
from kafka_mirror.controller.metrics import OperatorMetrics


def sample(metrics: OperatorMetrics, name: str, **labels: str) -> float | None:
    return metrics.registry.get_sample_value(name, labels)


def status(ready: str, reason: str, **fields: object) -> KafkaMirrorStatus:
    return KafkaMirrorStatus.model_validate(
        {"conditions": [Condition(type="Ready", status=ready, reason=reason)], **fields}
    )


def test_gauges_follow_the_status_and_stale_conditions_go() -> None:
    metrics = OperatorMetrics()
    mirror = {"namespace": "ns", "mirror": "a-to-b"}
    metrics.observe("ns", "a-to-b", status("False", "WorkersNotReady", replicas=2))
    metrics.observe(
        "ns",
        "a-to-b",
        status(
            "True",
            "Mirroring",
            replicas=2,
            ready_replicas=2,
            active_topic_count=3,
            total_lag=42,
            max_latency_seconds=1.5,
            last_audit=AuditResult(
                time=datetime(2026, 1, 1, tzinfo=UTC), result="Failed", missing=7
            ),
        ),
    )
    assert sample(metrics, "kafka_mirror_ready", **mirror) == 1
    assert sample(metrics, "kafka_mirror_workers_ready", **mirror) == 2
    assert sample(metrics, "kafka_mirror_total_lag_records", **mirror) == 42
    assert sample(metrics, "kafka_mirror_max_latency_seconds", **mirror) == 1.5
    ready = {"type": "Ready", "status": "True", "reason": "Mirroring"}
    assert sample(metrics, "kafka_mirror_condition", **mirror, **ready) == 1
    stale = {"type": "Ready", "status": "False", "reason": "WorkersNotReady"}
    assert sample(metrics, "kafka_mirror_condition", **mirror, **stale) is None
    assert sample(metrics, "kafka_mirror_audit_result", **mirror, result="Failed") == 1
    assert sample(metrics, "kafka_mirror_audit_result", **mirror, result="Passed") == 0
    assert sample(metrics, "kafka_mirror_audit_missing_records", **mirror) == 7


def test_a_deleted_mirror_leaves_no_series() -> None:
    metrics = OperatorMetrics()
    metrics.observe("ns", "gone", status("True", "Mirroring"))  # never audited
    metrics.forget("ns", "gone")
    names = [s.name for family in metrics.registry.collect() for s in family.samples]
    assert not [n for n in names if not n.startswith("kafka_mirror_operator_")]  # not per mirror


def test_the_rpo_target_follows_the_spec_and_goes_with_it() -> None:
    metrics = OperatorMetrics()
    mirror = {"namespace": "ns", "mirror": "m"}
    metrics.observe("ns", "m", status("True", "Mirroring"), rpo_target_seconds=60)
    assert sample(metrics, "kafka_mirror_rpo_target_seconds", **mirror) == 60
    metrics.observe("ns", "m", status("True", "Mirroring"))  # removed from the spec
    assert sample(metrics, "kafka_mirror_rpo_target_seconds", **mirror) is None
    metrics.observe("ns", "m", status("True", "Mirroring"), rpo_target_seconds=30)
    metrics.forget("ns", "m")
    assert sample(metrics, "kafka_mirror_rpo_target_seconds", **mirror) is None


def test_a_taken_metrics_port_is_a_clear_error_not_a_traceback() -> None:
    with socket.socket() as holder:
        holder.bind(("", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(
            SystemExit, match=f"cannot serve metrics on port {port}.*--metrics-port"
        ):
            OperatorMetrics().serve(port)
