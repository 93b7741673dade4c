"""The audit's checks of offset translation: the offset syncs, and the newest checkpoint of every
group and partition (safe when no source record at or after the group's upstream position has
all its copies before the translated target offset; and how many records a consumer failed over
there reads again)."""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable
from typing import TypeVar

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kafka_mirror.audit.records import AuditInputs, read_kafka
from kafka_mirror.audit.report import BadOffsetSync, UnsafeCheckpoint
from kafka_mirror.kafka.formats import Checkpoint, OffsetSync, checkpoints_topic, offset_syncs_topic

log = logging.getLogger("kafka_mirror.audit")
Decoded = TypeVar("Decoded", OffsetSync, Checkpoint)
EARLIEST = -2  # Spark's per-partition startingOffsets for a partition's log start


def _internal(
    spark: SparkSession,
    options: dict[str, str],
    topic: str,
    decode: Callable[..., Decoded],
    starts: dict[int, int] | None = None,
) -> list[Decoded]:
    """A (small, compacted) internal topic, decoded with our MirrorMaker 2 formats: all of it,
    or its partitions from `starts` on."""
    where = (
        {"assign": json.dumps({topic: sorted(starts)}), "startingOffsets": _offsets(topic, starts)}
        if starts is not None
        else {"subscribe": topic, "startingOffsets": "earliest"}
    )
    try:
        rows = (
            read_kafka(spark, options, endingOffsets="latest", **where)
            .select("key", "value")
            .collect()
        )
    except Exception as error:  # the topic does not exist yet (nothing synced)
        if "UnknownTopicOrPartition" in str(error) or "does not exist" in str(error):
            return []
        raise
    return [decode(bytes(row["key"]), bytes(row["value"])) for row in rows if row["value"]]


def _offsets(topic: str, offsets: dict[int, int]) -> str:
    return json.dumps({topic: {str(p): offset for p, offset in offsets.items()}})


def offset_syncs_start(inputs: AuditInputs) -> dict[int, int]:
    """Per partition of the offset-sync topic, where this run reads it: the lowest position the
    watermarks kept (every sync below it was checked by an earlier run), its start where a
    partition has none."""
    kept = [w.previous.offset_syncs_position if w.previous else None for w in inputs.windows]
    return {
        p: min((k.get(p, EARLIEST) if k else EARLIEST) for k in kept) if kept else EARLIEST
        for p in inputs.offset_syncs_end
    }


def percentile(values: list[int], share: float) -> int:
    """Nearest rank: the smallest value with at least `share` of them at or below it."""
    ordered = sorted(values)
    return ordered[max(math.ceil(share * len(ordered)) - 1, 0)] if ordered else 0


def check_offset_syncs(
    spark: SparkSession, inputs: AuditInputs, target: DataFrame
) -> tuple[list[BadOffsetSync], int, int]:
    """(wrong syncs, syncs checked, syncs unverifiable): a sync is checked where its target
    record is still there; one whose record retention or compaction removed cannot be."""
    options = inputs.source_options if inputs.offset_syncs_on_source else inputs.target_options
    remote_of = {(w.topic, w.partition): w.remote for w in inputs.windows}
    topic = offset_syncs_topic(
        inputs.source_alias,
        inputs.target_alias,
        "source" if inputs.offset_syncs_on_source else "target",
    )
    target_range = {
        (w.topic, w.partition): range(w.target_resume, w.target_end) for w in inputs.windows
    }
    # The syncs are read after the windows: one at or past its remote partition's end then
    # names a record written since, which this run cannot judge (a live mirror's syncs). One
    # before the watermark's target offset, or below its position in the topic, was checked
    # by an earlier run.
    starts = offset_syncs_start(inputs)
    news = any(max(start, 0) < inputs.offset_syncs_end[p] for p, start in starts.items())
    syncs = [
        s
        for s in (_internal(spark, options, topic, OffsetSync.decode, starts) if news else [])
        if s.downstream_offset in target_range.get((s.topic, s.partition), range(0))
    ]
    log.info("offset syncs: %d to check", len(syncs))
    if not syncs:
        return [], 0, 0
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
    bad, unverifiable = [], 0
    for s in syncs:
        remote = remote_of[(s.topic, s.partition)]
        at = found.get((remote, s.partition, s.downstream_offset))
        if at is None:
            unverifiable += 1  # removed from the target since (retention, compaction)
        elif at != s.upstream_offset:
            bad.append(
                BadOffsetSync(
                    topic=s.topic,
                    partition=s.partition,
                    upstream_offset=s.upstream_offset,
                    downstream_offset=s.downstream_offset,
                    found_upstream_offset=at,
                )
            )
    return bad, len(syncs) - unverifiable, unverifiable


def newest_checkpoints(
    spark: SparkSession, inputs: AuditInputs
) -> dict[tuple[str, str, int], Checkpoint]:
    """The newest checkpoint of every group and audited remote partition."""
    remotes = {(w.remote, w.partition) for w in inputs.windows}
    newest: dict[tuple[str, str, int], Checkpoint] = {}
    for checkpoint in _internal(
        spark, inputs.target_options, checkpoints_topic(inputs.source_alias), Checkpoint.decode
    ):
        if (checkpoint.topic, checkpoint.partition) in remotes:
            newest[(checkpoint.group, checkpoint.topic, checkpoint.partition)] = checkpoint
    return newest


def check_checkpoints(
    spark: SparkSession,
    inputs: AuditInputs,
    newest: dict[tuple[str, str, int], Checkpoint],
    target: DataFrame,
    copies: DataFrame,
) -> tuple[list[UnsafeCheckpoint], list[int], int]:
    source_of = {(w.remote, w.partition): w.topic for w in inputs.windows}
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
