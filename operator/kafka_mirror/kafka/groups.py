"""Consumer groups across the two clusters: the groups' committed offsets, the newest checkpoints
on the target (`read_checkpoints`), and committing translated offsets to a group on the target,
never under a group that has members there (its own commits win).

The workers' continuous offset sync and the operator's promote, failover and return commit
through the same `commit_to_idle_group`: the sync never moves a group backwards (MirrorMaker 2's
rule), an operation commits exactly the translated offset (backwards too: a group rewound on the
source resumes on the target where it was rewound to)."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import Any

from confluent_kafka import ConsumerGroupState, KafkaError, KafkaException

from kafka_mirror.kafka.client import Position
from kafka_mirror.kafka.coordinator import GroupCoordinator
from kafka_mirror.kafka.formats import WRITER_HEADER, Checkpoint
from kafka_mirror.kafka.tail import read_to_end

log = logging.getLogger(__name__)

IDLE_STATES = (ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD, ConsumerGroupState.UNKNOWN)
# What a coordinator answers a commit from outside a group that has members (or just got one).
MEMBERS_ERRORS = {
    KafkaError.UNKNOWN_MEMBER_ID,
    KafkaError.REBALANCE_IN_PROGRESS,
    KafkaError.ILLEGAL_GENERATION,
    KafkaError.FENCED_MEMBER_EPOCH,
    KafkaError.STALE_MEMBER_EPOCH,
}

CheckpointKey = tuple[str, str, int]  # group, downstream topic, partition


@dataclass
class Committed:
    """What one commit to a group on the target did."""

    active: bool = False  # the group has members on the target: nothing committed
    offsets: dict[Position, int] = field(default_factory=dict)  # committed now
    refused: dict[Position, str] = field(default_factory=dict)  # the target kept these: why

    @property
    def skipped(self) -> str | None:
        """Why the group did not get every offset wanted, or None when it did."""
        if self.active:
            return "members on the target"
        if not self.refused:
            return None
        (topic, partition), why = sorted(self.refused.items())[0]
        more = f" and {len(self.refused) - 1} more" if len(self.refused) > 1 else ""
        return f"the target refused {topic}[{partition}]{more}: {why}"


def committed_offsets(coordinator: GroupCoordinator, group: str) -> dict[Position, int]:
    """The group's committed offsets ({} for a group the cluster does not know). A failed read
    raises: taken for "nothing committed", it would make the next commit unconditional."""
    return {key: found.offset for key, found in coordinator.committed(group).items()}


def _kafka_error(error: KafkaException) -> KafkaError | None:
    found = error.args[0] if error.args else None
    return found if isinstance(found, KafkaError) else None


def _code(error: KafkaException) -> int | None:
    found = _kafka_error(error)
    return None if found is None else found.code()


def _passing(error: KafkaException) -> bool:
    """An error worth asking again for (a coordinator moving, a timeout, no answer), not an
    answer about the group."""
    found = _kafka_error(error)
    return (
        found is None
        or found.retriable()
        or found.code()
        in (
            KafkaError._TIMED_OUT,
            KafkaError._TRANSPORT,
            KafkaError.COORDINATOR_NOT_AVAILABLE,
            KafkaError.NOT_COORDINATOR,
            KafkaError.COORDINATOR_LOAD_IN_PROGRESS,
        )
    )


def is_active(coordinator: GroupCoordinator, group: str) -> bool:
    """Whether the group has members or is rebalancing. A failed describe raises: taken for
    "no members", a hand-over would commit under a running application."""
    try:
        state, members = coordinator.describe(group)
    except KafkaException as error:
        if _code(error) == KafkaError.GROUP_ID_NOT_FOUND:
            return False  # the group does not exist on the cluster yet
        raise
    return bool(members) or state not in IDLE_STATES


def commit_to_idle_group(
    coordinator: GroupCoordinator, group: str, wanted: dict[Position, int], exact: bool = False
) -> Committed:
    """Commit `wanted` to `group` if the group is idle: where it moves the group forward, or
    (`exact`, a hand-over) wherever it differs from what the group holds. What the target
    refuses is in `refused` (every partition, for a refusal of the whole request); an error
    worth asking again for raises."""
    try:
        if is_active(coordinator, group):
            return Committed(active=True)
        current = committed_offsets(coordinator, group)
        updates = {
            tp: offset
            for tp, offset in wanted.items()
            if (offset != current.get(tp) if exact else offset > current.get(tp, -1))
        }
        if not updates:
            return Committed()
        refused = coordinator.commit(group, updates)
    except KafkaException as error:
        if _passing(error):
            raise
        log.info("not committing offsets of group %s on the target: %s", group, error)
        if _code(error) in MEMBERS_ERRORS:
            return Committed(active=True)  # a member joined since we looked: its offsets
        return Committed(refused=dict.fromkeys(wanted, str(error)))
    for (topic, partition), why in refused.items():
        log.info("group %s kept %s[%d]: %s", group, topic, partition, why)
        updates.pop((topic, partition), None)
    return Committed(offsets=updates, refused=refused)


def read_checkpoints(
    settings: dict[str, Any], topic: str, mirror: str
) -> dict[CheckpointKey, Checkpoint]:
    """The newest checkpoint `mirror` wrote (or a version before the writer header) of each
    (group, downstream topic, partition) in checkpoints topic `topic`, read to its end ({}
    before the first is written). Raises ClusterUnavailable."""
    newest: dict[CheckpointKey, Checkpoint] = {}
    for key, value in read_to_end(settings, topic, header=(WRITER_HEADER, mirror.encode())):
        checkpoint = Checkpoint.decode(key, value)
        newest[(checkpoint.group, checkpoint.topic, checkpoint.partition)] = checkpoint
    return newest
