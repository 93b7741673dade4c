"""The audit's verified watermarks: per source partition, the offset below which every record was
verified on the target, so the next run audits only what came after.

They are kept in a compacted internal topic on the target (`A.audit-watermarks.internal`,
beside `A.checkpoints.internal`), keyed by mirror, topic and partition: they outlive the audit's
pod and go with the target they describe. A watermark carries the source topic's ID (a topic
deleted and created again starts over) and the full-audit request in effect when it started
over (a new request starts every partition over).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient

from kafka_mirror.audit.report import PartitionFinding
from kafka_mirror.kafka.admin import ensure_internal_topic
from kafka_mirror.kafka.client import ClusterUnavailable
from kafka_mirror.kafka.tail import read_to_end

READ_TIMEOUT = 30.0


def watermarks_topic(source_alias: str) -> str:
    return f"{source_alias}.audit-watermarks.internal"


@dataclass(frozen=True)
class Watermark:
    topic: str
    partition: int
    topic_id: bytes | None  # the source topic's incarnation
    source_offset: int  # every record of the partition below it was verified
    target_offset: int  # every copy of a record at or after source_offset is at or after it
    records: int  # records verified below source_offset since the watermark started over
    full_request: str | None = None  # the full-audit request in effect when it started over
    # Per partition of the offset-sync topic, the offset below which every sync of this
    # partition was checked (None: read the topic from its start).
    offset_syncs_position: dict[int, int] | None = None

    def key(self, mirror: str) -> bytes:
        return json.dumps([mirror, self.topic, self.partition]).encode()

    def value(self) -> bytes:
        return json.dumps(
            {
                "topicId": self.topic_id.hex() if self.topic_id else None,
                "sourceOffset": self.source_offset,
                "targetOffset": self.target_offset,
                "records": self.records,
                "fullRequest": self.full_request,
                "offsetSyncsPosition": self.offset_syncs_position,
            }
        ).encode()

    @classmethod
    def decode(cls, key: bytes, value: bytes) -> tuple[str, Watermark]:
        """(mirror, watermark) from a record of the topic."""
        mirror, topic, partition = json.loads(key)
        fields = json.loads(value)
        topic_id = fields["topicId"]
        position = fields.get("offsetSyncsPosition")  # absent: written before it was kept
        return mirror, cls(
            topic,
            partition,
            bytes.fromhex(topic_id) if topic_id else None,
            fields["sourceOffset"],
            fields["targetOffset"],
            fields["records"],
            fields["fullRequest"],
            {int(p): offset for p, offset in position.items()} if position else None,
        )


def in_effect(
    previous: Watermark | None,
    topic_id: bytes | None,
    full_request: str | None,
    log_end: int,
    target_end: int,
) -> Watermark | None:
    """The watermark a run resumes from, or None to audit the partition from its log start: a
    full audit was requested since, or the topic was created again (another ID; or, on a
    cluster without IDs, a log shorter than the watermark), or the remote topic was (its log
    ends before the watermark's copies)."""
    if previous is None or previous.topic_id != topic_id or previous.full_request != full_request:
        return None
    if previous.source_offset > log_end or previous.target_offset > target_end:
        return None
    return previous


def verified_to(resume: int, end: int, finding: PartitionFinding | None, bad_sync: bool) -> int:
    """Where a partition's watermark goes after a run that audited it from `resume` to `end`: to
    the first record that failed (missing, altered, lost to retention), else to the end; not at
    all where an offset sync of it was wrong. Never backwards."""
    if bad_sync:
        return resume
    failed = [end]
    if finding is not None:
        failed += finding.missing_offsets[:1] + finding.altered_offsets[:1]
        failed += finding.lost_offsets[:1]
    return max(resume, min(failed))


def read_watermarks(settings: dict[str, str], source_alias: str, mirror: str) -> list[Watermark]:
    """The newest watermark of every partition of `mirror` (none before the first run)."""
    topic = watermarks_topic(source_alias)
    newest: dict[tuple[str, int], Watermark] = {}
    for key, value in read_to_end(settings, topic, timeout=READ_TIMEOUT):
        owner, watermark = Watermark.decode(key, value)
        if owner == mirror:
            newest[(watermark.topic, watermark.partition)] = watermark
    return list(newest.values())


def write_watermarks(
    settings: dict[str, str], source_alias: str, mirror: str, watermarks: Iterable[Watermark]
) -> None:
    topic = watermarks_topic(source_alias)
    client: dict[str, Any] = dict(settings)
    ensure_internal_topic(AdminClient(client), topic)
    # Not idempotent: a run writes each key once and flushes before it ends, so a retry can
    # neither reorder nor duplicate anything that matters; and an idempotent producer's start
    # (its producer ID) held every flush here for 0.5 s.
    producer = Producer(client)
    for watermark in watermarks:
        producer.produce(topic, watermark.value(), watermark.key(mirror))
    if producer.flush(READ_TIMEOUT):
        raise ClusterUnavailable("KafkaError", f"watermarks not written to {topic} in time")
