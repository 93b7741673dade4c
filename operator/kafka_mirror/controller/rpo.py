"""The RPO of an operation: what the source held that the target does not.

From the status alone, it is each topic's lag when the source was last read (`sourceLastSeen`):
an estimate when the source is cut while the workers copy, since they go on copying after that
read, and the source goes on taking records. Checked on the target once the workers have
stopped, it is a bound: per topic, the source's end offsets when last read (summed), less how far
the copies on the target reach (one past their last original offset, per partition, summed).
That counts the records the source held at `sourceLastSeen` that the target lacks, less the
copies of records the source took after it (copies are a prefix of each partition: at least
once, in order); so the loss is at least this and at most this plus what the source took after
`sourceLastSeen`. Offsets count records, as lag does (compaction and transaction markers leave
offsets without records).
"""

from __future__ import annotations

from typing import Any

from kafka_mirror.api.operations import Rpo, TopicRpo
from kafka_mirror.api.status import KafkaMirrorStatus
from kafka_mirror.kafka.reverse import copied_ends


def rpo_of(status: KafkaMirrorStatus) -> Rpo:
    """What was not mirrored when the source was last read, from the status's own figures."""
    listed = [
        TopicRpo(name=t.name, records=t.lag, seconds=t.latency_seconds if t.lag else 0.0)
        for t in status.topics
    ]
    seconds = [t.seconds for t in listed if t.records and t.seconds is not None]
    return Rpo(
        source_last_seen=status.source_last_seen,
        total_records=status.total_lag,
        max_seconds=max(seconds) if seconds else (0.0 if not status.total_lag else None),
        topics=[t for t in listed if t.records],
    )


def rpo_on_target(status: KafkaMirrorStatus, target: dict[str, Any], source_alias: str) -> Rpo:
    """The RPO checked against the copies on the target (the workers stopped)."""
    rpo = rpo_of(status)
    ends = {t.name: (t.remote_name, t.source_end) for t in status.topics}
    checked = status.total_lag == sum(t.lag for t in status.topics)  # no lag beyond the list
    for topic in rpo.topics:
        remote, source_end = ends[topic.name]
        copied = None if source_end is None else copied_ends(target, remote, source_alias)
        if source_end is None or copied is None:
            checked = False
            continue
        topic.records = max(0, source_end - copied)
        topic.seconds = topic.seconds if topic.records else 0.0
    unlisted = status.total_lag - sum(t.lag for t in status.topics)
    rpo.total_records = sum(t.records for t in rpo.topics) + unlisted
    seconds = [t.seconds for t in rpo.topics if t.records and t.seconds is not None]
    rpo.max_seconds = max(seconds) if seconds else (0.0 if not rpo.total_records else None)
    rpo.topics = [t for t in rpo.topics if t.records]
    rpo.lower_bound = checked
    return rpo
