"""Status conditions, and the two that GitOps tools read.

kstatus (cli-utils' `pkg/kstatus`, which Flux's `wait` and health checks use, and which Argo CD's
generic health follows) does not read `Ready`. For a custom resource it reads only
`status.observedGeneration` and two "abnormal-true" conditions: `Reconciling` True means in
progress, `Stalled` True means failed, both absent or False means current. So each status also
carries those two, derived from Ready: `Stalled` for what only a person can fix (a spec the
operator cannot or may not use, refused credentials), `Reconciling` for what time may fix (workers
starting, a cluster not reachable yet), neither where the spec asks for what is (paused, a
standby, no replicas).
"""

from __future__ import annotations

from datetime import datetime

from kafka_mirror.api.status import Condition

# Ready reasons (a cluster's own carry `Source` or `Target` in front) that wait for a person.
NEEDS_A_PERSON = (
    "InvalidSpec",
    "NotAllowed",
    "ChildNameTaken",
    "AuthenticationFailed",
    "InvalidClientConfig",
    "InvalidPattern",
    "NotGranted",
    "TransactionsUnsupported",
)
AS_ASKED = ("Paused", "Standby", "NoWorkers")  # not ready, because the spec says so


def condition(
    previous: list[Condition],
    type_: str,
    status: bool | None,
    reason: str,
    message: str,
    generation: int | None,
    now: datetime,
) -> Condition:
    """A condition; its transition time is kept from `previous` while the status holds."""
    value = "Unknown" if status is None else ("True" if status else "False")
    before = next((c for c in previous if c.type == type_), None)
    since = before.last_transition_time if before and before.status == value else None
    return Condition(
        type=type_,
        status=value,
        reason=reason,
        message=message,
        last_transition_time=since or now,
        observed_generation=generation,
    )


def progress_conditions(
    ready: Condition, previous: list[Condition], generation: int | None, now: datetime
) -> list[Condition]:
    """`Reconciling` and `Stalled`, kstatus' reading of `ready` (see the module)."""
    stalled = ready.status != "True" and ready.reason.endswith(NEEDS_A_PERSON)
    reconciling = ready.status != "True" and not stalled and ready.reason not in AS_ASKED
    return [
        condition(
            previous,
            "Reconciling",
            reconciling,
            ready.reason if reconciling else "Settled",
            ready.message if reconciling else "nothing in progress",
            generation,
            now,
        ),
        condition(
            previous,
            "Stalled",
            stalled,
            ready.reason if stalled else "NotStalled",
            ready.message if stalled else "nothing waits for a person",
            generation,
            now,
        ),
    ]
