"""The custom resources' API: spec and status models for KafkaMirror and MirrorTopicSelection.

These pydantic models are the single source of truth: the operator parses objects with them,
and `kafka_mirror.api.crdgen` renders the CRDs in `crds/` from them. Field names are snake_case
in Python and camelCase on the wire. Rules the API server can check (enums, patterns, bounds,
CEL rules) go in the schema so bad objects are refused at `kubectl apply`; rules it cannot
(regular-expression syntax) are checked here and reported in a status condition.
"""

from __future__ import annotations

from dataclasses import dataclass
from fnmatch import fnmatchcase
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from kafka_mirror.api.autoscaling import Autoscaling
from kafka_mirror.api.base import VALIDATIONS, ApiModel, cel, section
from kafka_mirror.api.clusters import KafkaCluster
from kafka_mirror.api.operations import (
    IDENTITY_RETURN_MESSAGE,
    IDENTITY_RETURN_RULE,
    MirrorName,
    MirrorOperation,
)
from kafka_mirror.api.schema_registry import SchemaRegistrySync
from kafka_mirror.api.status import KafkaMirrorStatus, MirrorTopicSelectionStatus
from kafka_mirror.api.workloads import AuditSettings, WorkerPod
from kafka_mirror.patterns import validate_patterns

GROUP = "kafkamirror.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"
ApiVersion = Literal["kafkamirror.io/v1alpha1"]

# Kafka's own limit on topic names (Topic.MAX_NAME_LENGTH).
MAX_TOPIC_NAME_LENGTH = 249
MAX_PATTERNS = 256
MAX_PATTERN_LENGTH = 1024

DNS_LABEL = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$"
DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$"


# --- mirroring behaviour ------------------------------------------------------------------

Delivery = Literal["atLeastOnce", "exactlyOnce"]


class TopicNaming(ApiModel):
    """How a source topic is named on the target."""

    policy: Literal["suffix", "prefix", "identity"] = Field(
        default="suffix",
        description=(
            "`suffix`: `t` on A becomes `t.A` (IBM Event Streams); `prefix`: `A.t` "
            "(MirrorMaker 2's DefaultReplicationPolicy); `identity`: `t` (cycles are then "
            "prevented by a provenance header)."
        ),
    )
    separator: Annotated[str, Field(min_length=1, max_length=8, pattern=r"^[._-]+$")] = Field(
        default=".", description="Between the topic name and the alias."
    )
    adopt: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=MAX_PATTERN_LENGTH)]],
        Field(max_length=MAX_PATTERNS),
    ] = Field(
        default_factory=list,
        description="`identity` only: target topics that exist though this mirror did not "
        "create them, which it may write into (whole-name RE2 patterns: an application's own "
        "`t` in an active/active pair, say). Any other existing topic is left untouched, "
        "with the reason in the workers' `kafka_mirror_skipped_topic` metric and log; Schema "
        "Registry's, Kafka Connect's and Kafka Streams' internal topics are never targets.",
    )

    @field_validator("adopt")
    @classmethod
    def _compile(cls, patterns: list[str]) -> list[str]:
        return validate_patterns(patterns)


class OffsetSyncs(ApiModel):
    """Offset syncs, in MirrorMaker 2's format and topic: `mm2-offset-syncs.<target>.internal`
    on the source, `mm2-offset-syncs.<source>.internal` on the target."""

    max_lag: Annotated[int, Field(ge=1, le=1_000_000)] = Field(
        default=100,
        description="Emit a sync at least every this many records "
        "(MirrorMaker 2's offset.lag.max).",
    )
    location: Literal["source", "target"] = Field(
        default="source",
        description="Cluster holding the offset-syncs topic (MirrorMaker 2's "
        "offset-syncs.topic.location).",
    )


# MirrorMaker 2's `groups.exclude` default: groups no application fails over with.
DEFAULT_GROUP_EXCLUDES = ("console-consumer-.*", "connect-.*", "__.*")


