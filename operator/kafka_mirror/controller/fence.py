"""A promote's fence on the source: nothing written there after the final drain is left behind.

A planned switchover drains A→B to lag 0, but a producer the runbook forgot keeps writing to A,
and what it writes after the drain stays on A. So before the drain, a fenced Promote denies
WRITE on the selected topics to `User:*` (literal bindings, each recorded as the fence's in
Kafka before it is made, and listed in the operation's status, which is what a lift deletes),
waits for the deny to reach every broker, then checks that the topics' ends stand still for
FENCE_SETTLE: a record written past the deny (a super user, whom no ACL binds; an authorizer
that is off) lifts the fence and fails the operation, naming the topics and the records. A
transaction marker moves an end too and is no write: only data records count. The mirror reads
A and writes nothing to its selected topics there, so the deny does not stop it. The fence
stays after the promote and is lifted once the reverse mirror's Return has started the mirror
again, when the applications come back to A. Confluent's cluster-link cutover fences, verifies
and rolls back the same way.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from confluent_kafka import KafkaException

from kafka_mirror.api.models import KafkaMirrorSpec
from kafka_mirror.api.operations import MirrorOperation, OperationStatus, SourceFence
from kafka_mirror.api.worker_config import WorkerConfig
from kafka_mirror.controller.operation_kafka import Cluster
from kafka_mirror.controller.status import Event
from kafka_mirror.kafka.acl_grants import AclsRefused, Grant, NoAuthorizer, fenced_by
from kafka_mirror.kafka.client import Position

# A new binding reaching every broker, and produce requests authorized before it landing.
FENCE_SPREAD = timedelta(seconds=3)
FENCE_SETTLE = timedelta(seconds=10)  # the ends stand still this long, or the fence fails
MAX_SHOWN = 3
# The ends are kept in the status, about 8 bytes each: far below the API server's object limit.
MAX_PARTITIONS = 20_000
# Topics selected while it is placed widen it, and its check starts again: at most this often,
# or topics created faster than it can check them would hold the switchover in Fencing.
MAX_WIDENINGS = 5


def wanted(spec: KafkaMirrorSpec, requested: MirrorOperation) -> bool:
    """Whether the operation fences its source: asked, or by default in a switchover (the
    mirror names its way back). Under identity naming the way back writes the same topics on
    the source, which a fence would deny it, so it is not fenced unless asked."""
    if requested.type != "Promote":
        return False
    if requested.fence is not None:
        return requested.fence
    return spec.reverse is not None and spec.topic_naming.policy != "identity"


def denies(topics: list[str]) -> set[Grant]:
    return {Grant("TOPIC", t, "User:*", "*", "WRITE", "DENY") for t in topics}


def step(
    config: WorkerConfig,
    op: OperationStatus,
    source: Cluster | None,
    mirrored: dict[str, str] | None,
    now: datetime,
) -> None:
    """Move the fencing on by one step: place the denies, read the ends once they hold
    everywhere, then after FENCE_SETTLE go on to the drain, or lift the fence and fail."""
    if mirrored is None or source is None:
        op.message = "the source cannot be read: a fenced promote fences it first"
        return
    fence = op.fence
    if fence is None:
        _place(config, op, source, sorted(mirrored), now)
    elif fence.checked_from is None:
        if fence.placed_at is None or now >= fence.placed_at + FENCE_SPREAD:
            ends = _by_topic(source.end_offsets(sorted(mirrored)))
            if (count := sum(len(e) for e in ends.values())) > MAX_PARTITIONS:
                failed(
                    op,
                    f"{count} partitions to fence, more than the {MAX_PARTITIONS} one promote "
                    "checks: fence the producers by hand and promote with fence: false",
                    now,
                )
                lift(config, source, op, now)
                return
            # A topic read before and gone now was deleted: the deny hides only those it was
            # placed on since the last reading.
            if hidden := sorted(set(fence.topics) - set(fence.ends) - set(ends)):
                _hid(config, op, source, hidden, now)
                return
            fence.ends, fence.checked_from = ends, now
            until = now + FENCE_SETTLE
            op.message = f"{_what(fence)}: checking its ends stand until {until:%T}"
    elif late := sorted(set(mirrored) - set(fence.ends)):
        _widen(config, op, source, late, now)
    else:
        written = source.records_written(_positions(fence.ends))
        if written:
            _fail(config, op, source, written, now)
        elif now >= fence.checked_from + FENCE_SETTLE:
            fence.holds_since = now
            seconds = FENCE_SETTLE.total_seconds()
            fence.message = f"{_what(fence)}: nothing written for {seconds:.0f} s" + (
                "" if fence.authorizer else " (no authorizer: nothing is denied)"
            )
            op.phase, op.message = "CatchingUp", fence.message


def _place(
    config: WorkerConfig, op: OperationStatus, source: Cluster, topics: list[str], now: datetime
) -> None:
    if config.topic_naming.policy == "identity":
        op.fence = SourceFence(placed_at=now)
        failed(
            op,
            "a fence would deny the way back its writes: under identity naming it writes these "
            "same topics on the source; stop the producers, then promote with fence: false",
            now,
        )
        return
    try:
        denied = _deny(config, source, op.id, topics)
    except NoAuthorizer:
        op.fence = SourceFence(authorizer=False, placed_at=now)
        op.message = "the source has no authorizer: nothing can be denied, its ends are checked"
        return
    except AclsRefused as refused:
        op.fence = SourceFence(placed_at=now)
        failed(op, f"the fence could not be placed: {refused}; or promote with fence: false", now)
        return
    op.fence = SourceFence(topics=denied, placed_at=now, owner_id=op.id)
    op.message = (
        f"WRITE denied on {len(topics)} topics of the source; waiting "
        f"{FENCE_SPREAD.total_seconds():.0f} s for every broker to hold it"
    )


def _deny(config: WorkerConfig, source: Cluster, owner_id: str, topics: list[str]) -> list[str]:
    """The topics of these whose deny is the fence's: made now, or recorded by an earlier pass
    cut short."""
    owner = fenced_by(config.mirror, owner_id)
    created = source.grant(owner, denies(topics))
    return sorted(g.name for g in created | (source.recorded_grants(owner) & denies(topics)))


def _widen(
    config: WorkerConfig, op: OperationStatus, source: Cluster, late: list[str], now: datetime
) -> None:
    """Topics selected since the fence was placed (created on the source, or a selection
    widened): denied too, and the check starts again, from the spread."""
    fence = op.fence
    assert fence is not None
    shown = ", ".join(late[:MAX_SHOWN])
    if fence.widenings >= MAX_WIDENINGS:
        failed(
            op,
            f"topics are selected on the source faster than its fence can check them (the "
            f"latest: {shown}): nothing was promoted, the mirror goes on; stop what creates "
            "them, then ask again with a new id",
            now,
        )
        lift(config, source, op, now)
        return
    if fence.authorizer:
        try:
            denied = _deny(config, source, fence.owner_id or op.id, late)
        except (AclsRefused, NoAuthorizer) as refused:
            failed(op, f"the fence could not be widened: {refused}; ask again with a new id", now)
            lift(config, source, op, now)
            return
        fence.topics = sorted(set(fence.topics) | set(denied))
    fence.widenings += 1
    fence.placed_at, fence.checked_from = now, None
    op.message = (
        f"{len(late)} topics selected since the fence was placed ({shown}): "
        + ("fenced too" if fence.authorizer else "their ends checked too")
        + f", checking again ({fence.widenings} of at most {MAX_WIDENINGS} times)"
    )


def widened(
    config: WorkerConfig,
    op: OperationStatus,
    source: Cluster,
    mirrored: dict[str, str],
    now: datetime,
) -> bool:
    """During the drain, with the workers still running: whether topics were selected since the
    fence held; if so they are fenced too, and the operation is back to fencing."""
    fence = op.fence
    if fence is None or fence.holds_since is None:
        return False
    if not (late := sorted(set(mirrored) - set(fence.ends))):
        return False
    op.phase, fence.holds_since, op.catch_up = "Fencing", None, None
    _widen(config, op, source, late, now)
    return True


def widened_after(
    config: WorkerConfig,
    op: OperationStatus,
    source: Cluster | None,
    mirrored: dict[str, str] | None,
    now: datetime,
) -> list[Event]:
    """After the hand-over, while A stays fenced and no worker runs: topics selected since (a
    forgotten producer creating one, a selection widened) are denied too, and what they hold,
    which nothing mirrored, is said. Changes `op` in place."""
    fence = op.fence
    if fence is None or fence.lifted_at is not None or source is None or mirrored is None:
        return []
    if not (late := sorted(set(mirrored) - set(fence.ends))):
        return []
    ends = _by_topic(source.end_offsets(late))
    if fence.authorizer:
        try:
            fence.topics = sorted(
                set(fence.topics) | set(_deny(config, source, fence.owner_id or op.id, late))
            )
        except (AclsRefused, NoAuthorizer) as refused:
            fence.message = f"{len(late)} topics selected since the hand-over not fenced: {refused}"
            return []
    fence.ends.update({t: ends.get(t, []) for t in late})
    records = sum(sum(e) for e in ends.values())
    fence.message = (
        f"{len(late)} topics selected since the hand-over ({', '.join(late[:MAX_SHOWN])}) "
        + ("fenced too" if fence.authorizer else "not fenced (no authorizer)")
        + f": the {records} records they hold on the source were not mirrored"
    )
    return [Event("Warning", "FenceWidened", fence.message)]


def holds_back(
    config: WorkerConfig,
    op: OperationStatus,
    source: Cluster | None,
    mirrored: dict[str, str] | None,
    now: datetime,
) -> bool:
    """Once the workers stopped, before anything is handed over: whether the hand-over must
    wait, because the fence cannot be checked (the source unreadable: the message says so), or
    must not happen, because the fence was passed after its check, by a record written (a super
    user, a source without an authorizer) or by a topic selected since (unfenced: what is
    written there now stays on the source); then the operation fails and the fence is lifted.
    A Failover that carries the fence on hands over unchecked: its source is lost."""
    fence = op.fence
    if fence is None or fence.holds_since is None or op.type != "Promote":
        return False
    unread = "workers stopped; the fence's last check waits for the source, which cannot be read"
    if source is None or mirrored is None:
        op.message = f"{unread} (a Failover hands over without it)"
        return True
    if late := sorted(set(mirrored) - set(fence.ends)):
        failed(
            op,
            f"{len(late)} topics selected since the fence was checked are not fenced "
            f"({', '.join(late[:MAX_SHOWN])}): what is written there now stays on the source; "
            "nothing was promoted, the mirror goes on; ask again with a new id (its fence "
            "covers them)",
            now,
        )
        lift(config, source, op, now)
        return True
    try:
        written = source.records_written(_positions(fence.ends))
    except (KafkaException, TimeoutError) as error:
        op.message = f"{unread} ({error}; a Failover hands over without it)"
        return True
    if written:
        _fail(config, op, source, written, now)
    return bool(written)


def left_behind(requested: MirrorOperation | None, previous: OperationStatus | None) -> bool:
    """Whether `previous` holds a fence not lifted of an operation no longer asked for (the
    operation removed from the spec, or another id asked)."""
    if previous is None or previous.fence is None or previous.fence.lifted_at is not None:
        return False
    if not previous.fence.topics:
        return False
    return requested is None or requested.id != previous.id


def lift_left_behind(
    config: WorkerConfig,
    source: Cluster | None,
    requested: MirrorOperation | None,
    previous: OperationStatus | None,
    now: datetime,
) -> tuple[OperationStatus | None, list[Event], bool]:
    """The last operation's record, its fence lifted first if no operation asks for it any
    more, unless a Failover carries it on (its source is lost: A stays fenced until the
    Return); the lift's event; and whether the lift is still to do (nothing else runs)."""
    carried = requested is not None and requested.type == "Failover"
    if previous is None or carried or not left_behind(requested, previous):
        return previous, [], False
    record = previous.model_copy(deep=True)
    lifted = lift(config, source, record, now)
    return record, lifted, not lifted


