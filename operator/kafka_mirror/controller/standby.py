"""A mirror declared beside its opposite (`spec.standbyFor`), stopped until it is needed.

The reverse mirror of a failback (B→A) has nothing to copy until applications move to B, and
copying before would be wrong: it must start when the forward mirror (A→B) stops. So it is
declared with the forward mirror and stands by: no workers until the forward mirror's Promote or
Failover completes, and again once the reverse mirror's own Return has started the forward
mirror again. A planned switchover is then one change (the Promote), and the whole cycle runs
from a GitOps repository that holds both mirrors, whatever order they are applied in.

An operation of the mirror's own (its Return) takes over from the standby: the Return's
catch-up needs the workers, and its end stops them.
"""

from __future__ import annotations

from kubernetes.client.exceptions import ApiException

from kafka_mirror.api.models import KafkaMirrorSpec
from kafka_mirror.api.operations import record_of
from kafka_mirror.controller.resume import Mirrors


def standing_by(name: str, spec: KafkaMirrorSpec, mirrors: Mirrors) -> str | None:
    """Why the mirror stands by, or None when it runs."""
    other = spec.standby_for
    if other is None or spec.operation is not None:
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
