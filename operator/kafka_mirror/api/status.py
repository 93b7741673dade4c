"""The status of the API's resources: what the operator observed and reports."""

from __future__ import annotations

from datetime import datetime
from typing import Literal

from pydantic import Field

from kafka_mirror.api.autoscaling import AutoscalingStatus
from kafka_mirror.api.base import StatusModel
from kafka_mirror.api.operations import OperationStatus


class Condition(StatusModel):
    """A standard Kubernetes condition (kstatus-compatible)."""

    type: str
    status: Literal["True", "False", "Unknown"]
    reason: str = ""
    message: str = ""
    last_transition_time: datetime | None = None
    observed_generation: int | None = None


class TopicStatus(StatusModel):
    """Mirroring figures of one topic."""

    name: str
    remote_name: str
    lag: int = 0
    latency_seconds: float | None = None
    source_end: int | None = Field(
        default=None,
        description="The source partitions' end offsets, summed, when last read: what a "
        "failover's RPO counts the copies on the target against.",
    )
    lost_to_retention: int = Field(
        default=0,
        description="Records that left the source (retention, DeleteRecords) before they were "
        "mirrored: they are on neither cluster. Counted as offsets: exact on a topic without "
        "transactions or compaction, else at most this many records.",
    )


class SkippedTopic(StatusModel):
    """A selected topic that is not mirrored, and why."""

    name: str
    reason: str


class AuditResult(StatusModel):
    """Summary of the last audit run."""

    time: datetime | None = None
    result: Literal["Passed", "Failed", "Error"] | None = None
    records_checked: int = Field(
        default=0, description="Records this run compared (from the last verified watermark)."
    )
    records_verified: int = Field(
        default=0,
        description="Records verified in all: this run's and the earlier runs' since each "
        "partition's watermark started over (a new topic, or a full audit).",
    )
    missing: int = 0
    altered: int = Field(
        default=0, description="Source records whose copy differs (key, value, headers, time)."
    )
    lost_to_retention: int = Field(
        default=0,
        description="Records that left the source before they were mirrored (offsets: exact "
        "without transactions or compaction, else at most this many).",
    )
    unverifiable: int = Field(
        default=0,
        description="Records one side no longer holds (expired on the source after they were "
        "mirrored, or on the target), so the audit cannot compare them.",
    )
    duplicates: int = 0
    unsafe_checkpoints: int = 0
    max_reread_distance: int = 0
    message: str = ""


class KafkaMirrorStatus(StatusModel):
    """What the operator observed. Per-topic lists are bounded; totals cover every topic."""

    observed_generation: int | None = None
    conditions: list[Condition] = Field(default_factory=list)
    replicas: int = 0
    ready_replicas: int = 0
    label_selector: str = ""
    active_topic_count: int = 0
    active_topics: list[str] = Field(default_factory=list)
    topics: list[TopicStatus] = Field(default_factory=list)
    skipped_topics: list[SkippedTopic] = Field(default_factory=list)
    partition_problems: list[str] = Field(
        default_factory=list,
        description="Partitions that do not flow, as the workers committed them: stopped at a "
        "record the target cannot take (topic, partition, offset, why), or stalled (no "
        "acknowledgement from the target for a minute). First 20.",
    )
    total_lag: int = 0
    total_lost_to_retention: int = 0
    max_latency_seconds: float | None = None
    last_audit: AuditResult | None = None
    source_last_seen: datetime | None = Field(
        default=None, description="When the source was last read: the figures above are from then."
    )
    acls_synced: int | None = Field(
        default=None,
        description="The topic and group bindings the workers' ACL sync holds on the target "
        "(`spec.aclSync`, as recorded in kafka-mirror-acls.internal there, read every 30 s); "
        "unset while it holds none. A sync the clusters refuse shows in the workers' metric "
        "kafka_mirror_acl_sync_refused and the KafkaMirrorAclSyncRefused alert.",
    )
    operation: OperationStatus | None = None
    autoscaling: AutoscalingStatus | None = None


class MirrorTopicSelectionStatus(StatusModel):
    """Topics a selection matches now, and problems with it."""

    observed_generation: int | None = None
    conditions: list[Condition] = Field(default_factory=list)
    matched_topic_count: int = 0
    matched_topics: list[str] = Field(default_factory=list)
    invalid_patterns: list[str] = Field(default_factory=list)