def _fail(
    config: WorkerConfig,
    op: OperationStatus,
    source: Cluster,
    written: dict[str, int],
    now: datetime,
) -> None:
    shown = ", ".join(f"{t} {n}" for t, n in sorted(written.items())[:MAX_SHOWN])
    why = (
        "a principal no ACL binds (a super user) writes there"
        if op.fence is not None and op.fence.authorizer
        else "the source has no authorizer"
    )
    failed(
        op,
        f"{sum(written.values())} records written to the source after its fence ({shown}): "
        f"{why}; nothing was promoted, the mirror goes on; stop those producers and ask again "
        "with a new id",
        now,
    )
    lift(config, source, op, now)


def _hid(
    config: WorkerConfig, op: OperationStatus, source: Cluster, hidden: list[str], now: datetime
) -> None:
    """The deny took topics from the mirror: a topic no ACL names is open to every principal
    on a source that allows what no ACL names (`allow.everyone.if.no.acl.found`), and the first
    ACL on it, the deny, closes it to all."""
    shown = ", ".join(hidden[:MAX_SHOWN])
    failed(
        op,
        f"the fence hid {len(hidden)} topics from the mirror ({shown}): the source allows "
        "every principal what no ACL names, and they have none; give them ACLs for their "
        "applications (and the mirror's READ, DESCRIBE), or promote with fence: false",
        now,
    )
    lift(config, source, op, now)


