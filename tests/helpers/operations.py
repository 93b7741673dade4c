"""What the unit tests of the operations share: a mirror's spec, its status, its two clusters in
memory, and the mirrors of a Return's namespace in memory."""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from confluent_kafka import KafkaException

from kafka_mirror.api.models import KafkaMirrorSpec
from kafka_mirror.api.operations import OperationStatus, ResumedBy, Rpo
from kafka_mirror.api.status import KafkaMirrorStatus, TopicStatus
from kafka_mirror.api.worker_config import WorkerConfig
from kafka_mirror.controller.operation_kafka import OpenTransactions
from kafka_mirror.controller.operations import Access
from kafka_mirror.controller.resume import Forward, Mirrors
from kafka_mirror.controller.rpo import rpo_of
from kafka_mirror.kafka.acl_grants import AclsRefused, Grant, NoAuthorizer
from kafka_mirror.kafka.client import Position
from kafka_mirror.kafka.formats import Checkpoint
from kafka_mirror.kafka.groups import CheckpointKey, Committed
from kafka_mirror.topics import NameFilter

NOW = datetime(2026, 11, 23, 3, 0, tzinfo=UTC)
REVERSE_UID = "uid-b-to-a"
EVERY_TOPIC = [{"name": "all", "includes": [".*"]}]


def spec(operation: dict[str, str] | None = None, **extra: Any) -> KafkaMirrorSpec:
    data: dict[str, Any] = {
        "source": {"alias": "A", "bootstrapServers": "a:9092"},
        "target": {"alias": "B", "bootstrapServers": "b:9092"},
        **extra,
    }
    if operation is not None:
        data["operation"] = operation
    return KafkaMirrorSpec.model_validate(data)


CONFIG = WorkerConfig.model_validate(
    {
        "mirror": "ns/m",
        "source": {"alias": "A", "bootstrapServers": "a:9092"},
        "target": {"alias": "B", "bootstrapServers": "b:9092"},
        "selections": EVERY_TOPIC,
    }
)
REVERSE = WorkerConfig.model_validate(
    {
        "mirror": "ns/b-to-a",
        "source": {"alias": "B", "bootstrapServers": "b:9092"},
        "target": {"alias": "A", "bootstrapServers": "a:9092"},
        "selections": EVERY_TOPIC,
    }
)


def status(lag: int = 0, replicas: int = 0, latency: float | None = 4.5) -> KafkaMirrorStatus:
    topics = [TopicStatus(name="t", remote_name="t.A", lag=lag, latency_seconds=latency)]
    return KafkaMirrorStatus(topics=topics, total_lag=lag, replicas=replicas, source_last_seen=NOW)


