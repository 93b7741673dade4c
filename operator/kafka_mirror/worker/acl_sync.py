"""ACLs follow the mirrored topics and the checkpointed groups to the target, so that after a
failover the applications' principals may read the remote topics and resume their groups as
they did on the source (MirrorMaker 2's `sync.topic.acls.enabled`, on by default as there; the
group ACLs are beyond it).

As MirrorMaker 2, nobody but the mirror may write a remote topic: `ALLOW WRITE` is not copied
and `ALLOW ALL` becomes `READ` and `DESCRIBE`. Beyond it: only the reading rights are copied
(`READ`, `DESCRIBE`, `DESCRIBE_CONFIGS`; an `ALTER` or `DELETE` on a copy could damage it), a
`DENY` of those is copied too (a deny that protected data on the source protects its copy), a
prefixed or wildcard binding becomes one literal binding per mirrored topic (or group) it covers
(a prefixed one on the target would also cover its own topics of that prefix, which the source's
binding never granted), and principals can be renamed for a target whose identities differ.
Groups keep their names on the target: a group binding copies `READ` and `DESCRIBE` (and their
DENYs) for the source's groups whose offsets the mirror checkpoints.

Only bindings the sync created are ever deleted, only reading rights of the topics mirrored
now: it records them in a compacted topic on the target (`ACL_GRANTS_TOPIC`, keyed by mirror
and binding), so that another worker, or this one after a restart, knows them. A binding
someone else made on the target before the copy is never touched.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from concurrent.futures import Future
from dataclasses import asdict, dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    ResourcePatternType,
    ResourceType,
)

from kafka_mirror.kafka.admin import ensure_internal_topic
from kafka_mirror.kafka.client import ClusterUnavailable
from kafka_mirror.kafka.tail import read_to_end, write_acknowledged
from kafka_mirror.topics import NameFilter
from kafka_mirror.worker.clients import Clients
from kafka_mirror.worker.metrics import WorkerMetrics

log = logging.getLogger(__name__)

ACL_GRANTS_TOPIC = "kafka-mirror-acls.internal"  # on the target; `.internal`: MM2 tools skip it
READING = ("READ", "DESCRIBE", "DESCRIBE_CONFIGS")  # a topic's; a group's are READ, DESCRIBE
GROUP_READING = ("READ", "DESCRIBE")
SYNCED = ("TOPIC", "GROUP")  # the resource types copied
ADMIN_SECONDS = 30.0
ANY: Any = None  # a filter's "any value" (the client's stubs say str)


@dataclass(frozen=True, order=True)
class Grant:
    """One literal binding of a topic or group, as plain values (one on the target)."""

    resource: str  # TOPIC or GROUP
    name: str
    principal: str
    host: str
    operation: str  # an AclOperation name
    permission: str  # ALLOW or DENY


@dataclass(frozen=True)
class SourceBinding:
    """A topic or group binding on the source: literal (its name may be `*`, every one) or
    prefixed."""

    resource: str  # TOPIC or GROUP
    pattern: str  # LITERAL or PREFIXED
    name: str
    principal: str
    host: str
    operation: str
    permission: str

    def covers(self, name: str) -> bool:
        if self.pattern == "PREFIXED":
            return name.startswith(self.name)
        return self.name in ("*", name)


def copied_operations(resource: str, operation: str, permission: str) -> tuple[str, ...]:
    """The operations a binding grants (or denies) on the remote topic or group."""
    reading = READING if resource == "TOPIC" else GROUP_READING
    if operation == "ALL":
        return ("READ", "DESCRIBE") if permission == "ALLOW" else reading
    return (operation,) if operation in reading else ()


def remote_grants(
    bindings: Iterable[SourceBinding],
    mirrored: dict[str, str],
    groups: Iterable[str],
    principals: dict[str, str],
) -> set[Grant]:
    """The bindings the target should hold for the mirrored topics (source topic → remote
    topic) and the checkpointed groups: never more than the source's bindings grant on the
    corresponding topics and groups."""
    names = {"TOPIC": mirrored, "GROUP": {group: group for group in groups}}
    grants: set[Grant] = set()
    for binding in bindings:
        principal = principals.get(binding.principal, binding.principal)
        operations = copied_operations(binding.resource, binding.operation, binding.permission)
        if binding.resource == "GROUP" and binding.name == "*" and binding.permission == "ALLOW":
            continue  # every group on A is no grant of B's own groups of the same names
        for name, remote in names.get(binding.resource, {}).items():
            if binding.covers(name):
                grants.update(
                    Grant(binding.resource, remote, principal, binding.host, op, binding.permission)
                    for op in operations
                )
    return grants


@dataclass(frozen=True)
class SyncPlan:
    create: set[Grant]
    delete: set[Grant]
    ours: set[Grant]  # what the sync holds on the target afterwards


def plan_sync(
    desired: set[Grant], ours: set[Grant], on_target: set[Grant], scope: set[tuple[str, str]]
) -> SyncPlan:
    """What to create and delete: create what is desired and missing (and own it), delete what
    the sync made and no longer desires, of the remote topics mirrored now and the groups
    checkpointed now (`scope`: resource and name) and only reading rights. A binding on the
    target the sync did not make is never deleted, nor taken over; a topic or group out of
    the plan (unmirrored, not known yet after a restart, its ID unread) keeps what it had, its
    DENYs with its data."""
    create = desired - on_target
    delete = {g for g in ours - desired if (g.resource, g.name) in scope and g.operation in READING}
    return SyncPlan(create, delete, (ours - delete) | create)


def _binding(grant: Grant) -> AclBinding:
    """The binding on the target."""
    return AclBinding(*_fields(grant))


def _exactly(grant: Grant) -> AclBindingFilter:
    """The filter of exactly that binding, to delete it."""
    return AclBindingFilter(*_fields(grant))


def _fields(grant: Grant) -> tuple[Any, ...]:
    return (
        ResourceType[grant.resource],
        grant.name,
        ResourcePatternType.LITERAL,
        grant.principal,
        grant.host,
        AclOperation[grant.operation],
        AclPermissionType[grant.permission],
    )


def _name(value: object) -> str:
    return str(getattr(value, "name", value))  # the client's enums (typed loosely)


def _values(binding: AclBinding) -> tuple[str, str, str, str, str, str]:
    """resource, name, principal, host, operation, permission."""
    return (
        _name(binding.restype),
        binding.name,
        binding.principal,
        binding.host,
        _name(binding.operation),
        _name(binding.permission_type),
    )


def _held(settings: dict[str, Any]) -> dict[tuple[str, Grant], bool]:
    """Each (mirror, binding) of a cluster's ACL_GRANTS_TOPIC: whether the mirror's sync holds
    it, by the last record of it."""
    held: dict[tuple[str, Grant], bool] = {}  # in the records' order: the last one holds
    for key, value in read_to_end(settings, ACL_GRANTS_TOPIC):
        record = parse_record(key)
        if record is not None:
            held[record] = value == b"1"
    return held


def parse_record(key: bytes) -> tuple[str, Grant] | None:
    """A record's key as (mirror, binding); None for what is not a record of ours (another
    version's, or anything anyone wrote there)."""
    try:
        owner, fields = json.loads(key)
        if "topic" in fields:  # written before group bindings were synced
            fields = {"resource": "TOPIC", "name": fields.pop("topic"), **fields}
        grant = Grant(**fields)
        ResourceType[grant.resource], AclOperation[grant.operation]
        AclPermissionType[grant.permission]
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    if not isinstance(owner, str) or not all(isinstance(v, str) for v in fields.values()):
        return None
    return owner, grant


