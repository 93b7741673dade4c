"""The comparison of a run's source records with their copies on the target: one Spark query.

A Spark job costs a few tenths of a second whatever its records, and an incremental run has few
records, so the run's figures come from one query of two aggregations: the source records and
the copies grouped by the source record they are (or name), then those groups counted per
source partition and kind. The driver's small tables (each partition's bounds, the copies the
offset syncs name) go into the query as literals, not as joined tables: a broadcast join is a
job of its own.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame, Row
from pyspark.sql import functions as F

from kafka_mirror.audit.records import AuditInputs, PartitionWindow
from kafka_mirror.audit.report import EXAMPLES, PartitionFinding
from kafka_mirror.audit.translation import SyncKey

KEYS = ["topic", "partition", "offset"]
KINDS = ("missing", "altered", "duplicates", "expired_on_target")
# The other kinds of a group: a source record that is fine, or skipped as a cycle by design; a
# copy whose source record was not read (before or after the window); a copy an offset sync names.
PRESENT, CYCLE, COPY, SYNCED = "present", "cycle", "copy", "synced"
Counts = dict[tuple[str, int], tuple[int, int]]  # per source partition: records, cycle skips


def _sql_string(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def per_partition(values: Mapping[tuple[str, int], Mapping[str, int]]) -> Column:
    """The figures of each row's source partition (its `topic` and `partition`), a struct of
    `values`' fields (null for a partition not in it): a literal map topic → partition →
    struct, written as one SQL expression, so that the driver sends it in one call however many
    partitions there are."""
    by_topic: dict[str, list[str]] = {}
    for (topic, partition), fields in sorted(values.items()):
        struct = ", ".join(f"{_sql_string(name)}, {value}L" for name, value in fields.items())
        by_topic.setdefault(topic, []).append(f"{partition}, named_struct({struct})")
    maps = ", ".join(f"{_sql_string(t)}, map({', '.join(p)})" for t, p in by_topic.items())
    return F.expr(f"map({maps})")[F.col("topic")][F.col("partition")]


def is_named(copies: Iterable[SyncKey]) -> Column:
    """Whether a copy (its `remote`, `target_partition`, `target_offset`) is one of `copies`:
    per remote partition, its offset in a literal set of numbers (which Spark hashes)."""
    offsets: dict[tuple[str, int], list[str]] = {}
    for remote, partition, offset in sorted(copies):
        offsets.setdefault((remote, partition), []).append(f"{offset}L")
    cases = " ".join(
        f"WHEN remote = {_sql_string(r)} AND target_partition = {p} "
        f"THEN target_offset IN ({', '.join(listed)})"
        for (r, p), listed in offsets.items()
    )
    return F.expr(f"CASE {cases} ELSE false END")


@dataclass
class Comparison:
    """A run's figures of the source records and their copies."""

    findings: dict[tuple[str, int], PartitionFinding] = field(default_factory=dict)
    counts: Counts = field(default_factory=dict)
    # Per source partition, the first copy (target offset) of a record at or after the
    # watermark it gets when no record of it fails: max(resume, end).
    first_after: dict[tuple[str, int], int] = field(default_factory=dict)
    # Per copy an offset sync names, the source offset it came from (absent: not there).
    synced: dict[SyncKey, int] = field(default_factory=dict)

    def finding(self, topic: str, partition: int) -> PartitionFinding:
        return self.findings.setdefault(
            (topic, partition), PartitionFinding(topic=topic, partition=partition)
        )


