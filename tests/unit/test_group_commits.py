"""Committing to a group on the target (`kafka/groups.py`): which answers of the coordinator
are a refusal the hand-over reports, which are worth asking again, which mean members. The
coordinator here is a stand-in answering as Kafka's does; `tests/integration/test_groups.py`
asks the real one."""

from __future__ import annotations

import pytest
from confluent_kafka import ConsumerGroupState, KafkaError, KafkaException

from kafka_mirror.kafka.client import ClusterUnavailable, Position
from kafka_mirror.kafka.groups import commit_to_idle_group

WANTED: dict[Position, int] = {("t.A", 0): 7, ("t.A", 1): 9}


class Coordinator:
    """Answers with `describe_error` or `commit_error` raised, or `refused` partitions."""

    def __init__(
        self,
        describe_error: KafkaException | None = None,
        commit_error: KafkaException | None = None,
        refused: dict[Position, str] | None = None,
    ) -> None:
        self.describe_error, self.commit_error = describe_error, commit_error
        self.refused = refused or {}
        self.commits: list[dict[Position, int]] = []

    def describe(self, group: str) -> tuple[ConsumerGroupState, set[str]]:
        if self.describe_error is not None:
            raise self.describe_error
        return ConsumerGroupState.EMPTY, set()

    def committed(self, group: str) -> dict[Position, object]:
        return {}

    def commit(self, group: str, offsets: dict[Position, int]) -> dict[Position, str]:
        self.commits.append(offsets)
        if self.commit_error is not None:
            raise self.commit_error
        return dict(self.refused)


def kafka_error(code: int) -> KafkaException:
    return KafkaException(KafkaError(code))


def test_a_group_the_cluster_does_not_know_is_idle_and_committed_to() -> None:
    coordinator = Coordinator(describe_error=kafka_error(KafkaError.GROUP_ID_NOT_FOUND))
    committed = commit_to_idle_group(coordinator, "g", WANTED, exact=True)  # type: ignore[arg-type]
    assert committed.skipped is None and committed.offsets == WANTED


@pytest.mark.parametrize(
    "error",
    [
        kafka_error(KafkaError.COORDINATOR_NOT_AVAILABLE),
        kafka_error(KafkaError.NOT_COORDINATOR),
        kafka_error(KafkaError._TIMED_OUT),
        ClusterUnavailable("KafkaError", "the process asking the group's coordinator ended"),
    ],
)
@pytest.mark.parametrize("where", ["describe", "commit"])
def test_an_error_worth_asking_again_raises_and_is_no_answer_about_the_group(
    error: KafkaException, where: str
) -> None:
    """Taken for "no members" (as a describe error was), a hand-over would commit under a
    running application; taken for "members", it would skip a group that had none."""
    coordinator = Coordinator(**{f"{where}_error": error})
    with pytest.raises(KafkaException):
        commit_to_idle_group(coordinator, "g", WANTED, exact=True)  # type: ignore[arg-type]


def test_a_member_that_joined_between_the_look_and_the_commit_makes_the_group_active() -> None:
    coordinator = Coordinator(commit_error=kafka_error(KafkaError.UNKNOWN_MEMBER_ID))
    committed = commit_to_idle_group(coordinator, "g", WANTED, exact=True)  # type: ignore[arg-type]
    assert committed.active and committed.skipped == "members on the target"


def test_a_refusal_of_the_whole_request_refuses_every_partition_with_kafkas_reason() -> None:
    coordinator = Coordinator(commit_error=kafka_error(KafkaError.GROUP_AUTHORIZATION_FAILED))
    committed = commit_to_idle_group(coordinator, "g", WANTED, exact=True)  # type: ignore[arg-type]
    assert set(committed.refused) == set(WANTED) and committed.offsets == {}
    assert committed.skipped is not None
    assert committed.skipped.startswith("the target refused t.A[0] and 1 more: ")
    assert "GROUP_AUTHORIZATION_FAILED" in committed.skipped


def test_a_partition_the_target_refuses_is_not_counted_as_committed() -> None:
    coordinator = Coordinator(refused={("t.A", 1): "UNKNOWN_MEMBER_ID"})
    committed = commit_to_idle_group(coordinator, "g", WANTED, exact=True)  # type: ignore[arg-type]
    assert committed.offsets == {("t.A", 0): 7}
    assert committed.skipped == "the target refused t.A[1]: UNKNOWN_MEMBER_ID"
