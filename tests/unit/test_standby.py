"""A mirror declared with `spec.standbyFor` runs only while the mirror the other way is promoted
or failed over and not yet started again by a Return; its own operation takes over."""

from __future__ import annotations

import pytest
from kubernetes.client.exceptions import ApiException

from kafka_mirror.api.models import KafkaMirrorSpec
from kafka_mirror.api.operations import OperationStatus, ResumedBy
from kafka_mirror.api.status import KafkaMirrorStatus
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
    said = standing_by("b-to-a", reverse(), FakeMirrors(other))
    assert said is not None and said.startswith("standing by for a-to-b") and waits_for in said


@pytest.mark.parametrize("other", [forward(PROMOTE, "Completed"), failed_over()])
def test_it_runs_once_the_other_mirror_was_promoted_or_failed_over(other: Forward) -> None:
    assert standing_by("b-to-a", reverse(), FakeMirrors(other)) is None


def test_it_stands_by_again_once_a_return_started_the_other_mirror() -> None:
    other = failed_over()
    assert other.status.operation is not None
    other.status.operation.resumed_by = ResumedBy(mirror="b-to-a", id="back", at=NOW)
    said = standing_by("b-to-a", reverse(), FakeMirrors(other))
    assert said == "standing by for a-to-b, which mirrors again since b-to-a's Return back"


def test_its_own_operation_takes_over_and_a_mirror_without_standby_runs() -> None:
    own = reverse({"type": "Return", "id": "back", "resume": "a-to-b"})
    assert standing_by("b-to-a", own, FakeMirrors(None)) is None
    assert standing_by("b-to-a", spec(**REVERSE_SIDES), FakeMirrors(None)) is None


def test_a_standby_for_itself_or_for_a_mirror_the_same_way_says_what_to_fix() -> None:
    itself = standing_by("a-to-b", reverse(standby_for="a-to-b"), FakeMirrors(None))
    assert itself == ("spec.standbyFor names this mirror: name the mirror that goes the other way")
    same_way = standing_by("x", spec(standbyFor="a-to-b"), FakeMirrors(failed_over()))
    assert same_way == "spec.standbyFor names a-to-b, which does not mirror the other way (B→A)"


class Failing(FakeMirrors):
    def read(self, name: str) -> Forward | None:
        raise ApiException(status=500, reason="etcd is slow")


def test_it_stands_by_while_the_other_mirror_cannot_be_read() -> None:
    said = standing_by("b-to-a", reverse(), Failing(None))
    assert said is not None and "a-to-b cannot be read" in said
