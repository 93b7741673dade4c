"""A partition waiting for its schema says so in its commit note, and the operator reads the
note back into the mirror's `SchemasSynced` condition (issue 62)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from kafka_mirror.controller.status import SCHEMA_WAIT_REASONS
from kafka_mirror.kafka.formats import SchemaWaitState, read_schema_wait, schema_wait_reason
from kafka_mirror.kafka.observe import PartitionProgress
from kafka_mirror.worker.flows import Stop
from tests.unit.test_status import get, kafka_state, observation, status_of

TOPIC_NAMES = st.text("abcXYZ019._-", min_size=1, max_size=249)
STATES: st.SearchStrategy[SchemaWaitState] = st.sampled_from(["pending", "unreachable", "refused"])


@given(TOPIC_NAMES, st.integers(0, 2**31), st.integers(1, 2**31 - 1), STATES, st.text())
def test_a_schema_wait_reads_back_from_what_the_partition_commits(
    topic: str, offset: int, schema_id: int, state: SchemaWaitState, why: str
) -> None:
    note = Stop(offset, schema_wait_reason(schema_id, state, why), 0.0).describe(topic, 3)
    assert read_schema_wait(note) == (schema_id, state)


@given(TOPIC_NAMES, st.text())
def test_no_other_stop_reads_as_a_schema_wait(topic: str, reason: str) -> None:
    """Not even one whose words name a schema after the partition's own reason."""
    note = Stop(5, f"the producer refused it: {reason}", 0.0).describe(topic, 0)
    assert read_schema_wait(note) is None
    said = Stop(5, "too large: waits for schema id 3 (refused): no", 0.0).describe(topic, 0)
    assert read_schema_wait(said) is None


def waiting(partition: int, schema_id: int, state: SchemaWaitState) -> PartitionProgress:
    reason = schema_wait_reason(schema_id, state, f"why {state}")
    note = Stop(10, reason, 0.0).describe("orders", partition)
    return PartitionProgress("orders", partition, 0, 20, 10, problem=note)


def test_the_condition_is_there_only_with_a_schema_registry() -> None:
    assert all(c.type != "SchemasSynced" for c in status_of(observation()).conditions)
    synced = get(status_of(observation(schema_registry=True)).conditions, "SchemasSynced")
    assert (synced.status, synced.reason) == ("True", "NoneWaiting")


def test_the_worst_wait_names_the_condition_and_the_message_counts_them() -> None:
    progress = [waiting(0, 7, "pending"), waiting(1, 8, "unreachable")]
    unreachable = status_of(observation(schema_registry=True, kafka=kafka_state(progress=progress)))
    condition = get(unreachable.conditions, "SchemasSynced")
    assert (condition.status, condition.reason) == ("False", "RegistryUnreachable")
    assert condition.message.startswith("2 partitions wait for schema ids 7, 8: stopped at")
    assert "why unreachable" in condition.message

    progress.append(waiting(2, 9, "refused"))
    refused = status_of(observation(schema_registry=True, kafka=kafka_state(progress=progress)))
    condition = get(refused.conditions, "SchemasSynced")
    assert condition.reason == SCHEMA_WAIT_REASONS["refused"] == "SchemaRefused"
    assert "why refused" in condition.message
    # The partitions are Degraded's too, as any partition that does not flow.
    assert get(refused.conditions, "Degraded").status == "True"


def test_unread_offsets_say_unknown_not_synced() -> None:
    unknown = status_of(observation(schema_registry=True, kafka=None))
    condition = get(unknown.conditions, "SchemasSynced")
    assert (condition.status, condition.reason) == ("Unknown", "NotObserved")
