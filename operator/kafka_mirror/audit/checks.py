"""The audit's checks, in Spark, over records read with Spark's own Kafka source.

The window, per source partition, is from the log start to the workers' committed offset: every
record before it was acknowledged by the target, so it must be there. Target records name their
source record in the provenance header (alias, partition, offset), which makes every check a
join:

- completeness: source records in the window with no copy on the target (missing), and source
  records with more than one copy (duplicates, which at-least-once allows but we count);
- offset syncs: the target record at each sync's downstream offset came from its upstream offset;
- checkpoints (the newest per group, topic and partition): safe when no source record at or after
  the group's upstream position has all its copies before the translated target offset; and
  how many records a consumer failed over there reads again.
"""

from __future__ import annotations

import json
import logging
import math
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, TypeVar

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kafka_mirror.audit.report import (
    EXAMPLES,
    AuditReport,
    BadOffsetSync,
    Distances,
    PartitionFinding,
    UnsafeCheckpoint,
)
from kafka_mirror.kafka.formats import (
    PROVENANCE_HEADER,
    Checkpoint,
    OffsetSync,
    checkpoints_topic,
    offset_syncs_topic,
)

log = logging.getLogger("kafka_mirror.audit")
Decoded = TypeVar("Decoded", OffsetSync, Checkpoint)


@dataclass(frozen=True)
class PartitionWindow:
    """Source offsets [start, end) of one partition, which must all be on the target."""

    topic: str
    remote: str
    partition: int
    start: int
    end: int


@dataclass(frozen=True)
class AuditInputs:
    mirror: str
    source_alias: str
    target_alias: str
    source_options: dict[str, str]
    target_options: dict[str, str]
    windows: list[PartitionWindow]
    offset_syncs_on_source: bool


def _offsets_json(windows: list[PartitionWindow], pick: Callable[[PartitionWindow], int]) -> str:
    by_topic: dict[str, dict[str, int]] = {}
    for w in windows:
        by_topic.setdefault(w.topic, {})[str(w.partition)] = pick(w)
    return json.dumps(by_topic)


def _read(spark: SparkSession, options: dict[str, str], **extra: str) -> DataFrame:
    reader = spark.read.format("kafka").options(**options)
    for key, value in extra.items():
        reader = reader.option(key, value)
    return reader.load()


def source_records(spark: SparkSession, inputs: AuditInputs) -> DataFrame:
    windows = [w for w in inputs.windows if w.end > w.start]
    return _read(
        spark,
        inputs.source_options,
        assign=json.dumps(_assignment(windows)),
        startingOffsets=_offsets_json(windows, lambda w: w.start),
        endingOffsets=_offsets_json(windows, lambda w: w.end),
    ).select("topic", "partition", "offset")


def _assignment(windows: list[PartitionWindow]) -> dict[str, list[int]]:
    assignment: dict[str, list[int]] = {}
    for w in windows:
        assignment.setdefault(w.topic, []).append(w.partition)
    return assignment


def target_records(spark: SparkSession, inputs: AuditInputs) -> DataFrame:
    """Every record of the remote topics with the source record it names (alias checked)."""
    remotes = sorted({w.remote for w in inputs.windows})
    source_of = {w.remote: w.topic for w in inputs.windows}
    to_source = F.create_map(*[F.lit(name) for pair in source_of.items() for name in pair])
    raw = _read(
        spark,
        inputs.target_options,
        subscribe=",".join(remotes),
        startingOffsets="earliest",
        endingOffsets="latest",
        includeHeaders="true",
    )
    # The newest provenance header is this hop's: STRING alias, INT32 partition, INT64 offset,
    # then (from workers that write it) the source topic's 16-byte ID, not read here: the
    # fields above sit at the same places in both forms.
    header = F.element_at(
        F.filter("headers", lambda h: h["key"] == PROVENANCE_HEADER), -1
    ).getField("value")
    alias_length = F.conv(F.hex(F.substring(header, 1, 2)), 16, 10).cast("int")
    return (
        raw.select(
            F.col("topic").alias("remote"),
            F.col("partition").alias("target_partition"),
            F.col("offset").alias("target_offset"),
            header.alias("h"),
            alias_length.alias("alias_length"),
        )
        .where(F.col("h").isNotNull())
        .select(
            "remote",
            "target_partition",
            "target_offset",
            to_source[F.col("remote")].alias("topic"),
            F.expr("cast(substring(h, 3, alias_length) as string)").alias("alias"),
            F.expr("cast(conv(hex(substring(h, 3 + alias_length, 4)), 16, 10) as int)").alias(
                "partition"
            ),
            F.expr("cast(conv(hex(substring(h, 7 + alias_length, 8)), 16, 10) as bigint)").alias(
                "offset"
            ),
        )
        .where(F.col("alias") == inputs.source_alias)
    )


