"""The disaster-recovery operations of a mirror: what a user asks (`spec.operation`) and what the
operator did (`status.operation`). docs/runbook-dr.md says why this is a field of KafkaMirror."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import Field

from kafka_mirror.api.base import ApiModel, StatusModel

OperationType = Literal["Promote", "Failover"]
Phase = Literal["CatchingUp", "StoppingWorkers", "CommittingOffsets", "Completed"]


class MirrorOperation(ApiModel):
    """A requested operation. The operator runs each id once."""

    type: OperationType = Field(
        description="`Promote`: planned, the source is healthy: mirror to lag 0, write the "
        "final checkpoints, commit the groups' translated offsets on the target, stop. "
        "`Failover`: the source is lost: stop, commit the offsets of the checkpoints already "
        "on the target, report the data not mirrored (RPO)."
    )
    id: Annotated[
        str, Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9][-._A-Za-z0-9]*$")
    ] = Field(
        description="Names this request; a new id asks for a new run, the same id never "
        "runs twice (so GitOps syncs and operator restarts repeat nothing)."
    )


class TopicRpo(StatusModel):
    """Data of one topic that was not on the target when mirroring stopped."""

    name: str
    records: int
    seconds: float | None = None


class Rpo(StatusModel):
    """What the operation lost: records on the source not mirrored, and their age."""

    source_last_seen: datetime | None = None
    total_records: int = 0
    max_seconds: float | None = None
    topics: list[TopicRpo] = Field(default_factory=list)


class CommittedOffset(StatusModel):
    group: str
    topic: str
    partition: int
    offset: int


class OperationStatus(StatusModel):
    """What the operator did for `spec.operation`, step by step."""

    id: str
    type: OperationType
    phase: Phase
    message: str = ""
    started_at: datetime | None = None
    completed_at: datetime | None = None
    rpo: Rpo | None = None
    committed: list[CommittedOffset] = Field(default_factory=list)
    committed_count: int = 0
    skipped_groups: list[str] = Field(default_factory=list)