class GrantRecords:
    """The bindings each mirror's sync made on the target, in ACL_GRANTS_TOPIC: one record per
    mirror and binding, `1` while the sync holds it, `0` once it deleted it (compaction keeps
    the last)."""

    def __init__(self, clients: Clients) -> None:
        self.clients = clients
        self.created = False

    def read(self, mirror: str) -> set[Grant]:
        """The bindings the mirror's sync holds on the target."""
        held = _held(self.clients.target_settings)
        return {grant for (owner, grant), owned in held.items() if owned and owner == mirror}

    def copies_on_source(self) -> set[Grant]:
        """The bindings any mirror's sync made on the source (a mirror the other way), which
        are copies, not the applications' own: copied back, a binding revoked on one side
        would come back from the other."""
        try:
            held = _held(self.clients.source_settings)
        except ClusterUnavailable as error:  # unreadable: nothing known copied there
            log.warning("the source's %s not read: %s", ACL_GRANTS_TOPIC, error)
            return set()
        return {grant for (_, grant), owned in held.items() if owned}

    def record(self, mirror: str, grants: set[Grant], owned: bool) -> None:
        """Raises OSError unless every record was acknowledged."""
        if not grants:
            return
        # Made at the first binding: a target without ACLs gets no topic. Not written until it
        # is made, so that no broker's auto-creation makes it uncompacted (records would expire).
        if not self.created:
            if not ensure_internal_topic(self.clients.target_admin, ACL_GRANTS_TOPIC):
                raise OSError(f"{ACL_GRANTS_TOPIC} could not be created on the target")
            self.created = True
        value = b"1" if owned else b"0"
        records = [
            (json.dumps([mirror, asdict(grant)], sort_keys=True).encode(), value)
            for grant in sorted(grants)
        ]
        write_acknowledged(
            self.clients.checkpoints_producer, ACL_GRANTS_TOPIC, records, ADMIN_SECONDS
        )


