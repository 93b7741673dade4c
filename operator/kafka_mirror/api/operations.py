"""The disaster-recovery operations of a mirror: what a user asks (`spec.operation`) and what the
operator did (`status.operation`). docs/runbook-dr.md says why this is a field of KafkaMirror."""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import ConfigDict, Field, model_validator

from kafka_mirror.api.base import VALIDATIONS, ApiModel, StatusModel, cel

OperationType = Literal["Promote", "Failover", "Return"]
Phase = Literal[
    "Fencing",
    "CatchingUp",
    "StoppingWorkers",
    "CommittingOffsets",
    "ResumingMirror",
    "Completed",
    "Failed",
]
MIRROR_NAME = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"
MirrorName = Annotated[str, Field(min_length=1, max_length=253, pattern=MIRROR_NAME)]
RESUME_RULE = "has(self.resume) == (self.type == 'Return')"
RESUME_MESSAGE = "resume names the mirror to start again: required for Return, only for Return"
FENCE_RULE = "!has(self.fence) || self.type == 'Promote'"
FENCE_MESSAGE = "fence is for Promote only (a failover's source is lost; a Return lifts the fence)"


IDENTITY_RETURN_RULE = (
    "!has(self.operation) || self.operation.type != 'Return' || "
    "!has(self.topicNaming) || self.topicNaming.policy != 'identity'"
)
# Under identity naming a group's position in `t` on B counts B's own records and the copies
# of A's in one sequence: no offset on A follows from it without skipping or re-reading blindly.
IDENTITY_RETURN_MESSAGE = (
    "a Return cannot translate positions under identity naming (t on B holds B's own records "
    "and A's copies in one sequence): Promote this mirror, set the groups' offsets on A by hand "
    "(kafka-consumer-groups --reset-offsets), then remove the forward mirror's operation"
)


class MirrorOperation(ApiModel):
    """A requested operation. The operator runs each id once."""

    model_config = ConfigDict(
        json_schema_extra={
            VALIDATIONS: [
                *cel(RESUME_RULE, RESUME_MESSAGE)[VALIDATIONS],
                *cel(FENCE_RULE, FENCE_MESSAGE)[VALIDATIONS],
            ]
        }
    )

    type: OperationType = Field(
        description="`Promote`: planned, the source is healthy: mirror to lag 0, write the "
        "final checkpoints, commit the groups' translated offsets on the target, stop. "
        "`Failover`: the source is lost: stop, commit the offsets of the checkpoints already "
        "on the target, report the data not mirrored (RPO). "
        "`Return` (on the reverse mirror B→A, to end a fail back): a promote, then start the "
        "mirror A→B named by `resume` again, which its own promote or failover had stopped."
    )
    id: Annotated[
        str, Field(min_length=1, max_length=63, pattern=r"^[A-Za-z0-9][-._A-Za-z0-9]*$")
    ] = Field(
        description="Names this request; a new id asks for a new run, the same id never "
        "runs twice (so GitOps syncs and operator restarts repeat nothing)."
    )
    resume: MirrorName | None = Field(
        default=None,
        description="`Return` only: the KafkaMirror, in this namespace, to start again; it "
        "must mirror the opposite way (its source is this mirror's target).",
    )
    fence: bool | None = Field(
        default=None,
        description="`Promote` only: before the final drain, deny WRITE on the selected topics "
        "on the source to every principal, check that their ends stop moving, and keep the "
        "deny until the reverse mirror's Return; if anything is written past it, lift it and "
        "fail (docs/runbook-dr.md). Default: on when `spec.reverse` names the way back (a "
        "switchover) and the naming policy is not identity.",
    )

    @model_validator(mode="after")
    def _resume_only_for_return(self) -> MirrorOperation:
        if (self.resume is not None) != (self.type == "Return"):
            raise ValueError(RESUME_MESSAGE)
        if self.fence is not None and self.type != "Promote":
            raise ValueError(FENCE_MESSAGE)
        return self


class TopicRpo(StatusModel):
    """Data of one topic that was not on the target when mirroring stopped."""

    name: str
    records: int
    seconds: float | None = None


class Rpo(StatusModel):
    """What the operation lost: records on the source not mirrored, and their age."""

    source_last_seen: datetime | None = None
    total_records: int = 0
    lower_bound: bool = Field(
        default=False,
        description="True: `totalRecords` counts the records the source held when last read "
        "(`sourceLastSeen`) that the target does not hold, checked on the target; the source may "
        "have taken more after that moment, which only it knows, so the loss is at least this "
        "and at most this plus what it took after `sourceLastSeen`. False: some lagging topic "
        "could not be checked, and its lag when last read is counted.",
    )
    max_seconds: float | None = None
    topics: list[TopicRpo] = Field(default_factory=list)