def _internal(
    spark: SparkSession, options: dict[str, str], topic: str, decode: Callable[..., Decoded]
) -> list[Decoded]:
    """A (small, compacted) internal topic, decoded with our MirrorMaker 2 formats."""
    try:
        rows = (
            _read(
                spark, options, subscribe=topic, startingOffsets="earliest", endingOffsets="latest"
            )
            .select("key", "value")
            .collect()
        )
    except Exception as error:  # the topic does not exist yet (nothing synced)
        if "UnknownTopicOrPartition" in str(error) or "does not exist" in str(error):
            return []
        raise
    return [decode(bytes(row["key"]), bytes(row["value"])) for row in rows if row["value"]]


def _percentile(values: list[int], share: float) -> int:
    """Nearest rank: the smallest value with at least `share` of them at or below it."""
    ordered = sorted(values)
    return ordered[max(math.ceil(share * len(ordered)) - 1, 0)] if ordered else 0


def run_checks(spark: SparkSession, inputs: AuditInputs) -> AuditReport:
    started = time.monotonic()
    if not inputs.windows:  # no topic selected (yet): nothing on the target to answer for
        log.info("no selected topics: nothing to audit")
        return AuditReport(mirror=inputs.mirror, time=datetime.now(UTC), seconds=0, result="Passed")
    windows = [w for w in inputs.windows if w.end > w.start]
    log.info("auditing %d partitions of %d topics", len(windows), len({w.topic for w in windows}))
    keys = ["topic", "partition", "offset"]
    source = source_records(spark, inputs).cache() if windows else None
    target = target_records(spark, inputs).cache()
    # Used by the completeness joins and the checkpoint check: aggregate once.
    copies = (
        target.groupBy(*keys)
        .agg(F.count("*").alias("copies"), F.max("target_offset").alias("last_target_offset"))
        .cache()
    )

    findings: dict[tuple[str, int], PartitionFinding] = {}
    records_checked = missing_total = duplicate_total = 0
    if source is not None:
        records_checked = source.count()
        log.info("completeness: %d source records in the window", records_checked)
        missing = source.join(copies, keys, "left_anti")
        in_window = source.join(copies, keys).where(F.col("copies") > 1)
        for kind, frame, count in (
            ("missing", missing, F.count("*")),
            ("duplicates", in_window, F.sum(F.col("copies") - 1)),
        ):
            rows = (
                frame.groupBy("topic", "partition")
                .agg(
                    count.alias("n"),
                    F.slice(F.sort_array(F.collect_list("offset")), 1, EXAMPLES).alias("examples"),
                )
                .collect()
            )
            for row in rows:
                finding = findings.setdefault(
                    (row["topic"], row["partition"]),
                    PartitionFinding(topic=row["topic"], partition=row["partition"]),
                )
                if kind == "missing":
                    finding.missing, finding.missing_offsets = int(row["n"]), list(row["examples"])
                    missing_total += int(row["n"])
                else:
                    finding.duplicates = int(row["n"])
                    finding.duplicated_offsets = list(row["examples"])
                    duplicate_total += int(row["n"])

    bad_syncs, syncs_checked = _check_offset_syncs(spark, inputs, target)
    unsafe, reread, checkpoints_checked = _check_checkpoints(spark, inputs, target, copies)

    passed = missing_total == 0 and not unsafe and not bad_syncs
    return AuditReport(
        mirror=inputs.mirror,
        time=datetime.now(UTC),
        seconds=round(time.monotonic() - started, 2),
        result="Passed" if passed else "Failed",
        partitions_checked=len(windows),
        records_checked=records_checked,
        missing=missing_total,
        duplicates=duplicate_total,
        offset_syncs_checked=syncs_checked,
        bad_offset_syncs=len(bad_syncs),
        checkpoints_checked=checkpoints_checked,
        unsafe_checkpoints=len(unsafe),
        reread=Distances(
            max=max(reread, default=0),
            p50=_percentile(reread, 0.50),
            p95=_percentile(reread, 0.95),
            p99=_percentile(reread, 0.99),
        ),
        findings=sorted(findings.values(), key=lambda f: (f.topic, f.partition)),
        bad_syncs=bad_syncs[:100],
        unsafe=unsafe[:100],
    )


