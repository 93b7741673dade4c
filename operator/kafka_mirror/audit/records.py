"""The records the audit compares, read with Spark's Kafka source: the source records of the
window, and every copy on the target with the source record its provenance header names.

Each side carries a hash of the record's content (key, value, headers, timestamp); a copy's
headers are hashed without the provenance header the mirror appended (always the last one), so
an exact copy hashes as its source record. The source is read committed, as the workers read
it: records of aborted transactions were never meant to be mirrored.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F

from kafka_mirror.audit.watermarks import Watermark
from kafka_mirror.kafka.formats import (
    PROVENANCE_FIELDS_BYTES,
    PROVENANCE_HEADER,
    TOPIC_ID_BYTES,
    RetentionLoss,
)
from kafka_mirror.kafka.schemas import Equivalents
from kafka_mirror.kafka.wire_format import HEADER_BYTES, MAGIC_BYTE


@dataclass(frozen=True)
class PartitionWindow:
    """One source partition: offsets [start, end) must all be on the target (end is where the
    workers committed); the remote partition holds offsets [target_start, target_end). With a
    previous run's watermark, only the offsets from it on are audited."""

    topic: str
    remote: str
    partition: int
    start: int
    end: int
    target_start: int = 0
    target_end: int = 0
    loss: RetentionLoss | None = None  # left the source before it was mirrored
    previous: Watermark | None = None
    on_target: bool = True  # the remote partition exists

    @property
    def resume(self) -> int:
        """Every record below it was verified by an earlier run (0: none was)."""
        return self.previous.source_offset if self.previous else 0

    @property
    def target_resume(self) -> int:
        """Every copy of a record from `resume` on is at or after it on the remote partition."""
        return self.previous.target_offset if self.previous else 0

    @property
    def trimmed(self) -> bool:
        """The target's retention removed copies from where this run reads the remote
        partition."""
        return self.on_target and self.target_start > self.target_resume

    @property
    def audit_from(self) -> int:
        return max(self.start, self.resume)


@dataclass(frozen=True)
class AuditInputs:
    mirror: str
    source_alias: str
    target_alias: str
    source_options: dict[str, str]  # Spark's Kafka source (the records compared)
    target_options: dict[str, str]
    source_client: dict[str, str]  # confluent-kafka (the small internal topics)
    target_client: dict[str, str]
    windows: list[PartitionWindow]
    offset_syncs_on_source: bool
    source_ids: dict[str, bytes | None] | None = None  # topic → its ID (its incarnation)
    # Identity naming only: remote topic → its ID; source records that are copies of its
    # records were skipped as cycles by the workers.
    cycle_ids: dict[str, bytes | None] | None = None
    # Remote topics the target compacts: a copy superseded there by a newer one of its key
    # may be gone while the source still holds its record.
    compacted_remotes: set[str] = field(default_factory=set)
    # The offset-sync topic's end per partition, read before the target's log ends: a sync
    # below it names a copy at or before them, so this run judges it.
    offset_syncs_end: dict[int, int] = field(default_factory=dict)
    # Exactly-once delivery: a duplicate is a failure, not a re-send.
    exactly_once: bool = False
    # spec.schemaRegistry: the target's id for each schema the wire-format topics' records may
    # name; a value (and key) of them is compared as its copy must be, with that id in place.
    schema_ids: Equivalents | None = None
    wire_keys: bool = False


def read_kafka(spark: SparkSession, options: dict[str, str], **extra: str) -> DataFrame:
    # Offsets that left a log between planning and reading are not an error: those records
    # are simply not compared.
    reader = (
        spark.read.format("kafka")
        .options(**options)
        .option("failOnDataLoss", "false")
        # A task stops at its range's end; a fetch there (where the range ends at the log's
        # end) would otherwise wait the broker's 500 ms for records that are not coming.
        .option("kafka.fetch.max.wait.ms", "10")
    )
    for key, value in extra.items():
        reader = reader.option(key, value)
    return reader.load()


def _offsets_json(
    windows: list[PartitionWindow], pick: Callable[[PartitionWindow], int], remote: bool = False
) -> str:
    """Spark's per-partition offsets, of the source topics (or of their remote topics)."""
    by_topic: dict[str, dict[str, int]] = {}
    for w in windows:
        by_topic.setdefault(w.remote if remote else w.topic, {})[str(w.partition)] = pick(w)
    return json.dumps(by_topic)