class GroupSelection(ApiModel):
    """Consumer groups whose offsets are checkpointed, as whole-name regular expressions."""

    includes: Annotated[
        list[Annotated[str, Field(max_length=MAX_PATTERN_LENGTH)]], Field(max_length=MAX_PATTERNS)
    ] = Field(default_factory=lambda: [".*"], description="Groups matching any of these.")
    excludes: Annotated[
        list[Annotated[str, Field(max_length=MAX_PATTERN_LENGTH)]], Field(max_length=MAX_PATTERNS)
    ] = Field(
        default_factory=lambda: list(DEFAULT_GROUP_EXCLUDES),
        description="...and none of these. By default MirrorMaker 2's: console consumers, "
        "Kafka Connect's workers and internal groups. Every mirror's own workers' groups "
        "(`kafka-mirror.*`) are left out whatever this says.",
    )

    @field_validator("includes", "excludes")
    @classmethod
    def _compile(cls, patterns: list[str]) -> list[str]:
        return validate_patterns(patterns)


class Checkpoints(ApiModel):
    """Checkpoints of source consumer groups into `<source alias>.checkpoints.internal`."""

    enabled: bool = Field(default=True, description="Emit checkpoints.")
    interval_seconds: Annotated[int, Field(ge=1, le=86_400)] = Field(
        default=60, description="How often group offsets are read and checkpointed."
    )
    groups: GroupSelection = section(GroupSelection, "Which consumer groups.")
    sync_group_offsets: bool = Field(
        default=False,
        description="Also commit translated offsets to the same group on the target, while that "
        "group has no active members there; never backwards.",
    )


class Heartbeats(ApiModel):
    """Heartbeats into the `heartbeats` topic on the target, as MirrorMaker 2 writes them."""

    enabled: bool = Field(default=True, description="Emit heartbeats.")
    interval_seconds: Annotated[int, Field(ge=1, le=3_600)] = Field(
        default=1, description="Seconds between heartbeats."
    )


class TopicConfigSync(ApiModel):
    """Remote topics follow the source topics' configuration and partition count."""

    enabled: bool = Field(default=True, description="Copy topic configs from the source.")
    interval_seconds: Annotated[int, Field(ge=10, le=86_400)] = Field(
        default=600, description="How often configs are compared and copied."
    )
    excludes: Annotated[
        list[Annotated[str, Field(max_length=MAX_PATTERN_LENGTH)]], Field(max_length=MAX_PATTERNS)
    ] = Field(
        default_factory=list,
        description="Extra config names never copied (beyond MirrorMaker 2's own exclusions).",
    )


PRINCIPAL = r"^[A-Za-z][A-Za-z0-9]*:.+$"
ONE_PRINCIPAL = r"^[A-Za-z][A-Za-z0-9]*:([^*].*|\*.+)$"  # not `User:*`, which is everyone


class PrincipalMapping(ApiModel):
    """A principal of the source that has another name on the target."""

    source: Annotated[str, Field(max_length=256, pattern=ONE_PRINCIPAL)] = Field(
        description="The principal on the source (`User:svc-x`; never `User:*`: a wildcard's "
        "DENY renamed would deny one principal only)."
    )
    target: Annotated[str, Field(max_length=256, pattern=ONE_PRINCIPAL)] = Field(
        description="Its name on the target (`User:svc-x-dr`; never `User:*`)."
    )


class AclSync(ApiModel):
    """The mirrored topics' and checkpointed groups' ACLs follow them to the target
    (docs/runbook-dr.md)."""

    enabled: bool = Field(
        default=True,
        description="Copy the reading rights (READ, DESCRIBE, DESCRIBE_CONFIGS; ALL as READ "
        "and DESCRIBE) and their DENYs of the mirrored topics' ACLs on the source to the remote "
        "topics, and of the checkpointed groups' ACLs (READ, DESCRIBE) to the same groups on the "
        "target, prefixed and wildcard bindings as one literal binding per topic or group; never "
        "WRITE. Needs DESCRIBE on the source's Cluster and DESCRIBE and ALTER on the target's "
        "(without them mirroring goes on, and the workers say which right is missing). On by "
        "default, as MirrorMaker 2's sync.topic.acls.enabled; not under identity naming.",
    )
    interval_seconds: Annotated[int, Field(ge=10, le=86_400)] = Field(
        default=60, description="How often the ACLs are compared and copied."
    )
    principals: Annotated[list[PrincipalMapping], Field(max_length=MAX_PATTERNS)] = Field(
        default_factory=list,
        description="Principals renamed on the target, for clusters whose identities differ.",
    )
    move_applications: bool = Field(
        default=False,
        description="A Promote or Failover grants on the target's local topic `t` the rights "
        "each principal had on the mirrored `t` on the source (WRITE, READ, DESCRIBE, "
        "DESCRIBE_CONFIGS, and their DENYs), as the last sync round listed them: the runbook's "
        "producers and consumers move there. Once the reverse mirror's Return starts this "
        "mirror again, those grants go. Only the bindings the operation made are removed; the "
        "operation's status lists them (movedRights).",
    )

    def renamed(self) -> dict[str, str]:
        return {mapping.source: mapping.target for mapping in self.principals}


