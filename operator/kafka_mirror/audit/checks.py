"""The audit's checks, in Spark, over records read with Spark's own Kafka source.

The window, per source partition, is from the log start to the workers' committed offset: every
record before it was acknowledged by the target, so it must be there. A run audits the window
from the previous run's verified watermark on (`watermarks.py`), and reads the remote partition
from where the copies of those records begin; it moves the watermark up to the first record
that failed. Target records name their
source record in the provenance header (alias, partition, offset, topic ID), which makes every
check a join. Only what both sides can still show is compared:

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
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from typing import Any

from pyspark.sql import DataFrame, Row, SparkSession
from pyspark.sql import functions as F

from kafka_mirror.audit.records import (
    AuditInputs,
    PartitionWindow,
    source_records,
    target_records,
)
from kafka_mirror.audit.report import (
    EXAMPLES,
    AuditReport,
    BadOffsetSync,
    Distances,
    PartitionFinding,
    VerifiedPartition,
)
from kafka_mirror.audit.translation import (
    SyncKey,
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
KEYS = ["topic", "partition", "offset"]
KINDS = ("missing", "altered", "duplicates", "expired_on_target")
PRESENT, CYCLE = "present", "cycle"  # the other kinds of a source record: not findings


@dataclass(frozen=True)
class TargetSummary:
    """What the checks need of the target's copies, from one Spark job."""

    # Per remote partition, its first copy read: (target_offset, current, offset).
    first: dict[tuple[str, int], Row]
    # Per source partition, copies of records that left the source since the last verified one.
    expired_on_source: dict[tuple[str, int], int]
    # Per source partition, the first copy (target offset) of a record at or after the
    # watermark it gets when no record of it fails: max(resume, end).
    first_after: dict[tuple[str, int], int]
    # Per copy an offset sync names, the source offset it came from (absent: not there).
    synced: dict[SyncKey, int]


def summarize_target(
    spark: SparkSession, inputs: AuditInputs, target: DataFrame, syncs: list[SyncKey]
) -> TargetSummary:
    """Every per-partition figure of the target in one pass: a Spark job costs about a second
    whatever its records, so the figures are aggregates of one grouping, not a job each."""
    bounds = spark.createDataFrame(
        [(w.topic, w.partition, w.start, w.resume, max(w.resume, w.end)) for w in inputs.windows],
        "topic string, partition int, start bigint, resume bigint, mark bigint",
    )
    rows = target.join(F.broadcast(bounds), ["topic", "partition"], "left")
    synced = F.lit(False)
    if syncs:
        named = spark.createDataFrame(
            syncs, "remote string, target_partition int, target_offset bigint"
        ).withColumn("synced", F.lit(True))
        rows = rows.join(
            F.broadcast(named), ["remote", "target_partition", "target_offset"], "left"
        )
        synced = F.coalesce(F.col("synced"), F.lit(False))
    current, offset = F.col("current"), F.col("offset")
    expired = current & (offset < F.col("start")) & (offset >= F.col("resume"))
    after = current & (offset >= F.col("mark")) & (F.col("target_partition") == F.col("partition"))
    summary = TargetSummary({}, {}, {}, {})
    for row in (
        rows.groupBy("remote", "target_partition", "topic", "partition")
        .agg(
            F.min(F.struct("target_offset", "current", "offset")).alias("first"),
            F.sum(expired.cast("int")).alias("expired"),
            F.min(F.when(after, F.col("target_offset"))).alias("first_after"),
            F.collect_list(F.when(synced, F.struct("target_offset", "offset"))).alias("synced"),
        )
        .collect()
    ):
        remote, source = (row["remote"], row["target_partition"]), (row["topic"], row["partition"])
        known = summary.first.get(remote)
        if known is None or row["first"]["target_offset"] < known["target_offset"]:
            summary.first[remote] = row["first"]
        if row["expired"]:
            summary.expired_on_source[source] = int(row["expired"])
        if row["first_after"] is not None:
            summary.first_after[source] = min(
                int(row["first_after"]), summary.first_after.get(source, row["first_after"])
            )
        for copy in row["synced"]:
            summary.synced[(*remote, int(copy["target_offset"]))] = int(copy["offset"])
    return summary


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
        if w.target_start <= w.target_resume or (copy is not None and not copy["current"]):
            bounds[(w.topic, w.partition)] = w.audit_from
        elif copy is None:  # the target's retention removed every copy
            bounds[(w.topic, w.partition)] = w.end
        else:
            bounds[(w.topic, w.partition)] = max(w.audit_from, copy["offset"])
    return bounds


Counts = dict[tuple[str, int], tuple[int, int]]  # per source partition: records, cycle skips