def content_hash(headers: Column, key: Column | None = None, value: Column | None = None) -> Column:
    """Key, value (told apart from null), the headers given and the timestamp."""
    key = F.col("key") if key is None else key
    value = F.col("value") if value is None else value
    return F.xxhash64(key.isNull(), key, value.isNull(), value, headers, F.col("timestamp"))


def _id_map(ids: dict[int, int]) -> Column:
    """A literal map<bigint, bigint>: ids of 32 bits compare with a header's as read."""
    pairs = [F.lit(n).cast("bigint") for pair in sorted(ids.items()) for n in pair]
    return F.create_map(*pairs) if pairs else F.create_map().cast("map<bigint,bigint>")


def with_target_ids(data: Column, ids: Equivalents) -> Column:
    """`data` of a record of a wire-format topic whose id the map has (its topic's own
    subjects', else the listed subjects'), as the workers copy it: the target's id in place of
    the source's (`kafka.wire_format`). Anything else as it is."""
    topics = sorted(ids.own)
    if not topics or not (ids.listed or any(ids.own.values())):
        return data
    by_topic = F.create_map(*[part for t in topics for part in (F.lit(t), _id_map(ids.own[t]))])
    source_id = F.conv(F.hex(F.substring(data, 2, 4)), 16, 10).cast("bigint")
    target_id = F.coalesce(by_topic[F.col("topic")][source_id], _id_map(ids.listed)[source_id])
    framed = (
        F.col("topic").isin(topics)
        & (F.length(data) >= HEADER_BYTES)
        & (F.substring(data, 1, 1) == F.lit(bytes((MAGIC_BYTE,))))
        & target_id.isNotNull()
    )
    rewritten = F.concat(
        F.substring(data, 1, 1),
        F.unhex(F.lpad(F.hex(target_id), 8, "0")),
        F.substring(data, HEADER_BYTES + 1, 2**31 - 1),  # the rest, however long
    )
    return F.when(F.coalesce(framed, F.lit(False)), rewritten).otherwise(data)


def _by_name(values: dict[str, bytes | None]) -> Column:
    """A map literal name → ID (binary, null for none)."""
    pairs = [
        part
        for name, value in sorted(values.items())
        for part in (F.lit(name), F.lit(value).cast("binary"))
    ]
    return F.create_map(*pairs) if pairs else F.create_map().cast("map<string,binary>")


def _names(alias: str, ids: Column) -> Callable[[Column], Column]:
    """Whether a header is a provenance header naming cluster `alias` and the topic whose ID
    `ids` holds (any, for a header written without one or a topic with none): the workers'
    cycle test (`formats.is_copy_from`)."""
    named = alias.encode()
    field = len(named).to_bytes(2, "big") + named
    bare = len(field) + PROVENANCE_FIELDS_BYTES
    with_id = bare + TOPIC_ID_BYTES

    def test(h: Column) -> Column:
        value = h["value"]
        ends = F.substring(value, bare + 1, TOPIC_ID_BYTES)
        return (
            (h["key"] == PROVENANCE_HEADER)
            & (F.substring(value, 1, len(field)) == F.lit(field))
            & (
                (F.length(value) == bare)
                | ((F.length(value) == with_id) & (ids.isNull() | (ends == ids)))
            )
        )

    return test


def source_records(spark: SparkSession, inputs: AuditInputs) -> DataFrame:
    """topic, partition, offset, hash and (identity naming) whether the workers skipped it as a
    cycle, of every committed source record in the windows."""
    windows = [w for w in inputs.windows if w.end > w.audit_from]
    assignment: dict[str, list[int]] = {}
    for w in windows:
        assignment.setdefault(w.topic, []).append(w.partition)
    raw = read_kafka(
        spark,
        inputs.source_options,
        assign=json.dumps(assignment),
        startingOffsets=_offsets_json(windows, lambda w: w.audit_from),
        endingOffsets=_offsets_json(windows, lambda w: w.end),
        includeHeaders="true",
        **{"kafka.isolation.level": "read_committed"},
    )
    cycle = F.lit(False)
    if inputs.cycle_ids is not None:
        remote_of = {w.topic: inputs.cycle_ids.get(w.remote) for w in windows}
        test = _names(inputs.target_alias, _by_name(remote_of)[F.col("topic")])
        cycle = F.coalesce(F.exists("headers", test), F.lit(False))
    key, value = F.col("key"), F.col("value")
    if inputs.schema_ids is not None:
        value = with_target_ids(value, inputs.schema_ids)
        if inputs.wire_keys:
            key = with_target_ids(key, inputs.schema_ids)
    return raw.select(
        "topic",
        "partition",
        "offset",
        key.alias("key"),
        content_hash(F.col("headers"), key, value).alias("hash"),
        cycle.alias("cycle"),
    )


