"""The audit's report logic that needs no Spark: nothing selected, and the status summary."""

from __future__ import annotations

from datetime import UTC, datetime

from kafka_mirror.audit.checks import run_checks
from kafka_mirror.audit.records import AuditInputs
from kafka_mirror.audit.report import AuditReport, PartitionFinding, UnsafeCheckpoint


def test_a_mirror_with_no_selected_topic_passes_without_reading_anything() -> None:
    inputs = AuditInputs("ns/m", "A", "B", {}, {}, {}, {}, windows=[], offset_syncs_on_source=True)
    report = run_checks(None, inputs)  # type: ignore[arg-type]  # Spark is never touched
    assert (report.result, report.records_checked, report.missing) == ("Passed", 0, 0)


def test_the_summary_names_what_was_lost_and_where() -> None:
    report = AuditReport(
        mirror="ns/m",
        time=datetime(2026, 11, 21, tzinfo=UTC),
        seconds=1.0,
        result="Failed",
        records_checked=300,
        missing=10,
        unsafe_checkpoints=1,
        findings=[PartitionFinding(topic="t", partition=0, missing=10, missing_offsets=[0, 1, 2])],
        unsafe=[
            UnsafeCheckpoint(
                group="app",
                topic="t.A",
                partition=2,
                upstream_offset=10,
                downstream_offset=60,
                skipped=50,
                first_skipped_offset=10,
            )
        ],
    )
    summary = report.summary()
    assert (summary.result, summary.missing, summary.unsafe_checkpoints) == ("Failed", 10, 1)
    assert summary.message == (
        "10 records missing on the target (t/0 offsets [0, 1, 2]); 1 unsafe checkpoints (app t.A/2)"
    )