def compare(
    inputs: AuditInputs,
    source: DataFrame,
    target: DataFrame,
    verify_from: dict[tuple[str, int], int],
    named: list[SyncKey],
) -> Comparison:
    """Per source partition, what is wrong or unverifiable, the counts of its records in the
    window, the first copy after its watermark-to-be and the copies the offset syncs name."""
    bounds = per_partition(
        {
            (w.topic, w.partition): {
                "start": w.start,
                "resume": w.resume,
                "verify_from": verify_from[(w.topic, w.partition)],
                "mark": max(w.resume, w.end),
            }
            for w in inputs.windows
        }
    )
    # Where the target compacts, a copy with a newer copy of its key may have been removed.
    compacted = sorted({w.topic for w in inputs.windows if w.remote in inputs.compacted_remotes})
    records = source.select(
        *KEYS, F.col("hash").alias("source_hash"), "cycle", F.col("key").alias("source_key")
    )
    # A copy an offset sync names is counted among its record's copies and, exploded into a
    # second row (`named_*` set), is also a group of its own: so each such copy's source offset
    # comes out of the query, however many copies its record has.
    probe = (
        F.explode(
            F.when(is_named(named), F.array(F.lit(False), F.lit(True))).otherwise(
                F.array(F.lit(False))
            )
        )
        if named
        else F.lit(False)
    )
    copies = target.select(
        *KEYS, "current", "hash", "target_partition", "target_offset", probe.alias("probe")
    ).select(
        "*",
        F.when(F.col("probe"), F.col("target_partition")).alias("named_partition"),
        F.when(F.col("probe"), F.col("target_offset")).alias("named_offset"),
    )
    current = F.col("current")
    per_record = (
        records.unionByName(copies, allowMissingColumns=True)
        .groupBy(*KEYS, "named_partition", "named_offset")
        .agg(
            F.count("source_hash").alias("sourced"),
            F.max("source_hash").alias("source_hash"),
            F.max("cycle").alias("cycle"),
            F.count(F.when(current, 1)).alias("copies"),
            F.min(F.when(current, F.col("hash"))).alias("low"),
            F.max(F.when(current, F.col("hash"))).alias("high"),
            F.min(
                F.when(
                    current & (F.col("target_partition") == F.col("partition")),
                    F.col("target_offset"),  # (a bare name would be a string literal)
                )
            ).alias("first_copy"),
            # A binary aggregate makes Spark sort the groups: only where it is needed.
            *([F.max("source_key").alias("key")] if compacted else []),
        )
        .withColumn("bounds", bounds)
    )
    if compacted:  # else no newest copy to look up: a shuffle less
        newest = (
            target.where(F.col("current") & F.col("topic").isin(compacted))
            .groupBy("topic", "partition", "key")
            .agg(F.max("offset").alias("newest_copy"))
        )
        per_record = per_record.join(newest, ["topic", "partition", "key"], "left")
    else:
        per_record = per_record.withColumn("newest_copy", F.lit(None).cast("bigint"))
    offset, at = F.col("offset"), F.col("bounds")
    removed_on_target = (offset < at["verify_from"]) | (
        F.coalesce(F.col("newest_copy"), F.lit(-1)) > offset
    )
    copied = F.col("copies")
    kind = (
        F.when(F.col("named_offset").isNotNull(), SYNCED)
        .when(F.col("sourced") == 0, COPY)
        .when(F.col("cycle"), CYCLE)
        .when((copied == 0) & removed_on_target, KINDS[3])
        .when(copied == 0, KINDS[0])
        .when(
            (F.col("low") != F.col("source_hash")) | (F.col("high") != F.col("source_hash")),
            KINDS[1],
        )
        .when(copied > 1, KINDS[2])
        .otherwise(PRESENT)
    )
    found = F.col("kind").isin(*KINDS)
    rows = (
        per_record.select("*", kind.alias("kind"))
        .groupBy("topic", "partition", "kind")
        .agg(
            F.count("*").alias("n"),
            F.sum("copies").alias("copies"),
            F.slice(F.sort_array(F.collect_list(F.when(found, offset))), 1, EXAMPLES).alias(
                "examples"
            ),
            # Copies of records that left the source since the last verified one.
            F.sum(F.when((offset < at["start"]) & (offset >= at["resume"]), copied)).alias(
                "expired_on_source"
            ),
            F.min(F.when(offset >= at["mark"], F.col("first_copy"))).alias("first_after"),
            F.collect_list(
                F.when(F.col("kind") == SYNCED, F.struct("named_partition", "named_offset", offset))
            ).alias("synced"),
        )
        .collect()
    )
    return _tally(inputs.windows, rows)


def _tally(windows: list[PartitionWindow], rows: list[Row]) -> Comparison:
    """The query's rows (one per source partition and kind) as the run's figures."""
    result = Comparison()
    remote_of = {w.topic: w.remote for w in windows}
    records: dict[tuple[str, int], int] = {}
    cycles: dict[tuple[str, int], int] = {}
    for row in rows:
        key, n, kind = (row["topic"], row["partition"]), int(row["n"]), row["kind"]
        if kind == SYNCED:
            for copy in row["synced"]:
                at = (remote_of[key[0]], int(copy["named_partition"]), int(copy["named_offset"]))
                result.synced[at] = int(copy["offset"])
            continue
        if kind == COPY:
            if row["expired_on_source"]:
                result.finding(*key).expired_on_source = int(row["expired_on_source"])
            if row["first_after"] is not None:
                result.first_after[key] = int(row["first_after"])
            continue
        if kind == CYCLE:
            cycles[key] = n
            result.finding(*key).skipped_cycles = n
            continue
        records[key] = records.get(key, 0) + n
        examples = list(row["examples"])
        if kind == "missing":
            result.finding(*key).missing, result.finding(*key).missing_offsets = n, examples
        elif kind == "altered":
            result.finding(*key).altered, result.finding(*key).altered_offsets = n, examples
        elif kind == "duplicates":
            extra = int(row["copies"]) - n  # the copies beyond one per record
            result.finding(*key).duplicates, result.finding(*key).duplicated_offsets = (
                extra,
                examples,
            )
        elif kind == KINDS[3]:
            result.finding(*key).expired_on_target = n
    result.counts = {
        key: (records.get(key, 0), cycles.get(key, 0)) for key in records.keys() | cycles
    }
    return result
