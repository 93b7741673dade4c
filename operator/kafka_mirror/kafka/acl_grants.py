"""The ACL bindings mirrors make on a cluster, and the record of them in Kafka: what the workers'
ACL sync (worker/acl_sync.py) and an operation moving the applications' rights
(controller/applications.py) both create, remember and delete, with one error mapping.

Each cluster's `ACL_GRANTS_TOPIC` (compacted) holds one record per owner and binding, `1` while
the owner holds it, `0` once it deleted it, so that another worker, the operator, or either
after a restart knows which bindings are theirs: a binding someone else made is never deleted.
An owner is a mirror (`ns/name`: the bindings its sync copied), `moved_by(mirror)` (the rights
an operation granted the applications on the target's local topics), `fenced_by(mirror, id)` (the
denies a promote's fence placed on the source's topics) or
`applications_of(mirror)`, which is a list and no binding: the applications' rights the source
gives on the mirrored topics, as they would read on the target's local topics, kept so that a
failover knows them once the source is lost.
"""

from __future__ import annotations

import json
from concurrent.futures import Future
from dataclasses import asdict, dataclass
from typing import Any

from confluent_kafka import KafkaError, KafkaException, Producer
from confluent_kafka.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ResourcePatternType,
    ResourceType,
)

from kafka_mirror.kafka.admin import ensure_internal_topic
from kafka_mirror.kafka.client import ADMIN_TIMEOUT
from kafka_mirror.kafka.tail import read_to_end, write_acknowledged

ACL_GRANTS_TOPIC = "kafka-mirror-acls.internal"  # `.internal`: MirrorMaker 2's tools skip it
READING = ("READ", "DESCRIBE", "DESCRIBE_CONFIGS")  # a topic's reading rights
LOCAL = ("WRITE", *READING)  # what the applications may be given on their local topics
ANY: Any = None  # a filter's "any value" (the client's stubs say str)
# Bindings per create or delete call: KRaft's controller refuses a request that would write
# over 10,000 records ("excessively large batch operation"), which a first sync of a large
# source reaches, every round again.
CALL_BATCH = 1000
MAX_RECORD_KEY = 4096  # bytes: a record's key names an owner and one binding's six strings


@dataclass(frozen=True, order=True)
class Grant:
    """One literal binding of a topic or group, as plain values."""

    resource: str  # TOPIC or GROUP
    name: str
    principal: str
    host: str
    operation: str  # an AclOperation name
    permission: str  # ALLOW or DENY


APPLICATIONS = "#applications"


def applications_of(mirror: str) -> str:
    """The owner under which a mirror's sync lists the applications' rights (no binding)."""
    return mirror + APPLICATIONS


MOVED = "#moved"


def moved_by(mirror: str) -> str:
    """The owner of the rights an operation of the mirror granted the applications."""
    return mirror + MOVED


def fenced_by(mirror: str, operation_id: str) -> str:
    """The owner of the denies a promote of the mirror placed on its source (its fence): one
    per operation id, so that a record left by an earlier one adopts nothing."""
    return f"{mirror}#fence/{operation_id}"


class AclsRefused(Exception):
    """A cluster (`source` or `target`) will not have its ACLs read or changed, or its grants
    recorded: the message says what to grant."""

    def __init__(self, cluster: str, message: str) -> None:
        super().__init__(message)
        self.cluster = cluster


class NoAuthorizer(AclsRefused):
    """The cluster checks no ACL: a binding made there would hold nothing."""

    def __init__(self, cluster: str) -> None:
        super().__init__(
            cluster, f"the {cluster} has no authorizer: its topics are open to every principal"
        )


def name_of(value: object) -> str:
    return str(getattr(value, "name", value))  # the client's enums (typed loosely)


def values_of(binding: AclBinding) -> tuple[str, str, str, str, str, str]:
    """resource, name, principal, host, operation, permission."""
    return (
        name_of(binding.restype),
        binding.name,
        binding.principal,
        binding.host,
        name_of(binding.operation),
        name_of(binding.permission_type),
    )


