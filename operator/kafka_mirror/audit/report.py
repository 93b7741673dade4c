"""The audit's report: what was checked, what was wrong (with partitions and offsets), and the
summary that goes into the KafkaMirror status."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict
from pydantic.alias_generators import to_camel

from kafka_mirror.api.models import AuditResult

EXAMPLES = 10  # offsets listed per finding; the counts are exact


class ReportModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class PartitionFinding(ReportModel):
    """One source partition whose records are not on the target exactly once."""

    topic: str
    partition: int
    missing: int = 0
    missing_offsets: list[int] = []  # the first EXAMPLES, source offsets
    duplicates: int = 0
    duplicated_offsets: list[int] = []


class BadOffsetSync(ReportModel):
    topic: str
    partition: int
    upstream_offset: int
    downstream_offset: int
    found_upstream_offset: int | None  # what the record at the downstream offset came from


class UnsafeCheckpoint(ReportModel):
    group: str
    topic: str  # the remote topic, as in the checkpoint
    partition: int
    upstream_offset: int
    downstream_offset: int
    skipped: int  # source records at or after the group's position that a failover would skip
    first_skipped_offset: int


class Distances(ReportModel):
    """How many records a consumer failed over by a checkpoint would read again."""

    max: int = 0
    p50: int = 0
    p95: int = 0
    p99: int = 0


class AuditReport(ReportModel):
    mirror: str
    time: datetime
    seconds: float
    result: Literal["Passed", "Failed"]
    partitions_checked: int = 0
    records_checked: int = 0
    missing: int = 0
    duplicates: int = 0
    offset_syncs_checked: int = 0
    bad_offset_syncs: int = 0
    checkpoints_checked: int = 0
    unsafe_checkpoints: int = 0
    reread: Distances = Distances()
    findings: list[PartitionFinding] = []
    bad_syncs: list[BadOffsetSync] = []
    unsafe: list[UnsafeCheckpoint] = []

    def summary(self) -> AuditResult:
        problems = []
        if self.missing:
            where = ", ".join(
                f"{f.topic}/{f.partition} offsets {f.missing_offsets[:3]}"
                for f in self.findings
                if f.missing
            )
            problems.append(f"{self.missing} records missing on the target ({where})")
        if self.unsafe_checkpoints:
            where = ", ".join(f"{u.group} {u.topic}/{u.partition}" for u in self.unsafe[:3])
            problems.append(f"{self.unsafe_checkpoints} unsafe checkpoints ({where})")
        if self.bad_offset_syncs:
            problems.append(f"{self.bad_offset_syncs} offset syncs point at the wrong record")
        if self.duplicates:
            problems.append(f"{self.duplicates} duplicates (at-least-once re-sends)")
        message = "; ".join(problems) or (
            f"{self.records_checked} records in {self.partitions_checked} partitions mirrored "
            f"exactly once; {self.checkpoints_checked} checkpoints safe"
        )
        return AuditResult(
            time=self.time,
            result=self.result,
            records_checked=self.records_checked,
            missing=self.missing,
            duplicates=self.duplicates,
            unsafe_checkpoints=self.unsafe_checkpoints,
            max_reread_distance=self.reread.max,
            message=message[:1000],
        )