@dataclass(frozen=True)
class SelectionRef:
    """A MirrorTopicSelection by namespace and name."""

    namespace: str
    name: str


class SelectionGrant(ApiModel):
    """Topics the mirror's owner lets some of its MirrorTopicSelections select.

    The namespace is the boundary: RBAC decides who may create selections in a namespace, and
    whoever may create one there may give it any name, so a name pattern only sorts the
    selections of one namespace (its teams' convenience), never keeps one team from another's
    grant."""

    namespaces: (
        Annotated[
            list[Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL)]],
            Field(min_length=1, max_length=MAX_PATTERNS),
        ]
        | None
    ) = Field(
        default=None,
        description="The namespaces whose selections the grant covers; unset, only the "
        "mirror's own. A selection in another namespace names this mirror with "
        "`spec.mirrorNamespace` and selects nothing unless a grant names its namespace.",
    )
    selections: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=253)]],
        Field(min_length=1, max_length=MAX_PATTERNS),
    ] = Field(
        default_factory=lambda: ["*"],
        description="Names of the selections granted, within those namespaces; `*` matches "
        "any characters. Anyone who may create selections in a namespace may choose any name: "
        "grant to a namespace what none of its writers should be denied.",
    )
    topics: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=MAX_PATTERN_LENGTH)]],
        Field(min_length=1, max_length=MAX_PATTERNS),
    ] = Field(
        description="Whole-name regular expressions (RE2): the granted selections select only "
        "topics matching one of these."
    )

    @field_validator("topics")
    @classmethod
    def _compile(cls, patterns: list[str]) -> list[str]:
        return validate_patterns(patterns)

    def covers(self, selection: SelectionRef, mirror_namespace: str) -> bool:
        namespaces = self.namespaces or [mirror_namespace]
        return selection.namespace in namespaces and any(
            fnmatchcase(selection.name, name) for name in self.selections
        )


ALIASES_MESSAGE = "source and target must have different aliases"


