"""A mirror declared with `spec.standbyFor` runs only while the mirror the other way is promoted
or failed over and not yet started again by a Return; its own operation takes over."""

from __future__ import annotations

import pytest
from kubernetes.client.exceptions import ApiException

from kafka_mirror.api.models import KafkaMirrorSpec
from kafka_mirror.api.operations import OperationStatus, ResumedBy
from kafka_mirror.api.status import Condition, KafkaMirrorStatus
from kafka_mirror.controller import operations
from kafka_mirror.controller.conditions import condition
from kafka_mirror.controller.resume import Forward
from kafka_mirror.controller.standby import standing_by
from tests.helpers.operations import NOW, FakeMirrors, failed_over, spec

REVERSE_SIDES = {
    "source": {"alias": "B", "bootstrapServers": "b:9092"},
    "target": {"alias": "A", "bootstrapServers": "a:9092"},
}


def reverse(
    operation: dict[str, str] | None = None, standby_for: str = "a-to-b"
) -> KafkaMirrorSpec:
    return spec(operation, **REVERSE_SIDES, standbyFor=standby_for)


def forward(operation: dict[str, str] | None, phase: str | None) -> Forward:
    record = None if phase is None else OperationStatus(id="op", type="Promote", phase=phase)
    return Forward(spec(operation), KafkaMirrorStatus(operation=record))


PROMOTE = {"type": "Promote", "id": "op"}


def resumed() -> Forward:
    """a-to-b, failed over and started again by b-to-a's Return back."""
    other = failed_over()
    assert other.status.operation is not None
    other.status.operation.resumed_by = ResumedBy(mirror="b-to-a", id="back", at=NOW)
    return other


@pytest.mark.parametrize(
    ("other", "waits_for"),
    [
        (None, "no KafkaMirror a-to-b here"),
        (forward(None, None), "until its Promote or Failover completes"),
        (forward(PROMOTE, None), "until its Promote or Failover completes"),
        (forward(PROMOTE, "CatchingUp"), "(Promote op: CatchingUp)"),
        (forward({"type": "Promote", "id": "newer"}, "Completed"), "completes"),  # older record
    ],
)
def test_it_stands_by_until_the_other_mirrors_promote_or_failover_completes(
    other: Forward | None, waits_for: str
) -> None:
    said = standing_by("b-to-a", reverse(), None, FakeMirrors(other))
    assert said is not None and said.startswith("standing by for a-to-b") and waits_for in said


@pytest.mark.parametrize("other", [forward(PROMOTE, "Completed"), failed_over()])
def test_it_runs_once_the_other_mirror_was_promoted_or_failed_over(other: Forward) -> None:
    assert standing_by("b-to-a", reverse(), None, FakeMirrors(other)) is None


def test_it_stands_by_again_once_a_return_started_the_other_mirror() -> None:
    said = standing_by("b-to-a", reverse(), None, FakeMirrors(resumed()))
    assert said == "standing by for a-to-b, which mirrors again since b-to-a's Return back"


def test_its_own_operation_takes_over_and_a_mirror_without_standby_runs() -> None:
    own = reverse({"type": "Return", "id": "back", "resume": "a-to-b"})
    assert standing_by("b-to-a", own, None, FakeMirrors(None)) is None
    assert standing_by("b-to-a", spec(**REVERSE_SIDES), None, FakeMirrors(None)) is None


def test_a_standby_for_itself_or_for_a_mirror_the_same_way_says_what_to_fix() -> None:
    itself = standing_by("a-to-b", reverse(standby_for="a-to-b"), None, FakeMirrors(None))
    assert itself == ("spec.standbyFor names this mirror: name the mirror that goes the other way")
    same_way = standing_by("x", spec(standbyFor="a-to-b"), None, FakeMirrors(failed_over()))
    assert same_way == "spec.standbyFor names a-to-b, which does not mirror the other way (B→A)"


class Failing(FakeMirrors):
    def read(self, name: str) -> Forward | None:
        raise ApiException(status=500, reason="etcd is slow")


def test_it_stands_by_while_the_other_mirror_cannot_be_read() -> None:
    said = standing_by("b-to-a", reverse(), None, Failing(None))
    assert said is not None and "a-to-b cannot be read" in said


RETURN = {"type": "Return", "id": "back", "resume": "a-to-b"}


def returned_record(phase: str = "Completed") -> OperationStatus:
    return OperationStatus(id="back", type="Return", phase=phase)


def test_a_completed_return_kept_in_the_files_stands_by_and_runs_in_the_next_cycle() -> None:
    """The operations stay in the repository: after the Return, b-to-a stands by while a-to-b
    mirrors; a-to-b's next Failover (a new id) completes and b-to-a runs, its old Return in its
    spec (B's writes are mirrored back); a Return in progress still takes over."""
    own = reverse(RETURN)
    after_return = standing_by("b-to-a", own, returned_record(), FakeMirrors(resumed()))
    assert after_return == "standing by for a-to-b, which mirrors again since b-to-a's Return back"
    assert not operations.stops_workers(own, returned_record())  # the standby pauses it
    assert standing_by("b-to-a", own, returned_record(), FakeMirrors(failed_over())) is None
    next_cycle = forward({"type": "Failover", "id": "op"}, "StoppingWorkers")
    said = standing_by("b-to-a", own, returned_record(), FakeMirrors(next_cycle))
    assert said is not None and "(Failover op: StoppingWorkers)" in said
    running = returned_record("CatchingUp")
    assert standing_by("b-to-a", own, running, FakeMirrors(resumed())) is None
    assert operations.stops_workers(own, returned_record("StoppingWorkers"))


def test_a_completed_return_on_a_mirror_without_standby_keeps_it_stopped() -> None:
    own = spec(RETURN, **REVERSE_SIDES)
    assert operations.stops_workers(own, returned_record())


def condition_of(status: KafkaMirrorStatus, kind: str) -> Condition:
    return next(c for c in status.conditions if c.type == kind)


def test_a_returned_standbys_ready_is_its_own_and_its_return_done() -> None:
    current = KafkaMirrorStatus(
        operation=returned_record(),
        conditions=[condition([], "Ready", False, "Standby", "standing by for a-to-b", 1, NOW)],
    )
    completing = current.model_copy(deep=True)
    operations.with_operation(completing, reverse(RETURN), KafkaMirrorStatus(), NOW)
    assert condition_of(completing, "Ready").reason == "Returned"  # the refresh it completed in
    previous = KafkaMirrorStatus(operation=returned_record())
    operations.with_operation(current, reverse(RETURN), previous, NOW)
    by_type = {c.type: c for c in current.conditions}
    assert (by_type["Ready"].status, by_type["Ready"].reason) == ("False", "Standby")
    assert (by_type["OperationDone"].status, by_type["OperationDone"].reason) == (
        "True",
        "Returned",
    )