def _check_offset_syncs(
    spark: SparkSession, inputs: AuditInputs, target: DataFrame
) -> tuple[list[BadOffsetSync], int]:
    options = inputs.source_options if inputs.offset_syncs_on_source else inputs.target_options
    remote_of = {(w.topic, w.partition): w.remote for w in inputs.windows}
    topic = offset_syncs_topic(
        inputs.source_alias,
        inputs.target_alias,
        "source" if inputs.offset_syncs_on_source else "target",
    )
    # The syncs are read after the target records: one pointing past the last record read of
    # its partition names a record written since, which this run cannot judge.
    read_up_to = {
        (row["remote"], row["target_partition"]): row["last"]
        for row in target.groupBy("remote", "target_partition")
        .agg(F.max("target_offset").alias("last"))
        .collect()
    }
    syncs = []
    for s in _internal(spark, options, topic, OffsetSync.decode):
        remote = remote_of.get((s.topic, s.partition))
        if remote is not None and s.downstream_offset <= read_up_to.get((remote, s.partition), -1):
            syncs.append(s)
    log.info("offset syncs: %d to check", len(syncs))
    if not syncs:
        return [], 0
    claimed = spark.createDataFrame(
        [
            (remote_of[(s.topic, s.partition)], s.partition, s.downstream_offset, s.upstream_offset)
            for s in syncs
        ],
        "remote string, target_partition int, target_offset bigint, upstream bigint",
    )
    found = {
        (row["remote"], row["target_partition"], row["target_offset"]): row["offset"]
        for row in claimed.join(
            target.select("remote", "target_partition", "target_offset", "offset"),
            ["remote", "target_partition", "target_offset"],
        ).collect()
    }
    bad = []
    for s in syncs:
        at = found.get((remote_of[(s.topic, s.partition)], s.partition, s.downstream_offset))
        if at != s.upstream_offset:
            bad.append(
                BadOffsetSync(
                    topic=s.topic,
                    partition=s.partition,
                    upstream_offset=s.upstream_offset,
                    downstream_offset=s.downstream_offset,
                    found_upstream_offset=at,
                )
            )
    return bad, len(syncs)


def _check_checkpoints(
    spark: SparkSession, inputs: AuditInputs, target: DataFrame, copies: DataFrame
) -> tuple[list[UnsafeCheckpoint], list[int], int]:
    source_of = {(w.remote, w.partition): w.topic for w in inputs.windows}
    newest: dict[tuple[str, str, int], Checkpoint] = {}
    for checkpoint in _internal(
        spark, inputs.target_options, checkpoints_topic(inputs.source_alias), Checkpoint.decode
    ):
        if (checkpoint.topic, checkpoint.partition) in source_of:
            newest[(checkpoint.group, checkpoint.topic, checkpoint.partition)] = checkpoint
    log.info("checkpoints: %d to check (the newest per group and partition)", len(newest))
    if not newest:
        return [], [], 0
    points = spark.createDataFrame(
        [
            (
                c.group,
                c.topic,
                source_of[(c.topic, c.partition)],
                c.partition,
                c.upstream_offset,
                c.downstream_offset,
            )
            for c in newest.values()
        ],
        "group string, remote string, topic string, partition int, "
        "upstream bigint, downstream bigint",
    )
    # Skipped by a failover: at or after the group's position, with every copy before the
    # translated offset.
    skipped = {
        (row["group"], row["remote"], row["partition"]): (int(row["n"]), int(row["first"]))
        for row in F.broadcast(points)
        .join(copies, ["topic", "partition"])
        .where(
            (F.col("offset") >= F.col("upstream"))
            & (F.col("last_target_offset") < F.col("downstream"))
        )
        .groupBy("group", "remote", "partition")
        .agg(F.count("*").alias("n"), F.min("offset").alias("first"))
        .collect()
    }
    # Read again after a failover: at or after the translated offset, from before the position.
    copies_at = target.select(
        F.col("remote").alias("copy_remote"),
        F.col("target_partition"),
        F.col("target_offset"),
        F.col("offset").alias("source_offset"),
    )
    reread = {
        (row["group"], row["remote"], row["partition"]): int(row["n"])
        for row in F.broadcast(points)
        .join(
            copies_at,
            (F.col("remote") == F.col("copy_remote"))
            & (F.col("partition") == F.col("target_partition")),
        )
        .where(
            (F.col("target_offset") >= F.col("downstream"))
            & (F.col("source_offset") < F.col("upstream"))
        )
        .groupBy("group", "remote", "partition")
        .agg(F.count("*").alias("n"))
        .collect()
    }
    unsafe = [
        UnsafeCheckpoint(
            group=c.group,
            topic=c.topic,
            partition=c.partition,
            upstream_offset=c.upstream_offset,
            downstream_offset=c.downstream_offset,
            skipped=skipped[key][0],
            first_skipped_offset=skipped[key][1],
        )
        for key, c in sorted(newest.items())
        if key in skipped
    ]
    distances = [reread.get(key, 0) for key in newest]
    return unsafe, distances, len(newest)


def as_json(report: AuditReport) -> str:
    data: Any = report.model_dump(mode="json", by_alias=True)
    return json.dumps(data, indent=2)