def describe(
    admin: AdminClient, cluster: str, pattern: ResourcePatternType, right: str
) -> list[AclBinding] | None:
    """The cluster's bindings of `pattern`; None when it has no authorizer (no ACL to copy, none
    needed). Raises AclsRefused naming `right` when it refuses."""
    acl_filter = AclBindingFilter(
        ResourceType.ANY, ANY, pattern, ANY, ANY, AclOperation.ANY, AclPermissionType.ANY
    )
    try:
        found: list[AclBinding] = admin.describe_acls(
            acl_filter, request_timeout=ADMIN_TIMEOUT
        ).result()
    except KafkaException as error:
        code = error.args[0].code()
        if code == KafkaError.SECURITY_DISABLED:
            return None
        if code != KafkaError.CLUSTER_AUTHORIZATION_FAILED:
            raise
        raise AclsRefused(
            cluster,
            f"the {cluster} refuses to describe its ACLs: grant the mirror's principal "
            f"{right} on the Cluster resource there",
        ) from error
    return found


def literal_grants(admin: AdminClient, cluster: str) -> set[Grant] | None:
    """The cluster's literal bindings of topics and groups; None without an authorizer."""
    found = describe(admin, cluster, ResourcePatternType.LITERAL, "DESCRIBE and ALTER")
    if found is None:
        return None
    return {Grant(*values_of(b)) for b in found if name_of(b.restype) in ("TOPIC", "GROUP")}


def change(admin: AdminClient, cluster: str, create: set[Grant], delete: set[Grant]) -> None:
    """Create and delete bindings: DENYs made first and deleted last, so that no ALLOW stands
    without them. Raises AclsRefused when the cluster has no authorizer or refuses."""
    try:
        for permission in ("DENY", "ALLOW"):
            made = [AclBinding(*_fields(g)) for g in sorted(create) if g.permission == permission]
            for first in range(0, len(made), CALL_BATCH):
                _wait(admin.create_acls(made[first : first + CALL_BATCH]))
        for permission in ("ALLOW", "DENY"):
            gone = [
                AclBindingFilter(*_fields(g)) for g in sorted(delete) if g.permission == permission
            ]
            for first in range(0, len(gone), CALL_BATCH):
                _wait(admin.delete_acls(gone[first : first + CALL_BATCH]))
    except KafkaException as error:
        code = error.args[0].code()
        if code == KafkaError.SECURITY_DISABLED:
            raise NoAuthorizer(cluster) from error
        if code == KafkaError.CLUSTER_AUTHORIZATION_FAILED:
            raise AclsRefused(
                cluster,
                f"the {cluster} refuses to change its ACLs: grant the mirror's principal ALTER "
                "on the Cluster resource there",
            ) from error
        raise


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


def _wait(futures: dict[Any, Future[Any]]) -> None:
    for future in futures.values():
        future.result(ADMIN_TIMEOUT)


def parse_record(key: bytes) -> tuple[str, Grant] | None:
    """A record's key as (owner, binding); None for what is not a record of ours (another
    version's, or anything anyone wrote there: too long, or nested deep enough to exhaust the
    parser's recursion)."""
    if len(key) > MAX_RECORD_KEY:
        return None
    try:
        owner, fields = json.loads(key)
        if "topic" in fields:  # written before group bindings were synced
            fields = {"resource": "TOPIC", "name": fields.pop("topic"), **fields}
        grant = Grant(**fields)
        AclOperation[grant.operation]
    except (ValueError, TypeError, KeyError, AttributeError, RecursionError):
        return None
    if not isinstance(owner, str) or not all(isinstance(v, str) for v in fields.values()):
        return None
    # Only what a binding of a topic or group can be: a filter's ANY (or UNKNOWN) makes no
    # binding, and the client refuses to build one of it.
    if grant.resource not in ("TOPIC", "GROUP") or grant.permission not in ("ALLOW", "DENY"):
        return None
    if grant.operation in ("ANY", "UNKNOWN"):
        return None
    return owner, grant


def held_grants(settings: dict[str, Any]) -> dict[tuple[str, Grant], bool]:
    """Each (owner, binding) of a cluster's ACL_GRANTS_TOPIC: whether the owner holds it, by
    the last record of it. Raises ClusterUnavailable when it cannot be read to its end."""
    held: dict[tuple[str, Grant], bool] = {}  # in the records' order: the last one holds
    for key, value in read_to_end(settings, ACL_GRANTS_TOPIC):
        record = parse_record(key)
        if record is not None:
            held[record] = value == b"1"
    return held