class KafkaMirrorSpec(ApiModel):
    """One mirror: source cluster to target cluster."""

    model_config = ConfigDict(
        json_schema_extra={
            "x-kubernetes-validations": [
                *cel("self.source.alias != self.target.alias", ALIASES_MESSAGE)[VALIDATIONS],
                *cel(IDENTITY_RETURN_RULE, IDENTITY_RETURN_MESSAGE)[VALIDATIONS],
            ]
        }
    )

    source: KafkaCluster = Field(description="The cluster topics are mirrored from.")
    target: KafkaCluster = Field(description="The cluster topics are mirrored to.")
    topic_naming: TopicNaming = section(TopicNaming, "Remote topic naming.")
    replicas: Annotated[int, Field(ge=0, le=1_000)] = Field(
        default=1,
        description="Worker pods; they share the source partitions. With `autoscaling`, the "
        "count to start from.",
    )
    autoscaling: Autoscaling | None = Field(
        default=None,
        description="Let the operator set the worker count from the lag and latency "
        '(docs/install.md, "Autoscaling"); unset, `replicas` holds (which an HPA or KEDA '
        "may set through the scale subresource).",
    )
    paused: bool = Field(default=False, description="Stop all workers, keeping their progress.")
    delivery: Delivery = Field(
        default="atLeastOnce",
        description="`atLeastOnce`: every record arrives, a few twice after a failure. "
        "`exactlyOnce`: copies and positions are committed together in transactions on the "
        "target, so a consumer of the target with `isolation.level=read_committed` sees each "
        "source record once; it adds up to one `commitIntervalSeconds` of latency and needs "
        "the transaction ACLs on the target (docs/reliability.md).",
    )
    commit_interval_seconds: Annotated[float, Field(ge=0.1, le=60)] = Field(
        default=1.0,
        description="How often the workers commit their progress (exactly once: the "
        "transaction interval).",
    )
    refresh_topics_interval_seconds: Annotated[int, Field(ge=1, le=3_600)] = Field(
        default=10, description="How often the source topic list is read for new topics."
    )
    offset_syncs: OffsetSyncs = section(OffsetSyncs, "Offset syncs.")
    checkpoints: Checkpoints = section(Checkpoints, "Consumer-group checkpoints.")
    heartbeats: Heartbeats = section(Heartbeats, "Heartbeats.")
    topic_config_sync: TopicConfigSync = section(TopicConfigSync, "Topic configuration sync.")
    acl_sync: AclSync = section(AclSync, "Topic ACL sync.")
    schema_registry: SchemaRegistrySync | None = Field(
        default=None,
        description="Copy the schemas of the mirrored records to the target's schema registry "
        "and rewrite the ids the records carry to the target's (docs/runbook-dr.md); unset, "
        "records are copied as they are.",
    )
    audit: AuditSettings = section(AuditSettings, "The audit CronJob.")
    worker: WorkerPod = section(WorkerPod, "Worker pod settings.")
    rpo_target_seconds: Annotated[int, Field(ge=1, le=604_800)] | None = Field(
        default=None,
        description="Your recovery point objective: the `WithinRpo` condition and the "
        "`kafka_mirror_rpo_target_seconds` metric (which the latency alert compares with) hold "
        "the mirroring latency against it.",
    )
    acknowledged_lost_to_retention: Annotated[int, Field(ge=0)] = Field(
        default=0,
        description="Records lost to retention (`status.totalLostToRetention`) you have dealt "
        "with: the `Degraded` condition reports the loss only while the total is above this, "
        "so setting it to the total clears it, and a new loss raises the total past it and "
        "reports again. The counts stay in the status.",
    )
    operation: MirrorOperation | None = Field(
        default=None,
        description="A disaster-recovery operation to carry out (docs/runbook-dr.md); while it "
        "names one, the workers are stopped. Remove it to mirror again.",
    )
    selection_policy: Annotated[list[SelectionGrant], Field(max_length=MAX_PATTERNS)] | None = (
        Field(
            default=None,
            description="Which topics each MirrorTopicSelection of this mirror may select: one "
            "selects only topics matching the `topics` of a grant that covers it (its namespace, "
            "then its name), and none if no grant covers it, whatever its own patterns say. "
            "Unset: a selection of this namespace any topic the source credential can read, one "
            "of another namespace none.",
        )
    )
    standby_for: MirrorName | None = Field(
        default=None,
        description="The KafkaMirror, in this namespace, that mirrors the opposite way. "
        "Without an operation of its own, this mirror stands by (no workers) until that "
        "one's Promote or Failover completes, and again once a Return has started that one "
        "again: a planned switchover is one change, the Promote of the other mirror "
        "(docs/runbook-dr.md).",
    )
    reverse: MirrorName | None = Field(
        default=None,
        description="The KafkaMirror, in this namespace, that mirrors the opposite way and "
        "whose Return may start this mirror again after its Promote or Failover (the mirror "
        "that names this one in `standbyFor`). Checked by uid: the mirror of that name when "
        "the operation starts, or the first one seen after, and no mirror re-created under "
        "the name later. Unset: no Return starts this mirror (remove its operation instead).",
    )

    def selection_bound(self, selection: SelectionRef, mirror_namespace: str) -> list[str] | None:
        """The topic patterns `spec.selectionPolicy` grants the selection (None: unbounded). A
        selection of another namespace is bounded by grants naming it, always."""
        if self.selection_policy is None:
            return None if selection.namespace == mirror_namespace else []
        return [
            topic
            for grant in self.selection_policy
            if grant.covers(selection, mirror_namespace)
            for topic in grant.topics
        ]

    @field_validator("target")
    @classmethod
    def _aliases_differ(cls, target: KafkaCluster, info: Any) -> KafkaCluster:
        source = info.data.get("source")
        if source is not None and source.alias == target.alias:
            raise ValueError(ALIASES_MESSAGE)
        return target

    @model_validator(mode="after")
    def _no_return_under_identity(self) -> KafkaMirrorSpec:
        if (
            self.operation is not None
            and self.operation.type == "Return"
            and self.topic_naming.policy == "identity"
        ):
            raise ValueError(IDENTITY_RETURN_MESSAGE)
        return self


