"""The applications' rights move with a promote or a failover (`aclSync.moveApplications`), and
back with the Return that starts the mirror again.

The runbook moves the producers of `t` to the local `t` on the target and has the consumers read
it there beside `t.A`. There they need the rights they had on `t` on the source (WRITE, the
reading rights), which by a failover cannot be asked any more: the workers' sync lists them on
the target every round (worker/acl_sync.py, `applications_of`). The operation grants what was
listed last, for the topics the mirror selects, each binding recorded as the operation's
(`moved_by`) before it is made, and listed in the operation's status, so that only those go
again: once the reverse mirror's Return has started this mirror again, the applications use the
source again, and the operator deletes what the status lists (never what the records alone say:
whoever may write the grants topic could name a binding of someone else's there). A binding
someone else made on the target is never created again, recorded or removed.
"""

from __future__ import annotations

from datetime import datetime

from confluent_kafka import KafkaException

from kafka_mirror.api.operations import MovedGrant, MovedRights, OperationStatus
from kafka_mirror.api.worker_config import WorkerConfig
from kafka_mirror.controller.fence import denies as fence_denies
from kafka_mirror.controller.operation_kafka import Cluster
from kafka_mirror.controller.status import Event
from kafka_mirror.kafka.acl_grants import LOCAL, AclsRefused, Grant, applications_of, moved_by

# Bindings one operation moves at most: each is listed in the status (which the Return deletes
# by), about 150 bytes each.
MAX_MOVED = 1000
MAX_NAME = 256  # characters of a listed topic or principal: a longer one is no binding of ours


def move(config: WorkerConfig, target: Cluster, op: OperationStatus) -> None:
    """Grant on the target the applications' rights the sync listed (a promote or a failover
    with `moveApplications`), and say what holds now in `op.moved_rights`. Idempotent: a pass
    cut short is run again whole."""
    if not config.acl_sync.move_applications or op.type == "Return":
        return
    try:
        _move(config, target, op)
    except (KafkaException, TimeoutError, ValueError) as error:
        # The hand-over of the records and the offsets is done: it is not held for this.
        op.moved_rights = MovedRights(
            message=f"the applications' rights not granted: the target did not answer ({error})"
        )


def _move(config: WorkerConfig, target: Cluster, op: OperationStatus) -> None:
    usable, _ = config.compiled_selections()
    # The fence's denies on the source are listed by the sync too; they are no application's.
    fenced = fence_denies(op.fence.topics) if op.fence is not None else set()
    listed = {
        g
        for g in target.recorded_grants(applications_of(config.mirror)) - fenced
        if _local_right(g) and any(selection.matches(g.name) for selection in usable)
    }
    if not listed:
        op.moved_rights = MovedRights(
            message="no application's rights listed: the sync lists the source's in a round "
            "while the source can be read, with aclSync.moveApplications set before then"
        )
        return
    if len(listed) > MAX_MOVED:
        op.moved_rights = MovedRights(
            message=f"{len(listed)} bindings listed, more than the {MAX_MOVED} an operation "
            "moves: grant them on the target by hand (the list: kafka-mirror-acls.internal)"
        )
        return
    owner = moved_by(config.mirror)
    try:
        created = target.grant(owner, listed)
    except AclsRefused as refused:
        op.moved_rights = MovedRights(message=f"the applications' rights not granted: {refused}")
        return
    # A pass run again after one cut short finds its own bindings there: they are recorded.
    try:
        ours = created | (target.recorded_grants(owner) & listed)
    except KafkaException:
        ours = created  # those are made: listed, so that the Return takes them
    op.moved_rights = _shown(ours, listed)


def _local_right(grant: Grant) -> bool:
    """Whether a listed binding is one the sync lists: a topic's WRITE or reading right, of
    names no longer than Kafka's (anyone who may write the grants topic can list anything)."""
    return (
        grant.resource == "TOPIC"
        and grant.operation in LOCAL
        and len(grant.name) <= MAX_NAME
        and len(grant.principal) <= MAX_NAME
        and len(grant.host) <= MAX_NAME
    )


def _shown(ours: set[Grant], listed: set[Grant]) -> MovedRights:
    kept = len(listed - ours)  # already on the target, someone else's: they stay theirs
    return MovedRights(
        count=len(ours),
        grants=[
            MovedGrant(
                topic=g.name,
                principal=g.principal,
                host=g.host,
                operation=g.operation,
                permission=g.permission,
            )
            for g in sorted(ours)
        ],
        message=f"{len(ours)} bindings granted on the target's local topics"
        + (f"; {kept} were there already" if kept else ""),
    )


def to_return(op: OperationStatus) -> bool:
    """Whether the grants the operation made are still to remove: the mirror was started again
    by the reverse mirror's Return."""
    moved = op.moved_rights
    return op.resumed_by is not None and moved is not None and moved.returned_at is None


def move_back(
    config: WorkerConfig, target: Cluster | None, op: OperationStatus, now: datetime
) -> tuple[OperationStatus, list[Event]]:
    """Remove the grants the operation made (the applications use the source again); tried
    again on the next refresh while the target does not answer or refuses."""
    if target is None or op.moved_rights is None:
        return op, []
    gone = {
        Grant("TOPIC", g.topic, g.principal, g.host, g.operation, g.permission)
        for g in op.moved_rights.grants
    }
    if not gone:  # nothing was granted: nothing to take back, nothing to say
        moved = op.moved_rights.model_copy(update={"returned_at": now})
        return op.model_copy(update={"moved_rights": moved}), []
    try:
        target.revoke(moved_by(config.mirror), gone)
    except AclsRefused as refused:
        message = f"the applications' rights on the target not removed yet: {refused}"
        moved = op.moved_rights.model_copy(update={"message": message})
        return op.model_copy(update={"moved_rights": moved}), []
    except (KafkaException, TimeoutError):
        return op, []  # the next refresh tries again
    message = f"{len(gone)} bindings the {op.type.lower()} granted removed from the target"
    moved = op.moved_rights.model_copy(update={"returned_at": now, "message": message})
    return op.model_copy(update={"moved_rights": moved}), [
        Event("Normal", "ApplicationRightsReturned", message)
    ]