def owned_by(held: dict[tuple[str, Grant], bool], owner: str) -> set[Grant]:
    return {grant for (who, grant), owned in held.items() if owned and who == owner}


def copies(held: dict[tuple[str, Grant], bool], mirrored: dict[str, str]) -> set[Grant]:
    """The bindings on the cluster that copy the other side's, never to be copied back: those
    any mirror's sync made, and the applications' rights an operation moved onto a topic that
    would be copied under its own name (identity naming: back onto the topic they came from).
    Moved onto `t` and copied as `t.B`, they are the applications' rights on `t`, whose
    consumers read `t.B` after a failback. The lists of applications' rights are no bindings."""
    return {
        grant
        for (owner, grant), owned in held.items()
        if owned
        and not owner.endswith(APPLICATIONS)
        and not (owner.endswith(MOVED) and mirrored.get(grant.name, grant.name) != grant.name)
    }


def moved(held: dict[tuple[str, Grant], bool]) -> set[Grant]:
    """The applications' rights an operation moved onto the cluster (and holds there)."""
    return {grant for (owner, grant), owned in held.items() if owned and owner.endswith(MOVED)}


class GrantRecords:
    """One cluster's ACL_GRANTS_TOPIC, written through `producer`; `cluster` (source or target)
    names it in refusals."""

    def __init__(
        self, settings: dict[str, Any], admin: AdminClient, producer: Producer, cluster: str
    ) -> None:
        self.settings, self.admin, self.producer, self.cluster = settings, admin, producer, cluster
        self.created = False

    def read(self, owner: str) -> set[Grant]:
        return owned_by(held_grants(self.settings), owner)

    def record(self, owner: str, grants: set[Grant], owned: bool) -> None:
        """Raises AclsRefused unless every record was acknowledged."""
        if not grants:
            return
        try:
            # Made at the first binding: a cluster without ACLs gets no topic. Not written until
            # it is made, so that no broker's auto-creation makes it uncompacted (records would
            # expire).
            if not self.created:
                if not ensure_internal_topic(self.admin, ACL_GRANTS_TOPIC):
                    raise OSError(f"{ACL_GRANTS_TOPIC} could not be created")
                self.created = True
            value = b"1" if owned else b"0"
            records = [
                (json.dumps([owner, asdict(grant)], sort_keys=True).encode(), value)
                for grant in sorted(grants)
            ]
            write_acknowledged(self.producer, ACL_GRANTS_TOPIC, records, ADMIN_TIMEOUT)
        except OSError as error:
            raise AclsRefused(
                self.cluster,
                f"the bindings cannot be recorded ({error}): grant the mirror's principal "
                f"Create, Read and Write on {ACL_GRANTS_TOPIC} on the {self.cluster}",
            ) from error

    def grant(self, owner: str, grants: set[Grant]) -> set[Grant]:
        """Create those of `grants` the cluster lacks, each recorded as `owner`'s first (a
        process killed in between leaves a record of a binding that may not exist, never a
        binding unrecorded); those it has already stay whoever made them. What it created."""
        present = literal_grants(self.admin, self.cluster)
        if present is None:
            raise NoAuthorizer(self.cluster)
        create = grants - present
        self.record(owner, create, owned=True)
        try:
            change(self.admin, self.cluster, create, set())
        except (AclsRefused, KafkaException, TimeoutError):
            self.forget_unmade(owner, create)
            raise
        return create

    def forget_unmade(self, owner: str, asked: set[Grant]) -> None:
        """After a change that failed midway: the asked bindings the cluster does not hold are
        recorded as not `owner`'s (those it holds stay recorded: some were made). Unreadable,
        all stay recorded, which at worst deletes later a binding that is not there."""
        try:
            present = literal_grants(self.admin, self.cluster)
        except (AclsRefused, KafkaException, TimeoutError):
            return
        self.record(owner, asked - (present or set()), owned=False)

    def revoke(self, owner: str, grants: set[Grant]) -> None:
        """Delete `grants`, which `owner` made, then record them gone."""
        change(self.admin, self.cluster, set(), grants)
        self.record(owner, grants, owned=False)