# A selection's patterns, all of them: kopf keeps each object's last spec in an annotation,
# which the API server refuses past 256 KiB.
MAX_SELECTION_PATTERN_BYTES = 192 * 1024
SELECTION_BYTES_RULE = (
    "self.includes.map(p, p.size()).sum() + self.excludes.map(p, p.size()).sum() <= "
    f"{MAX_SELECTION_PATTERN_BYTES}"
)
SELECTION_BYTES_MESSAGE = (
    f"a selection's patterns may hold {MAX_SELECTION_PATTERN_BYTES // 1024} KiB in all: split "
    "them over several selections"
)


class MirrorTopicSelectionSpec(ApiModel):
    """Source topics to mirror, as whole-name regular expressions in RE2 syntax.

    RE2 is MirrorMaker 2's Java syntax less lookaround and backreferences, matched in time
    linear in the topic name, so no pattern can stall the mirror.

    A topic is selected when it matches any include and no exclude. All selections of a mirror
    are a union; a mirror without selections mirrors nothing.
    """

    model_config = ConfigDict(json_schema_extra=cel(SELECTION_BYTES_RULE, SELECTION_BYTES_MESSAGE))

    mirror: Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL)] = Field(
        description="Name of the KafkaMirror."
    )
    mirror_namespace: (
        Annotated[str, Field(min_length=1, max_length=63, pattern=DNS_LABEL)] | None
    ) = Field(
        default=None,
        description="Namespace of the KafkaMirror; unset, this selection's. A mirror of "
        "another namespace uses the selection only for the topics its "
        "`spec.selectionPolicy` grants this namespace.",
    )
    includes: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=MAX_PATTERN_LENGTH)]],
        Field(max_length=MAX_PATTERNS),
    ] = Field(default_factory=list, description="Topics matching any of these are selected.")
    excludes: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=MAX_PATTERN_LENGTH)]],
        Field(max_length=MAX_PATTERNS),
    ] = Field(default_factory=list, description="...unless they match one of these.")

    @field_validator("includes", "excludes")
    @classmethod
    def _compile(cls, patterns: list[str]) -> list[str]:
        return validate_patterns(patterns)

    @model_validator(mode="after")
    def _bounded(self) -> MirrorTopicSelectionSpec:
        if sum(map(len, [*self.includes, *self.excludes])) > MAX_SELECTION_PATTERN_BYTES:
            raise ValueError(SELECTION_BYTES_MESSAGE)
        return self


# --- whole objects ----------------------------------------------------------------------------


class KafkaMirror(BaseModel):
    """A KafkaMirror object as the API server returns it."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    api_version: Literal["kafkamirror.io/v1alpha1"] = Field(
        "kafkamirror.io/v1alpha1", alias="apiVersion"
    )
    kind: Literal["KafkaMirror"] = "KafkaMirror"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: KafkaMirrorSpec
    status: KafkaMirrorStatus = Field(default_factory=KafkaMirrorStatus)


class MirrorTopicSelection(BaseModel):
    """A MirrorTopicSelection object as the API server returns it."""

    model_config = ConfigDict(populate_by_name=True, extra="ignore")

    api_version: Literal["kafkamirror.io/v1alpha1"] = Field(
        "kafkamirror.io/v1alpha1", alias="apiVersion"
    )
    kind: Literal["MirrorTopicSelection"] = "MirrorTopicSelection"
    metadata: dict[str, Any] = Field(default_factory=dict)
    spec: MirrorTopicSelectionSpec
    status: MirrorTopicSelectionStatus = Field(default_factory=MirrorTopicSelectionStatus)
