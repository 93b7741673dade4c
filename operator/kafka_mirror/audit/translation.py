"""The audit's checks of offset translation: the offset syncs, and the newest checkpoint of every
group and partition (safe when no source record at or after the group's upstream position has
all its copies before the translated target offset; and how many records a consumer failed over
there reads again)."""

from __future__ import annotations

import logging
import math

from confluent_kafka import OFFSET_BEGINNING
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F

from kafka_mirror.audit.records import AuditInputs
from kafka_mirror.audit.report import BadOffsetSync, UnsafeCheckpoint
from kafka_mirror.kafka.formats import Checkpoint, OffsetSync, checkpoints_topic, offset_syncs_topic
from kafka_mirror.kafka.tail import read_to_end

log = logging.getLogger("kafka_mirror.audit")
KEYS = ["topic", "partition", "offset"]
EARLIEST = OFFSET_BEGINNING  # a partition read from its log start
# The internal topics (offset syncs, checkpoints: a few thousand records) are read in the driver
# with confluent-kafka: a Spark job for each costs more than reading them.


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


SyncKey = tuple[str, int, int]  # remote topic, partition, target offset


def offset_syncs_to_check(inputs: AuditInputs) -> list[OffsetSync]:
    """The offset syncs this run judges: new since the watermarks' positions in their topic,
    naming a copy in the range of the remote partition this run reads."""
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
    settings = inputs.source_client if inputs.offset_syncs_on_source else inputs.target_client
    syncs = [
        s
        for s in (
            [OffsetSync.decode(k, v) for k, v in read_to_end(settings, topic, starts)]
            if news
            else []
        )
        if s.downstream_offset in target_range.get((s.topic, s.partition), range(0))
    ]
    log.info("offset syncs: %d to check", len(syncs))
    return syncs


def sync_keys(inputs: AuditInputs, syncs: list[OffsetSync]) -> list[SyncKey]:
    """The copies the syncs name, where they are on the target."""
    remote_of = {(w.topic, w.partition): w.remote for w in inputs.windows}
    return sorted(
        {(remote_of[(s.topic, s.partition)], s.partition, s.downstream_offset) for s in syncs}
    )


def judge_offset_syncs(
    inputs: AuditInputs, syncs: list[OffsetSync], found: dict[SyncKey, int]
) -> tuple[list[BadOffsetSync], int, int]:
    """(wrong syncs, syncs checked, syncs unverifiable), given the source offset each named
    copy still on the target came from (`found`): a sync whose copy retention or compaction
    removed cannot be checked."""
    remote_of = {(w.topic, w.partition): w.remote for w in inputs.windows}
    bad, unverifiable = [], 0
    for s in syncs:
        at = found.get((remote_of[(s.topic, s.partition)], s.partition, s.downstream_offset))
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


def newest_checkpoints(inputs: AuditInputs) -> dict[tuple[str, str, int], Checkpoint]:
    """The newest checkpoint of every group and audited remote partition."""
    remotes = {(w.remote, w.partition) for w in inputs.windows}
    newest: dict[tuple[str, str, int], Checkpoint] = {}
    topic = checkpoints_topic(inputs.source_alias)
    for checkpoint in (
        Checkpoint.decode(k, v) for k, v in read_to_end(inputs.target_client, topic)
    ):
        if (checkpoint.topic, checkpoint.partition) in remotes:
            newest[(checkpoint.group, checkpoint.topic, checkpoint.partition)] = checkpoint
    return newest


def check_checkpoints(
    spark: SparkSession,
    inputs: AuditInputs,
    newest: dict[tuple[str, str, int], Checkpoint],
    target: DataFrame,
) -> tuple[list[UnsafeCheckpoint], list[int], int]:
    """(unsafe checkpoints, the distance each would read again, checkpoints checked), of the
    copies of the current incarnation in `target`."""
    source_of = {(w.remote, w.partition): w.topic for w in inputs.windows}
    log.info("checkpoints: %d to check (the newest per group and partition)", len(newest))
    if not newest:
        return [], [], 0
    copies = target.groupBy(*KEYS).agg(
        F.count("*").alias("copies"), F.max("target_offset").alias("last_target_offset")
    )
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