class AclSync:
    """The periodic sync of one worker (`sync`, off the mirroring loop)."""

    def __init__(
        self,
        clients: Clients,
        metrics: WorkerMetrics,
        mirror: str,
        groups: NameFilter,
        principals: dict[str, str],
    ) -> None:
        self.clients, self.metrics, self.mirror = clients, metrics, mirror
        self.groups, self.principals = groups, principals
        self.records = GrantRecords(clients)
        self._said: str | None = None  # the last refusal logged, not repeated every round

    def sync(self, mirrored: dict[str, str]) -> None:
        """One round: the source's topic and group bindings → the target's (source topic →
        remote; the checkpointed groups by their names)."""
        source = self._describe("source", ResourcePatternType.ANY)
        target = (
            self._describe("target", ResourcePatternType.LITERAL) if source is not None else None
        )
        if source is None or target is None:
            return
        kinds = (ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED)
        # A binding a mirror copied onto the source is not copied back: it would outlive its
        # revocation on the other side (a DENY as much as an ALLOW, in a pair A⇄B). Whoever
        # may write the source's grants topic could so hold a copy back: docs/runbook-dr.md.
        copies = self.records.copies_on_source()
        bindings = [
            SourceBinding(_values(b)[0], _name(b.resource_pattern_type), *_values(b)[1:])
            for b in source
            if b.resource_pattern_type in kinds
            and _name(b.restype) in SYNCED
            and not (
                b.resource_pattern_type == ResourcePatternType.LITERAL
                and Grant(*_values(b)) in copies
            )
        ]
        # A group not listed (gone from the source, its offsets expired there after its
        # applications moved to the target, or a listing that failed) keeps its bindings.
        groups = self._checkpointed_groups()
        desired = remote_grants(bindings, mirrored, groups, self.principals)
        on_target = {Grant(*_values(b)) for b in target if _name(b.restype) in SYNCED}
        ours = self.records.read(self.mirror)
        scope = {("TOPIC", remote) for remote in mirrored.values()}
        scope |= {("GROUP", group) for group in groups}
        plan = plan_sync(desired, ours, on_target, scope)
        # Recorded before it is created, deleted before it is forgotten: a worker killed in
        # between leaves a record of a binding that may not exist, never a binding unrecorded.
        # DENYs are made first and deleted last, so that no ALLOW stands without them.
        try:
            self.records.record(self.mirror, plan.create, owned=True)
        except OSError as error:
            self.metrics.acl_sync_refused.labels("target").set(1)
            self._say(
                f"the sync cannot record its bindings ({error}): grant the mirror's principal "
                f"Create, Read and Write on {ACL_GRANTS_TOPIC} on the target"
            )
            return
        admin = self.clients.target_admin
        try:
            for permission in ("DENY", "ALLOW"):
                made = [_binding(g) for g in sorted(plan.create) if g.permission == permission]
                if made:
                    _wait(admin.create_acls(made))
            for permission in ("ALLOW", "DENY"):
                gone = [_exactly(g) for g in sorted(plan.delete) if g.permission == permission]
                if gone:
                    _wait(admin.delete_acls(gone))
        except KafkaException as error:
            code = error.args[0].code()
            if code not in (KafkaError.SECURITY_DISABLED, KafkaError.CLUSTER_AUTHORIZATION_FAILED):
                raise
            self.records.record(self.mirror, plan.create, owned=False)  # none was made
            self.metrics.acl_sync_refused.labels("target").set(1)
            self._say(
                "the target has no authorizer: its topics are open to every principal"
                if code == KafkaError.SECURITY_DISABLED
                else "the target refuses to change its ACLs: grant the mirror's principal "
                "ALTER on the Cluster resource there"
            )
            return
        self.records.record(self.mirror, plan.delete, owned=False)
        self.metrics.acl_bindings.set(len(plan.ours))
        for cluster in ("source", "target"):
            self.metrics.acl_sync_refused.labels(cluster).set(0)
        self._said = None  # a refusal that comes back is said again
        if plan.create or plan.delete:
            log.info(
                "ACLs on the target: %d created, %d deleted",
                len(plan.create),
                len(plan.delete),
            )

    def _checkpointed_groups(self) -> set[str]:
        """The source's groups whose offsets the mirror checkpoints (those its group filter
        matches); none this round when the source does not list them all."""
        try:
            listing = self.clients.source_admin.list_consumer_groups(
                request_timeout=ADMIN_SECONDS
            ).result(timeout=ADMIN_SECONDS)
        except (KafkaException, TimeoutError) as error:
            log.warning("group ACLs not synced this round: listing the source's groups: %s", error)
            return set()
        if listing.errors:
            log.warning("group ACLs not synced this round: %s", listing.errors[0])
            return set()
        return {g.group_id for g in listing.valid if self.groups.matches(g.group_id)}

    def _describe(self, cluster: str, pattern: ResourcePatternType) -> list[AclBinding] | None:
        """The cluster's bindings; None when it has no authorizer (nothing to sync) or refuses
        (said once, naming the right it misses; mirroring goes on)."""
        admin = self.clients.source_admin if cluster == "source" else self.clients.target_admin
        acl_filter = AclBindingFilter(
            ResourceType.ANY, ANY, pattern, ANY, ANY, AclOperation.ANY, AclPermissionType.ANY
        )
        try:
            found: list[AclBinding] = admin.describe_acls(
                acl_filter, request_timeout=ADMIN_SECONDS
            ).result()
        except KafkaException as error:
            code = error.args[0].code()
            if code == KafkaError.SECURITY_DISABLED:
                return None  # no authorizer: no ACL to copy, none needed
            if code != KafkaError.CLUSTER_AUTHORIZATION_FAILED:
                raise
            right = "DESCRIBE" if cluster == "source" else "DESCRIBE and ALTER"
            message = (
                f"the {cluster} refuses to describe its ACLs: grant the mirror's principal "
                f"{right} on the Cluster resource there"
            )
            self.metrics.acl_sync_refused.labels(cluster).set(1)
            self._say(message)
            return None
        return found

    def _say(self, message: str) -> None:
        if message != self._said:
            log.warning("ACLs not synced: %s", message)
            self._said = message


def _wait(futures: dict[Any, Future[Any]]) -> None:
    for future in futures.values():
        future.result(ADMIN_SECONDS)
