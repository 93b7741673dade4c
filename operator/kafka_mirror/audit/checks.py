"""The audit's checks, in Spark, over records read with Spark's own Kafka source.

The window, per source partition, is from the log start to the workers' committed offset: every
record before it was acknowledged by the target, so it must be there. A run audits the window
from the previous run's verified watermark on (`watermarks.py`), and reads the remote partition
from where the copies of those records begin; it moves the watermark up to the first record
that failed. Target records name their
source record in the provenance header (alias, partition, offset, topic ID), so each source
record and its copies group together (`compare.py`). Only what both sides can still show is
compared:

- completeness, per source record of the window: on the target (a copy of the topic's current
  incarnation: copies of a deleted topic's records do not count) with the same content, else
  missing or altered; more than one copy is a duplicate, which at-least-once allows but we
  count. Records the workers skipped as cycles (identity naming) are counted apart;
- unverifiable, counted: source records whose copies the target's retention removed (before the
  first copy still there) or its compaction (a newer copy of the key is there), and copies
  whose source record left the source after it was copied;
- loss to retention: records that left the source before they were mirrored, as the workers
  counted them (and as the source's log start shows for a mirror stopped since);
- offset syncs and checkpoints (`translation.py`).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Iterable
from dataclasses import replace
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from kafka_mirror.audit.compare import Comparison, Counts, compare, per_partition
from kafka_mirror.audit.records import (
    AuditInputs,
    PartitionWindow,
    source_records,
    target_records,
)
from kafka_mirror.audit.report import (
    AuditReport,
    BadOffsetSync,
    Distances,
    PartitionFinding,
    VerifiedPartition,
)
from kafka_mirror.audit.translation import (
    check_checkpoints,
    judge_offset_syncs,
    newest_checkpoints,
    offset_syncs_to_check,
    percentile,
    sync_keys,
)
from kafka_mirror.audit.watermarks import verified_to
from kafka_mirror.kafka.formats import Checkpoint

log = logging.getLogger("kafka_mirror.audit")


def first_copies(target: DataFrame, windows: list[PartitionWindow]) -> dict[tuple[str, int], Row]:
    """Per remote partition whose start the target's retention removed (past where this run
    reads it from), its first copy read: (target_offset, current, offset). A Spark job, only
    where there is such a partition."""
    if not any(w.trimmed for w in windows):
        return {}
    rows = (
        target.groupBy("remote", "target_partition")
        .agg(F.min(F.struct("target_offset", "current", "offset")).alias("first"))
        .collect()
    )
    return {(row["remote"], row["target_partition"]): row["first"] for row in rows}


def verifiable_from(
    windows: list[PartitionWindow], first: dict[tuple[str, int], Row]
) -> dict[tuple[str, int], int]:
    """Per source partition, the first offset whose copy the target can still show: where the
    target's retention removed the start of the remote partition, the source offset of the
    first copy left (of the current incarnation; one of an older incarnation first means the
    removal did not reach this one)."""
    bounds = {}
    for w in windows:
        copy = first.get((w.remote, w.partition))
        # Nothing removed from where the copies are read (the start, or the watermark's).
        if not w.trimmed or (copy is not None and not copy["current"]):
            bounds[(w.topic, w.partition)] = w.audit_from
        elif copy is None:  # the target's retention removed every copy
            bounds[(w.topic, w.partition)] = w.end
        else:
            bounds[(w.topic, w.partition)] = max(w.audit_from, copy["offset"])
    return bounds


def judged_in_full(
    windows: list[PartitionWindow], checkpoints: Iterable[Checkpoint]
) -> list[PartitionWindow]:
    """The windows with no watermark where a checkpoint lies before it (a group behind the
    verified records, or translated to before the copies read from it): judging it takes the
    records and copies before the watermark, so that partition is audited from its start."""
    by_remote = {(w.remote, w.partition): w for w in windows}
    behind = {
        key
        for c in checkpoints
        if (w := by_remote.get(key := (c.topic, c.partition))) is not None
        and (c.upstream_offset < w.resume or c.downstream_offset < w.target_resume)
    }
    return [replace(w, previous=None) if (w.remote, w.partition) in behind else w for w in windows]


def _verified(
    inputs: AuditInputs,
    findings: dict[tuple[str, int], PartitionFinding],
    bad_syncs: list[BadOffsetSync],
    source: DataFrame,
    current: DataFrame,
    counts: Counts,
    first_after: dict[tuple[str, int], int],
) -> list[VerifiedPartition]:
    """Each partition's new watermark: how far it was verified, where the copies of the records
    after that begin on the target, how many records are verified below it, and how far its
    offset syncs were checked (not past a wrong one, so the next run finds it again)."""
    windows = inputs.windows
    bad = {(s.topic, s.partition) for s in bad_syncs}
    to = {
        (w.topic, w.partition): verified_to(
            w.resume, w.end, findings.get((w.topic, w.partition)), (w.topic, w.partition) in bad
        )
        for w in windows
    }
    # A watermark that went where nothing failed has its first copy after it from the target's
    # summary; only one that stopped at a failure (or a wrong sync) takes Spark jobs: the
    # records below it (where it stopped inside the window read) and the first copy after it.
    stopped = [
        (w.topic, w.partition)
        for w in windows
        if to[(w.topic, w.partition)] != max(w.resume, w.end)
    ]
    mark = per_partition({key: {"verified_to": to[key]} for key in stopped})["verified_to"]
    counted = {}
    inside = []
    for w in windows:
        key = (w.topic, w.partition)
        if to[key] >= w.end:
            counted[key] = counts.get(key, (0, 0))[0]
        elif to[key] > w.audit_from:
            inside.append(key)
    if inside:
        below = (
            source.where(~F.col("cycle") & (F.col("offset") < mark))
            .groupBy("topic", "partition")
            .count()
            .collect()
        )
        counted |= {
            (row["topic"], row["partition"]): int(row["count"])
            for row in below
            if (row["topic"], row["partition"]) in inside
        }
    first_copy = {key: offset for key, offset in first_after.items() if key not in stopped}
    if stopped:
        after = (
            current.where(
                (F.col("offset") >= mark) & (F.col("target_partition") == F.col("partition"))
            )
            .groupBy("topic", "partition")
            .agg(F.min("target_offset").alias("first"))
            .collect()
        )
        first_copy |= {(row["topic"], row["partition"]): int(row["first"]) for row in after}
    return [
        VerifiedPartition(
            topic=w.topic,
            partition=w.partition,
            audited_from=w.audit_from,
            verified_to=to[key],
            # No copy after the watermark yet: they can only come after the log end read.
            target_offset=first_copy.get(key, max(w.target_end, w.target_resume)),
            records=(w.previous.records if w.previous else 0) + counted.get(key, 0),
            offset_syncs_position=(
                (w.previous.offset_syncs_position if w.previous else None)
                if key in bad
                else inputs.offset_syncs_end
            ),
        )
        for w in windows
        for key in [(w.topic, w.partition)]
    ]


def run_checks(spark: SparkSession, inputs: AuditInputs) -> AuditReport:
    started = time.monotonic()
    if not inputs.windows:  # no topic selected (yet): nothing on the target to answer for
        log.info("no selected topics: nothing to audit")
        return AuditReport(mirror=inputs.mirror, time=datetime.now(UTC), seconds=0, result="Passed")
    checkpoints = newest_checkpoints(inputs)
    inputs = replace(inputs, windows=judged_in_full(inputs.windows, checkpoints.values()))
    windows = [w for w in inputs.windows if w.end > w.audit_from]
    resumed = sum(1 for w in inputs.windows if w.previous)
    log.info(
        "auditing %d partitions of %d topics (%d from a watermark)",
        len(windows),
        len({w.topic for w in windows}),
        resumed,
    )
    syncs = offset_syncs_to_check(inputs)
    target = target_records(spark, inputs)
    # Only where a check takes another query (checkpoints, the first copies of a remote
    # partition whose start was removed, the newest copies where the target compacts) are the
    # copies kept for it: else the one comparison reads them once.
    again = checkpoints or any(
        w.trimmed or w.remote in inputs.compacted_remotes for w in inputs.windows
    )
    if again:
        target = target.cache()
    source = (
        source_records(spark, inputs)
        if windows
        else spark.createDataFrame(
            [], "topic string, partition int, offset bigint, key binary, hash bigint, cycle boolean"
        )
    )
    # No Spark job at all where there is nothing new to read on either side.
    on_target = any(max(w.target_start, w.target_resume) < w.target_end for w in inputs.windows)
    comparison = (
        compare(
            inputs,
            source,
            target,
            verifiable_from(inputs.windows, first_copies(target, inputs.windows)),
            sync_keys(inputs, syncs),
        )
        if windows or on_target
        else Comparison()
    )
    for w in inputs.windows:
        if w.loss is not None and w.loss.records:
            lost = comparison.finding(w.topic, w.partition)
            lost.lost_to_retention, lost.lost_offsets = w.loss.records, [w.loss.first, w.loss.end]
    in_window = sum(records for records, _ in comparison.counts.values())
    listed = sorted(comparison.findings.values(), key=lambda f: (f.topic, f.partition))

    def total(field: str) -> int:
        return sum(getattr(f, field) for f in listed)

    current = target.where("current")
    bad_syncs, syncs_checked, syncs_unverifiable = judge_offset_syncs(
        inputs, syncs, comparison.synced
    )
    unsafe, reread, checkpoints_checked = check_checkpoints(spark, inputs, checkpoints, current)
    verified = _verified(
        inputs,
        comparison.findings,
        bad_syncs,
        source,
        current,
        comparison.counts,
        comparison.first_after,
    )
    if again:
        target.unpersist()
    failed = total("missing") or total("altered") or total("lost_to_retention")
    failed = failed or (inputs.exactly_once and total("duplicates"))
    return AuditReport(
        mirror=inputs.mirror,
        time=datetime.now(UTC),
        seconds=round(time.monotonic() - started, 2),
        result="Failed" if failed or unsafe or bad_syncs else "Passed",
        partitions_checked=len(windows),
        partitions_resumed=resumed,
        records_checked=in_window - total("expired_on_target"),
        records_verified=sum(v.records for v in verified),
        missing=total("missing"),
        altered=total("altered"),
        duplicates=total("duplicates"),
        exactly_once=inputs.exactly_once,
        lost_to_retention=total("lost_to_retention"),
        expired_on_source=total("expired_on_source"),
        expired_on_target=total("expired_on_target"),
        skipped_cycles=total("skipped_cycles"),
        offset_syncs_checked=syncs_checked,
        offset_syncs_unverifiable=syncs_unverifiable,
        bad_offset_syncs=len(bad_syncs),
        checkpoints_checked=checkpoints_checked,
        unsafe_checkpoints=len(unsafe),
        reread=Distances(
            max=max(reread, default=0),
            p50=percentile(reread, 0.50),
            p95=percentile(reread, 0.95),
            p99=percentile(reread, 0.99),
        ),
        findings=listed,
        bad_syncs=bad_syncs[:100],
        unsafe=unsafe[:100],
        verified=verified,
    )


def as_json(report: AuditReport) -> str:
    data: Any = report.model_dump(mode="json", by_alias=True)
    return json.dumps(data, indent=2)
