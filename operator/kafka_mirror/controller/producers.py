"""The producers' rights move with a promote or a failover (`aclSync.moveProducers`), and back
with the Return that starts the mirror again.

The runbook moves the producers of `t` to the local `t` on the target. There they need the
WRITE they had on the source, which by a failover cannot be asked any more: the workers' sync
lists it on the target every round (worker/acl_sync.py, `producers_of`). The operation grants
what was listed last, for the topics the mirror selects, each binding recorded as the
operation's (`moved_by`) before it is made, so that only those go again: once the reverse
mirror's Return has started this mirror again, the producers write the source again and the
target's `t` is the reverse mirror's to copy no more. A binding someone else made on the target
is never created again, recorded or removed.
"""

from __future__ import annotations

from datetime import datetime

from confluent_kafka import KafkaException

from kafka_mirror.api.operations import MovedProducers, OperationStatus, ProducerGrant
from kafka_mirror.api.worker_config import WorkerConfig
from kafka_mirror.controller.operation_kafka import Cluster
from kafka_mirror.controller.status import Event
from kafka_mirror.kafka.acl_grants import AclsRefused, Grant, moved_by, producers_of

MAX_SHOWN = 200  # grants listed in the status; the count is exact


def move(config: WorkerConfig, target: Cluster, op: OperationStatus) -> None:
    """Grant on the target the producers' WRITE the sync listed (a promote or a failover with
    `moveProducers`), and say what holds now in `op.producers`. Idempotent: a pass cut short
    is run again whole."""
    if not config.acl_sync.move_producers or op.type == "Return":
        return
    usable, _ = config.compiled_selections()
    listed = {
        g
        for g in target.recorded_grants(producers_of(config.mirror))
        if any(selection.matches(g.name) for selection in usable)
    }
    if not listed:
        op.producers = MovedProducers(
            message="no producer's WRITE listed: the sync lists the source's in a round while "
            "the source can be read, with aclSync.moveProducers set before then"
        )
        return
    try:
        target.grant(moved_by(config.mirror), listed)
    except AclsRefused as refused:
        op.producers = MovedProducers(message=f"the producers' WRITE not granted: {refused}")
        return
    op.producers = _shown(target.recorded_grants(moved_by(config.mirror)), listed)


def _shown(held: set[Grant], listed: set[Grant]) -> MovedProducers:
    kept = len(listed - held)  # already on the target, someone else's: they stay theirs
    return MovedProducers(
        count=len(held),
        grants=[
            ProducerGrant(topic=g.name, principal=g.principal, host=g.host, permission=g.permission)
            for g in sorted(held)[:MAX_SHOWN]
        ],
        message=f"{len(held)} WRITE bindings granted on the target"
        + (f"; {kept} were there already" if kept else ""),
    )


def to_return(op: OperationStatus) -> bool:
    """Whether the grants the operation made are still to remove: the mirror was started again
    by the reverse mirror's Return."""
    moved = op.producers
    return op.resumed_by is not None and moved is not None and moved.returned_at is None


def move_back(
    config: WorkerConfig, target: Cluster | None, op: OperationStatus, now: datetime
) -> tuple[OperationStatus, list[Event]]:
    """Remove the grants the operation made (the producers write the source again); tried again
    on the next refresh while the target does not answer or refuses."""
    if target is None or op.producers is None:
        return op, []
    try:
        gone = target.revoke(moved_by(config.mirror)) if op.producers.count else set()
    except AclsRefused as refused:
        message = f"the producers' WRITE on the target not removed yet: {refused}"
        moved = op.producers.model_copy(update={"message": message})
        return op.model_copy(update={"producers": moved}), []
    except (KafkaException, TimeoutError):
        return op, []  # the next refresh tries again
    message = f"{len(gone)} WRITE bindings the {op.type.lower()} granted removed from the target"
    moved = op.producers.model_copy(update={"returned_at": now, "message": message})
    return op.model_copy(update={"producers": moved}), [
        Event("Normal", "ProducersReturned", message)
    ]