class CommittedOffset(StatusModel):
    group: str
    topic: str
    partition: int
    offset: int


class ResumedBy(StatusModel):
    """The `Return` of a reverse mirror that started this mirror again after its operation."""

    mirror: str
    id: str
    at: datetime | None = None


class CatchUpProgress(StatusModel):
    """How the catch-up of a promote or a return goes: the records still to mirror when the
    status was last refreshed, and the pace since the refresh before."""

    records_left: int
    at: datetime
    records_per_second: float | None = None
    estimated_seconds: float | None = Field(
        default=None, description="At the pace since the refresh before, until lag 0."
    )


class MovedGrant(StatusModel):
    """A binding on the target's local topic, for an application's principal."""

    topic: str
    principal: str
    host: str = "*"
    operation: str = "WRITE"
    permission: str = "ALLOW"


class MovedRights(StatusModel):
    """Promote and Failover with `aclSync.moveApplications`: the rights the operation granted
    on the target's local topics, as the last sync round listed the source's
    (docs/runbook-dr.md)."""

    count: int = 0
    grants: list[MovedGrant] = Field(default_factory=list)
    message: str = ""
    returned_at: datetime | None = Field(
        default=None,
        description="When the grants were removed again, once the reverse mirror's Return had "
        "started this mirror again (the applications use the source again).",
    )


class SourceFence(StatusModel):
    """A promote's fence on the source (docs/runbook-dr.md): the topics whose WRITE it denies to
    every principal, and the ends it checks stand still."""

    topics: list[str] = Field(
        default_factory=list,
        description="The topics on whose literal name the operation created `DENY WRITE` for "
        "`User:*` (a deny that was there before is not listed and stays its maker's); the "
        "bindings a lift deletes.",
    )
    authorizer: bool = Field(
        default=True,
        description="False: the source has no authorizer, so nothing is denied; the ends were "
        "only checked to stand still.",
    )
    placed_at: datetime | None = None
    checked_from: datetime | None = Field(
        default=None, description="When the ends it checks stand still were read."
    )
    ends: dict[str, list[int]] = Field(
        default_factory=dict, description="Each fenced topic's end offsets by partition."
    )
    holds_since: datetime | None = Field(
        default=None, description="When the check passed: the final drain started."
    )
    widenings: int = Field(
        default=0,
        description="How often topics selected since it was placed widened it (its check "
        "started again); past a few the operation fails.",
    )
    lifted_at: datetime | None = None
    owner_id: str | None = Field(
        default=None,
        description="The id of the Promote that placed it (a Failover asked after it carries "
        "it on, to be lifted by the Return).",
    )
    message: str = ""


class OperationStatus(StatusModel):
    """What the operator did for `spec.operation`, step by step."""

    id: str
    type: OperationType
    phase: Phase
    message: str = ""
    started_at: datetime | None = None
    completed_at: datetime | None = None
    catch_up: CatchUpProgress | None = None
    rpo: Rpo | None = None
    source_back: Rpo | None = Field(
        default=None,
        description="Failover only, once the source can be read again: what it holds that the "
        "target never had (the RPO, exact now, and what it took after it was last read), per "
        "topic; the records a Return brings over when it starts this mirror again.",
    )
    committed: list[CommittedOffset] = Field(default_factory=list)
    committed_count: int = 0
    skipped_groups: list[str] = Field(
        default_factory=list,
        description="Groups that got none or not all of their offsets: members on the target "
        "(their own commits win), or the target refused the commit; none of their offsets is "
        "listed under `committed`, and the CLI exits non-zero naming them.",
    )
    skipped_reasons: dict[str, str] = Field(
        default_factory=dict, description="Why, for each of the first 100 `skippedGroups`."
    )
    resumed_by: ResumedBy | None = None
    moved_rights: MovedRights | None = None
    fence: SourceFence | None = None
    reverse_uid: str | None = Field(
        default=None,
        description="Promote and Failover: the uid of `spec.reverse`, the only mirror whose "
        "Return may start this one again after this operation.",
    )


def record_of(
    requested: MirrorOperation | None, record: OperationStatus | None
) -> OperationStatus | None:
    """The status record of the requested operation, once it has one (an older id's is not)."""
    if requested is None or record is None or record.id != requested.id:
        return None
    return record
