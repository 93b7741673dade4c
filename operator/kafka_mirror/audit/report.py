"""The audit's report: what was checked, what was wrong (with partitions and offsets), and the
summary that goes into the KafkaMirror status."""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

from kafka_mirror.api.status import AuditResult

EXAMPLES = 10  # offsets listed per finding; the counts are exact


class ReportModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True)


class PartitionFinding(ReportModel):
    """One source partition whose records are not on the target exactly once, or not all
    verifiable."""

    topic: str
    partition: int
    missing: int = 0
    missing_offsets: list[int] = []  # the first EXAMPLES, source offsets
    altered: int = 0  # records with a copy whose content differs
    altered_offsets: list[int] = []
    duplicates: int = 0
    duplicated_offsets: list[int] = []
    lost_to_retention: int = 0  # left the source before they were mirrored
    lost_offsets: list[int] = []  # the newest such range: [first, end)
    expired_on_source: int = 0  # copies whose source record the source no longer holds
    expired_on_target: int = 0  # source records whose copies the target no longer holds
    skipped_cycles: int = 0  # copies of the target's own records, not mirrored by design


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


class VerifiedPartition(ReportModel):
    """A source partition's verified watermark after the run (kept for the next one)."""

    topic: str
    partition: int
    audited_from: int  # the first offset this run audited (after the previous watermark)
    verified_to: int  # every record below it is verified
    target_offset: int  # where the copies of the records from verified_to on begin
    records: int  # records verified below verified_to, this run's and earlier runs'
    # Kept in the watermark, not reported: where the next run reads the offset syncs from.
    offset_syncs_position: dict[int, int] | None = Field(default=None, exclude=True)


def _first_offsets(field: str) -> Callable[[PartitionFinding], str | None]:
    """A finding's partition and first offsets of the kind in `field`, if it has any."""

    def where(finding: PartitionFinding) -> str | None:
        offsets = getattr(finding, field)
        return f"{finding.topic}/{finding.partition} offsets {offsets[:3]}" if offsets else None

    return where


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
    partitions_resumed: int = 0  # audited from a previous run's watermark
    records_checked: int = 0  # by this run
    records_verified: int = 0  # below the watermarks: this run's and the earlier runs'
    missing: int = 0
    altered: int = 0
    duplicates: int = 0
    exactly_once: bool = False  # the mirror's delivery: its duplicates fail the audit
    lost_to_retention: int = 0
    expired_on_source: int = 0
    expired_on_target: int = 0
    skipped_cycles: int = 0
    offset_syncs_checked: int = 0
    offset_syncs_unverifiable: int = 0
    bad_offset_syncs: int = 0
    checkpoints_checked: int = 0
    unsafe_checkpoints: int = 0
    reread: Distances = Distances()
    findings: list[PartitionFinding] = []
    bad_syncs: list[BadOffsetSync] = []
    unsafe: list[UnsafeCheckpoint] = []
    verified: list[VerifiedPartition] = []

    def _where(self, where: Callable[[PartitionFinding], str | None]) -> str:
        """The partitions a kind of finding concerns, as `where` describes them (None: not)."""
        return ", ".join(text for f in self.findings if (text := where(f)) is not None)

    def summary(self) -> AuditResult:
        problems = []
        for count, offsets, what in (
            (self.missing, "missing_offsets", "missing on the target"),
            (self.altered, "altered_offsets", "altered on the target"),
        ):
            if count:
                where = self._where(_first_offsets(offsets))
                problems.append(f"{count} records {what} ({where})")
        if self.lost_to_retention:
            where = self._where(
                lambda f: (
                    f"{f.topic}/{f.partition} offsets {f.lost_offsets[0]}-{f.lost_offsets[1] - 1}"
                    if f.lost_offsets
                    else None
                )
            )
            problems.append(
                f"{self.lost_to_retention} records left the source before they were mirrored "
                f"({where})"
            )
        if self.unsafe_checkpoints:
            where = ", ".join(f"{u.group} {u.topic}/{u.partition}" for u in self.unsafe[:3])
            problems.append(f"{self.unsafe_checkpoints} unsafe checkpoints ({where})")
        if self.bad_offset_syncs:
            problems.append(f"{self.bad_offset_syncs} offset syncs point at the wrong record")
        if self.duplicates:
            why = (
                "exactly-once delivery allows none"
                if self.exactly_once
                else "at-least-once re-sends"
            )
            problems.append(f"{self.duplicates} duplicates ({why})")
        message = "; ".join(problems) or (
            f"{self.records_checked} records in {self.partitions_checked} partitions mirrored "
            f"exactly once; {self.checkpoints_checked} checkpoints safe"
        )
        if self.partitions_resumed:
            message += (
                f"; {self.partitions_resumed} partitions audited from the last verified "
                f"watermark, {self.records_verified} records verified in all"
            )
        unverifiable = self.expired_on_source + self.expired_on_target
        if unverifiable:
            message += (
                f"; {unverifiable} records unverifiable ({self.expired_on_source} expired on "
                f"the source, {self.expired_on_target} on the target)"
            )
        return AuditResult(
            time=self.time,
            result=self.result,
            records_checked=self.records_checked,
            records_verified=self.records_verified,
            missing=self.missing,
            altered=self.altered,
            lost_to_retention=self.lost_to_retention,
            unverifiable=self.expired_on_source + self.expired_on_target,
            duplicates=self.duplicates,
            unsafe_checkpoints=self.unsafe_checkpoints,
            max_reread_distance=self.reread.max,
            message=message[:1000],
        )