def _target_range(windows: list[PartitionWindow]) -> dict[str, str]:
    """Every remote topic from its start, or (where a watermark says where the copies of the
    records after it begin) each remote partition from there."""
    present = [w for w in windows if w.on_target]
    if not any(w.previous for w in present):
        return {
            "subscribe": ",".join(sorted({w.remote for w in windows})),
            "startingOffsets": "earliest",
        }
    assignment: dict[str, list[int]] = {}
    for w in present:
        assignment.setdefault(w.remote, []).append(w.partition)
    return {
        "assign": json.dumps(assignment),
        "startingOffsets": _offsets_json(
            present, lambda w: max(w.target_start, w.target_resume), remote=True
        ),
    }


def target_records(spark: SparkSession, inputs: AuditInputs) -> DataFrame:
    """Every copy on the remote topics of a record of the source cluster: where it is, the
    source record it names (topic, partition, offset, topic ID) and its content's hash."""
    source_of = {w.remote: w.topic for w in inputs.windows}
    to_source = F.create_map(*[F.lit(name) for pair in source_of.items() for name in pair])
    raw = read_kafka(
        spark,
        inputs.target_options,
        endingOffsets="latest",
        includeHeaders="true",
        # What the target's applications read: never an aborted (exactly-once) copy, up to
        # the last stable offset, as the windows' ends were read.
        **{"kafka.isolation.level": "read_committed"},
        **_target_range(inputs.windows),
    )
    # The newest provenance header is this hop's: STRING alias, INT32 partition, INT64 offset,
    # then (from workers that write it) the source topic's 16-byte ID.
    header = F.try_element_at(
        F.filter("headers", lambda h: h["key"] == PROVENANCE_HEADER), F.lit(-1)
    ).getField("value")
    alias_length = F.conv(F.hex(F.substring(header, 1, 2)), 16, 10).cast("int")
    own_headers = F.slice("headers", 1, F.size("headers") - 1)  # without this hop's header
    ids = _by_name(inputs.source_ids or {})
    return (
        raw.select(
            F.col("topic").alias("remote"),
            F.col("partition").alias("target_partition"),
            F.col("offset").alias("target_offset"),
            "key",
            "value",
            "headers",
            "timestamp",
            header.alias("h"),
            alias_length.alias("alias_length"),
        )
        .where(F.col("h").isNotNull())  # a record that has one has at least one header
        .select(
            "remote",
            "target_partition",
            "target_offset",
            "key",
            content_hash(own_headers).alias("hash"),
            to_source[F.col("remote")].alias("topic"),
            F.expr("cast(substring(h, 3, alias_length) as string)").alias("alias"),
            F.expr("cast(conv(hex(substring(h, 3 + alias_length, 4)), 16, 10) as int)").alias(
                "partition"
            ),
            F.expr("cast(conv(hex(substring(h, 7 + alias_length, 8)), 16, 10) as bigint)").alias(
                "offset"
            ),
            F.expr(
                f"if(length(h) = alias_length + {2 + PROVENANCE_FIELDS_BYTES + TOPIC_ID_BYTES}, "
                f"substring(h, alias_length + {3 + PROVENANCE_FIELDS_BYTES}, {TOPIC_ID_BYTES}), "
                "null)"
            ).alias("topic_id"),
        )
        .where(F.col("alias") == inputs.source_alias)
        .withColumn(
            # A copy of the topic's current incarnation; a header without an ID (an older
            # worker) or a cluster without topic IDs cannot tell, and counts as one.
            "current",
            F.col("topic_id").isNull()
            | ids[F.col("topic")].isNull()
            | (F.col("topic_id") == ids[F.col("topic")]),
        )
    )