def failed(op: OperationStatus, message: str, now: datetime) -> None:
    op.phase, op.completed_at, op.message = "Failed", now, message


def _what(fence: SourceFence) -> str:
    if not fence.authorizer:
        return f"the source unfenced ({len(fence.ends)} topics checked)"
    return f"the source fenced ({len(fence.topics)} topics denied, {len(fence.ends)} checked)"


def _by_topic(ends: dict[Position, int]) -> dict[str, list[int]]:
    topics: dict[str, list[int]] = {}
    for (topic, partition), end in sorted(ends.items()):
        listed = topics.setdefault(topic, [])
        listed.extend([0] * (partition + 1 - len(listed)))
        listed[partition] = end
    return topics


def _positions(ends: dict[str, list[int]]) -> dict[Position, int]:
    return {(t, p): end for t, listed in ends.items() for p, end in enumerate(listed)}


def to_lift(op: OperationStatus) -> bool:
    """Whether the fence's denies are still to delete: the operation failed, or the reverse
    mirror's Return started the mirror again."""
    fence = op.fence
    if fence is None or fence.lifted_at is not None or not fence.topics:
        return False
    return op.phase == "Failed" or op.resumed_by is not None


def lift(
    config: WorkerConfig, source: Cluster | None, op: OperationStatus, now: datetime
) -> list[Event]:
    """Delete the denies the fence lists (tried again on the next refresh while the source
    does not answer or refuses) and say so."""
    fence = op.fence
    if source is None or fence is None:
        return []
    owner = fenced_by(config.mirror, fence.owner_id or op.id)
    try:
        # Those recorded too: a widening cut short made some it did not list.
        source.revoke(owner, denies(fence.topics) | source.recorded_grants(owner))
    except AclsRefused as refused:
        fence.message = f"the fence not lifted yet: {refused}"
        return []
    except (KafkaException, TimeoutError) as error:
        fence.message = f"the fence not lifted yet: the source did not answer ({error})"
        return []
    fence.lifted_at = now
    fence.message = f"the fence lifted: WRITE allowed again on {len(fence.topics)} topics"
    return [Event("Normal", "FenceLifted", fence.message)]