class FakeCluster:
    """One cluster in memory, as an operation uses it: the groups' committed offsets, the groups
    with members, the newest checkpoints, and each commit asked of it. A copy here sits at its
    original's offset; no copy tells more of the RPO than the status. Every call fails while
    `down`, and so do the calls numbered in `failing` (from 0, over the cluster's life); commits
    to the partitions in `refusing` are refused. Its partitions' ends are `ends`; the offsets in
    `markers` hold transaction markers, the others data records."""

    def __init__(self, name: str = "target") -> None:
        self.name = name
        self.groups: dict[str, dict[Position, int]] = {}
        self.members: set[str] = set()
        self.refusing: dict[Position, str] = {}  # partitions whose commits the cluster refuses
        self.checkpoints: dict[CheckpointKey, Checkpoint] = {}
        self.commits: list[tuple[str, dict[Position, int]]] = []
        self.open_transactions: dict[Position, OpenTransactions] = {}
        self.acls: set[Grant] | None = set()  # None: no authorizer
        self.acls_refused = False  # the mirror's principal may not change them
        self.ends: dict[Position, int] = {}
        self.markers: set[tuple[Position, int]] = set()
        self.grant_records: dict[str, set[Grant]] = {}  # owner → what it holds
        self.down = False
        self.failing: set[int] = set()
        self._calls = 0

    def _answer(self) -> None:
        call, self._calls = self._calls, self._calls + 1
        if self.down or call in self.failing:
            raise KafkaException("down")

    def group_offsets(self, groups: NameFilter) -> dict[str, dict[Position, int]]:
        self._answer()
        return {g: dict(offsets) for g, offsets in self.groups.items() if groups.matches(g)}

    def original_positions(
        self, positions: dict[Position, int], alias: str, originals: dict[str, str]
    ) -> dict[Position, int]:
        self._answer()
        return {(originals[t], p): o for (t, p), o in positions.items() if t in originals}

    def read_checkpoints(self, topic: str, mirror: str) -> dict[CheckpointKey, Checkpoint]:
        self._answer()
        return dict(self.checkpoints)

    def commit_exactly(self, group: str, offsets: dict[Position, int]) -> Committed:
        self._answer()
        if group in self.members:
            return Committed(active=True)
        self.commits.append((group, dict(offsets)))
        held = self.groups.setdefault(group, {})
        refused = {tp: why for tp, why in self.refusing.items() if tp in offsets}
        changed = {tp: o for tp, o in offsets.items() if held.get(tp) != o and tp not in refused}
        held.update(changed)
        return Committed(offsets=changed, refused=refused)

    def committed_offsets(self, group: str) -> dict[Position, int]:
        self._answer()
        return dict(self.groups.get(group, {}))

    def rpo_on_target(self, status: KafkaMirrorStatus, source_alias: str) -> Rpo:
        self._answer()
        return rpo_of(status)

    def in_open_transactions(self, topics: list[str]) -> dict[Position, OpenTransactions]:
        self._answer()
        return {key: o for key, o in self.open_transactions.items() if key[0] in topics}

    def recorded_grants(self, owner: str) -> set[Grant]:
        self._answer()
        return set(self.grant_records.get(owner, set()))

    def grant(self, owner: str, grants: set[Grant]) -> set[Grant]:
        self._answer()
        if self.acls is None:
            raise NoAuthorizer(self.name)
        if self.acls_refused:
            raise AclsRefused(self.name, f"the {self.name} refuses to change its ACLs")
        create = grants - self.acls
        self.grant_records.setdefault(owner, set()).update(create)
        self.acls |= create
        return create

    def end_offsets(self, topics: list[str]) -> dict[Position, int]:
        self._answer()
        return {key: end for key, end in self.ends.items() if key[0] in topics}

    def records_written(self, since: dict[Position, int]) -> dict[str, int]:
        self._answer()
        written: dict[str, int] = {}
        for key, end in self.ends.items():
            if key[0] in {t for t, _ in since}:
                data = [o for o in range(since.get(key, 0), end) if (key, o) not in self.markers]
                if data:
                    written[key[0]] = written.get(key[0], 0) + len(data)
        return written

    def revoke(self, owner: str, grants: set[Grant]) -> None:
        self._answer()
        if self.acls_refused:
            raise AclsRefused(self.name, f"the {self.name} refuses to change its ACLs")
        self.grant_records[owner] = self.grant_records.get(owner, set()) - grants
        if self.acls is not None:
            self.acls -= grants


@dataclass
class FakeKafka:
    """A mirror's source and target, in memory."""

    source: FakeCluster = field(default_factory=lambda: FakeCluster("source"))
    target: FakeCluster = field(default_factory=FakeCluster)

    def access(self, mirrors: Mirrors | None = None) -> Access:
        """What a refresh of b-to-a (the reverse mirror) reaches."""
        return Access(self.source, self.target, mirrors, uid=REVERSE_UID)


class FakeMirrors:
    """The namespace's mirrors, in memory: the forward mirror a-to-b and what is marked on it."""

    def __init__(self, forward: Forward | None) -> None:
        self.forward = forward

    def read(self, name: str) -> Forward | None:
        return self.forward if name == "a-to-b" else None

    def mark_resumed(self, name: str, operation_id: str, resumed: ResumedBy) -> bool:
        assert self.forward is not None and self.forward.status.operation is not None
        if name != "a-to-b" or self.forward.status.operation.id != operation_id:
            return False
        self.forward.status.operation.resumed_by = resumed
        return True


def failed_over(replicas: int = 0) -> Forward:
    """The forward mirror a-to-b, failed over (its workers stopped) and waiting for a Return of
    b-to-a, which it names as its reverse."""
    forward = spec({"type": "Failover", "id": "a-lost"}, reverse="b-to-a")
    record = OperationStatus(
        id="a-lost", type="Failover", phase="Completed", reverse_uid=REVERSE_UID
    )
    return Forward(forward, KafkaMirrorStatus(operation=record, replicas=replicas), "uid-a-to-b")