def _findings(
    spark: SparkSession,
    inputs: AuditInputs,
    source: DataFrame,
    target: DataFrame,
    summary: TargetSummary,
) -> tuple[dict[tuple[str, int], PartitionFinding], Counts]:
    """Per source partition, what is wrong or unverifiable, and the counts of its records in
    the window: one Spark job (none when no window has new offsets)."""
    findings: dict[tuple[str, int], PartitionFinding] = {}

    def finding(topic: str, partition: int) -> PartitionFinding:
        return findings.setdefault(
            (topic, partition), PartitionFinding(topic=topic, partition=partition)
        )

    current = target.where("current")
    start_of = verifiable_from(inputs.windows, summary.first)
    bounds = spark.createDataFrame(
        [
            (w.topic, w.partition, w.start, w.resume, start_of[(w.topic, w.partition)])
            for w in inputs.windows
        ],
        "topic string, partition int, start bigint, resume bigint, verify_from bigint",
    )
    copies = current.select(*KEYS, F.col("hash").alias("copy_hash"))
    # Where the target compacts, a copy with a newer copy of its key may have been removed.
    compacted = sorted({w.topic for w in inputs.windows if w.remote in inputs.compacted_remotes})
    per_record = (
        source.join(copies, KEYS, "left")
        .groupBy(*KEYS, "key", "hash", "cycle")
        .agg(
            F.count("copy_hash").alias("copies"),
            F.sum((F.col("copy_hash") == F.col("hash")).cast("int")).alias("same"),
        )
        .join(F.broadcast(bounds), ["topic", "partition"])
    )
    if compacted:  # else no newest copy to look up: a shuffle less
        newest = (
            current.where(F.col("topic").isin(compacted))
            .groupBy("topic", "partition", "key")
            .agg(F.max("offset").alias("newest_copy"))
        )
        per_record = per_record.join(newest, ["topic", "partition", "key"], "left")
    else:
        per_record = per_record.withColumn("newest_copy", F.lit(None).cast("bigint"))
    removed_on_target = (F.col("offset") < F.col("verify_from")) | (
        F.coalesce(F.col("newest_copy"), F.lit(-1)) > F.col("offset")
    )
    kind = (
        F.when(F.col("cycle"), CYCLE)
        .when((F.col("copies") == 0) & removed_on_target, KINDS[3])
        .when(F.col("copies") == 0, KINDS[0])
        .when(F.col("copies") > F.col("same"), KINDS[1])
        .when(F.col("same") > 1, KINDS[2])
        .otherwise(PRESENT)
    )
    found = F.col("kind").isin(*KINDS)
    new = any(w.end > w.audit_from for w in inputs.windows)
    rows = (
        per_record.select(*KEYS, kind.alias("kind"), (F.col("same") - 1).alias("extra"))
        .groupBy("topic", "partition", "kind")
        .agg(
            F.count("*").alias("n"),
            F.sum(F.when(found, F.col("extra"))).alias("extra"),
            F.slice(
                F.sort_array(F.collect_list(F.when(found, F.col("offset")))), 1, EXAMPLES
            ).alias("examples"),
        )
        .collect()
        if new  # else no job: nothing to compare
        else []
    )
    records: dict[tuple[str, int], int] = {}
    cycles: dict[tuple[str, int], int] = {}
    for row in rows:
        key, n = (row["topic"], row["partition"]), int(row["n"])
        if row["kind"] == CYCLE:
            cycles[key] = n
            finding(*key).skipped_cycles = n
            continue
        records[key] = records.get(key, 0) + n
        found_here = finding(*key) if row["kind"] != PRESENT else None
        examples = list(row["examples"])
        if found_here is None:
            continue
        if row["kind"] == "missing":
            found_here.missing, found_here.missing_offsets = n, examples
        elif row["kind"] == "altered":
            found_here.altered, found_here.altered_offsets = n, examples
        elif row["kind"] == "duplicates":
            found_here.duplicates, found_here.duplicated_offsets = int(row["extra"]), examples
        else:
            found_here.expired_on_target = n
    # Copies of records that left the source since the last verified one (all, on a full run).
    for (topic, partition), n in summary.expired_on_source.items():
        finding(topic, partition).expired_on_source = n
    for w in inputs.windows:
        if w.loss is not None and w.loss.records:
            lost = finding(w.topic, w.partition)
            lost.lost_to_retention, lost.lost_offsets = w.loss.records, [w.loss.first, w.loss.end]
    counts = {key: (records.get(key, 0), cycles.get(key, 0)) for key in records.keys() | cycles}
    return findings, counts


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
    spark: SparkSession,
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
    marks = F.broadcast(
        spark.createDataFrame(
            [(*key, to[key]) for key in stopped],
            "topic string, partition int, verified_to bigint",
        )
    )
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
            source.where(~F.col("cycle"))
            .join(marks, ["topic", "partition"])
            .where(F.col("offset") < F.col("verified_to"))
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
            current.join(marks, ["topic", "partition"])
            .where(
                (F.col("offset") >= F.col("verified_to"))
                & (F.col("target_partition") == F.col("partition"))
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
    # Read once, used by every job below; the source only by the comparison (and, when a
    # watermark stopped inside the window, the count below it).
    target = target_records(spark, inputs).cache()
    source = (
        source_records(spark, inputs)
        if windows
        else spark.createDataFrame(
            [], "topic string, partition int, offset bigint, key binary, hash bigint, cycle boolean"
        )
    )
    summary = summarize_target(spark, inputs, target, sync_keys(inputs, syncs))
    findings, counts = _findings(spark, inputs, source, target, summary)
    in_window = sum(records for records, _ in counts.values())
    listed = sorted(findings.values(), key=lambda f: (f.topic, f.partition))

    def total(field: str) -> int:
        return sum(getattr(f, field) for f in listed)

    current = target.where("current")
    bad_syncs, syncs_checked, syncs_unverifiable = judge_offset_syncs(inputs, syncs, summary.synced)
    unsafe, reread, checkpoints_checked = check_checkpoints(spark, inputs, checkpoints, current)
    verified = _verified(
        spark, inputs, findings, bad_syncs, source, current, counts, summary.first_after
    )
    target.unpersist()
    failed = total("missing") or total("altered") or total("lost_to_retention")
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
