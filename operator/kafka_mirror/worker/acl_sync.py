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
now: it records them on the target (kafka/acl_grants.py), so that another worker, or this one
after a restart, knows them. A binding someone else made on the target is never touched.

With `moveApplications`, each round also lists on the target the rights the source's bindings
give the applications on the mirrored topics (the producers' WRITE, the consumers' reading
rights, their DENYs), as they would read on the target's local topics of the same names. No
binding is made of the list: a promote or a failover grants it there when the applications
move, the source lost by then (controller/applications.py).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from functools import cached_property

from confluent_kafka import KafkaException
from confluent_kafka.admin import AclBinding, ResourcePatternType

from kafka_mirror.kafka.acl_grants import (
    LOCAL,
    READING,
    AclsRefused,
    Grant,
    GrantRecords,
    applications_of,
    change,
    copies,
    describe,
    held_grants,
    moved,
    name_of,
    owned_by,
    values_of,
)
from kafka_mirror.kafka.client import ADMIN_TIMEOUT, ClusterUnavailable
from kafka_mirror.topics import NameFilter
from kafka_mirror.worker.clients import Clients
from kafka_mirror.worker.metrics import WorkerMetrics

log = logging.getLogger(__name__)

GROUP_READING = ("READ", "DESCRIBE")
SYNCED = ("TOPIC", "GROUP")  # the resource types copied


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

    def principals(self, renamed: dict[str, str]) -> set[str]:
        """Whom the binding names on the target: the renamed principal; for a DENY, the
        source's name too (a deny of a principal renamed away must not lapse on the target)."""
        target = renamed.get(self.principal, self.principal)
        return {target, self.principal} if self.permission == "DENY" else {target}

    def covered(self, names: dict[str, str]) -> list[tuple[str, str]]:
        """The (name, its name on the target) of `names` the binding covers: a literal
        binding's one looked up, others matched against every name."""
        if self.pattern == "LITERAL" and self.name != "*":
            return [(self.name, names[self.name])] if self.name in names else []
        return [(name, remote) for name, remote in names.items() if self.covers(name)]


def source_binding(b: AclBinding) -> SourceBinding:
    return SourceBinding(values_of(b)[0], name_of(b.resource_pattern_type), *values_of(b)[1:])


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
        operations = copied_operations(binding.resource, binding.operation, binding.permission)
        if binding.resource == "GROUP" and binding.name == "*" and binding.permission == "ALLOW":
            continue  # every group on A is no grant of B's own groups of the same names
        for _, remote in binding.covered(names.get(binding.resource, {})):
            grants.update(
                Grant(binding.resource, remote, principal, binding.host, op, binding.permission)
                for op in operations
                for principal in binding.principals(principals)
            )
    return grants


def application_grants(
    bindings: Iterable[SourceBinding], topics: Iterable[str], principals: dict[str, str]
) -> set[Grant]:
    """The rights the source's bindings give on each mirrored topic to the applications that
    move to the target's local topic of the same name after a failover: WRITE for its
    producers, the reading rights for its consumers (ALL as WRITE, READ and DESCRIBE), and
    their DENYs; as literal bindings of that topic."""
    names = {topic: topic for topic in topics}
    return {
        Grant("TOPIC", topic, principal, b.host, op, b.permission)
        for b in bindings
        if b.resource == "TOPIC"
        for op in local_operations(b.operation, b.permission)
        for topic, _ in b.covered(names)
        for principal in b.principals(principals)
    }


def local_operations(operation: str, permission: str) -> tuple[str, ...]:
    """The operations a binding grants (or denies) the applications on the local topic."""
    if operation == "ALL":
        return ("WRITE", "READ", "DESCRIBE") if permission == "ALLOW" else LOCAL
    return (operation,) if operation in LOCAL else ()


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


