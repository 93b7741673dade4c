"""A mirror declared beside its opposite (`spec.standbyFor`), stopped until it is needed.

The reverse mirror of a failback (B→A) has nothing to copy until applications move to B, and
copying before would be wrong: it must start when the forward mirror (A→B) stops. So it is
declared with the forward mirror and stands by: no workers until the forward mirror's Promote or
Failover completes, and again once the reverse mirror's own Return has started the forward
mirror again. A planned switchover is then one change (the Promote), and the whole cycle runs
from a GitOps repository that holds both mirrors, whatever order they are applied in.

An operation of the mirror's own (its Return) takes over from the standby while it runs: the
Return's catch-up needs the workers. Once it completed, the standby decides again: the mirror
stands by while the forward mirror mirrors, and runs once that mirror's next Promote or Failover
completes. So the operations can stay in the repository's files: the next DR cycle changes only
their ids, and the Return of the last cycle does not keep the reverse mirror stopped in this one.
"""

from __future__ import annotations

from kubernetes.client.exceptions import ApiException

from kafka_mirror.api.models import KafkaMirrorSpec
from kafka_mirror.api.operations import OperationStatus, record_of
from kafka_mirror.controller.resume import Mirrors


def returned(spec: KafkaMirrorSpec, record: OperationStatus | None) -> bool:
    """Whether the mirror stands by for another and its own operation is a completed Return:
    the standby, not the Return, says whether it runs."""
    done = record_of(spec.operation, record)
    return (
        spec.standby_for is not None
        and done is not None
        and done.type == "Return"
        and done.phase == "Completed"
    )


def standing_by(
    name: str, spec: KafkaMirrorSpec, record: OperationStatus | None, mirrors: Mirrors
) -> str | None:
    """Why the mirror stands by, or None when it runs. `record` is its own operation's status."""
    other = spec.standby_for
    if other is None or (spec.operation is not None and not returned(spec, record)):
        return None
    waiting = f"standing by for {other}: no workers until its Promote or Failover completes"
    if other == name:
        return "spec.standbyFor names this mirror: name the mirror that goes the other way"
    try:
        forward = mirrors.read(other)
    except (ValueError, ApiException) as error:  # its spec unusable, or the API server failing
        return f"{waiting} ({other} cannot be read: {str(error)[:200]})"
    if forward is None:
        return f"{waiting} (no KafkaMirror {other} here)"
    way = f"{forward.spec.target.alias}→{forward.spec.source.alias}"
    if way != f"{spec.source.alias}→{spec.target.alias}":
        return f"spec.standbyFor names {other}, which does not mirror the other way ({way})"
    requested = forward.spec.operation
    record = record_of(requested, forward.status.operation)
    if requested is None or requested.type == "Return" or record is None:
        return waiting
    if record.phase != "Completed":
        return f"{waiting} ({requested.type} {requested.id}: {record.phase})"
    if record.resumed_by is not None:
        by = record.resumed_by
        return f"standing by for {other}, which mirrors again since {by.mirror}'s Return {by.id}"
    return None