class AclSync:
    """The periodic sync of one worker (`sync`, off the mirroring loop)."""

    def __init__(
        self,
        clients: Clients,
        metrics: WorkerMetrics,
        mirror: str,
        groups: NameFilter,
        principals: dict[str, str],
        applications: bool = False,
    ) -> None:
        self.clients, self.metrics, self.mirror = clients, metrics, mirror
        self.groups, self.principals, self.applications = groups, principals, applications
        self._said: str | None = None  # the last refusal logged, not repeated every round

    @cached_property
    def records(self) -> GrantRecords:
        clients = self.clients
        return GrantRecords(
            clients.target_settings, clients.target_admin, clients.checkpoints_producer, "target"
        )

    def sync(self, mirrored: dict[str, str]) -> None:
        """One round: the source's topic and group bindings → the target's (source topic →
        remote; the checkpointed groups by their names)."""
        try:
            self._sync(mirrored)
        except AclsRefused as refused:
            self.metrics.acl_sync_refused.labels(refused.cluster).set(1)
            self._say(str(refused))

    def _sync(self, mirrored: dict[str, str]) -> None:
        source = describe(self.clients.source_admin, "source", ResourcePatternType.ANY, "DESCRIBE")
        if source is None:
            return  # no authorizer: no ACL to copy, none needed
        target = describe(
            self.clients.target_admin, "target", ResourcePatternType.LITERAL, "DESCRIBE and ALTER"
        )
        if target is None:
            return
        kinds = (ResourcePatternType.LITERAL, ResourcePatternType.PREFIXED)
        # An ALLOW a mirror copied onto the source is not copied back: it would outlive its
        # revocation on the other side (in a pair A⇄B). Whoever may write the source's grants
        # topic could so hold a copy back (docs/runbook-dr.md), so never a DENY: a DENY copied
        # back at worst outlives its revocation, a DENY held back would open a topic.
        held_on_source = self._held_on_source()
        made_on_source = copies(held_on_source, mirrored)
        # Rights an operation moved onto the source are copied (as the applications' rights on
        # the topic they came from, under another name) but never listed as theirs to move: a
        # Failover the other way would move them back where they may have been revoked since.
        moved_onto_source = moved(held_on_source)

        def literal_allow_in(grants: set[Grant], b: AclBinding) -> bool:
            return (
                b.resource_pattern_type == ResourcePatternType.LITERAL
                and name_of(b.permission_type) == "ALLOW"
                and Grant(*values_of(b)) in grants
            )

        kept = [
            b
            for b in source
            if b.resource_pattern_type in kinds
            and name_of(b.restype) in SYNCED
            and not literal_allow_in(made_on_source, b)
        ]
        bindings = [source_binding(b) for b in kept]
        applications = [
            source_binding(b) for b in kept if not literal_allow_in(moved_onto_source, b)
        ]
        # A group not listed (gone from the source, its offsets expired there after its
        # applications moved to the target, or a listing that failed) keeps its bindings.
        groups = self._checkpointed_groups()
        desired = remote_grants(bindings, mirrored, groups, self.principals)
        on_target = {Grant(*values_of(b)) for b in target if name_of(b.restype) in SYNCED}
        held = held_grants(self.clients.target_settings)
        scope = {("TOPIC", remote) for remote in mirrored.values()}
        scope |= {("GROUP", group) for group in groups}
        plan = plan_sync(desired, owned_by(held, self.mirror), on_target, scope)
        # Recorded before it is created, deleted before it is forgotten: a worker killed in
        # between leaves a record of a binding that may not exist, never a binding unrecorded.
        self.records.record(self.mirror, plan.create, owned=True)
        # Without moveApplications the list is emptied: a list left from before would grant, at
        # a failover after the option is set again, rights revoked on the source meanwhile.
        self._list_applications(applications if self.applications else [], mirrored, held)
        try:
            change(self.clients.target_admin, "target", plan.create, plan.delete)
        except (AclsRefused, KafkaException, TimeoutError):
            self.records.forget_unmade(self.mirror, plan.create)  # a call may have gone through
            raise
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

    def _list_applications(
        self,
        bindings: list[SourceBinding],
        mirrored: dict[str, str],
        held: dict[tuple[str, Grant], bool],
    ) -> None:
        """The applications' rights on the mirrored topics, listed on the target as of this
        round. A topic out of the plan loses its entries until it is back: kept, a right
        revoked on the source meanwhile would be granted by a failover."""
        owner = applications_of(self.mirror)
        listed = owned_by(held, owner)
        now = application_grants(bindings, mirrored, self.principals)
        self.records.record(owner, now - listed, owned=True)
        self.records.record(owner, listed - now, owned=False)

    def _held_on_source(self) -> dict[tuple[str, Grant], bool]:
        """The source's grant records (a mirror the other way made copies there, an operation
        moved rights there): copied back, a binding revoked on one side would come back from
        the other."""
        try:
            return held_grants(self.clients.source_settings)
        except ClusterUnavailable as error:  # unreadable: nothing known copied there
            log.warning("the source's grants not read: %s", error)
            return {}

    def _checkpointed_groups(self) -> set[str]:
        """The source's groups whose offsets the mirror checkpoints (those its group filter
        matches); none this round when the source does not list them all."""
        try:
            listing = self.clients.source_admin.list_consumer_groups(
                request_timeout=ADMIN_TIMEOUT
            ).result(timeout=ADMIN_TIMEOUT)
        except (KafkaException, TimeoutError) as error:
            log.warning("group ACLs not synced this round: listing the source's groups: %s", error)
            return set()
        if listing.errors:
            log.warning("group ACLs not synced this round: %s", listing.errors[0])
            return set()
        return {g.group_id for g in listing.valid if self.groups.matches(g.group_id)}

    def _say(self, message: str) -> None:
        if message != self._said:
            log.warning("ACLs not synced: %s", message)
            self._said = message
