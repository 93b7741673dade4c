"""Drills of the hand-overs in the states where they are hardest, on the real node with the real
operator, judged from Kafka: a Promote whose group sits on an empty partition, past an aborted
transaction and at the edge of one still open on the source; a Failover after the group was
rewound on A, with its offsets on B synced forward before the rewind."""

from __future__ import annotations

import re

import pytest
from confluent_kafka import IsolationLevel, TopicPartition
from confluent_kafka.admin import OffsetSpec
from kubernetes import client

from kafka_mirror.kube import apply
from tests.helpers.dr import application, operation_of, patch_spec
from tests.helpers.failover import newest_checkpoints
from tests.helpers.kafka import (
    Record,
    admin_for,
    create_topics,
    end_offsets,
    open_transaction,
    produce,
    unique,
)
from tests.helpers.node import NodeStack
from tests.helpers.objects import mirror, selection
from tests.helpers.worker import commit_group, group_offsets, read_partition, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.kube, pytest.mark.node]


def tagged(tag: str, count: int, partitions: tuple[int, ...]) -> list[Record]:
    return [
        Record(key=f"{tag}-{i}".encode(), value=f"{tag}-{i}".encode(), partition=partitions[i % 2])
        for i in range(count)
    ]


def start_mirror(stack: NodeStack, topic: str, **spec: object) -> None:
    source = {"bootstrapServers": stack.kafka_a.bootstrap_servers}
    target = {"bootstrapServers": stack.kafka_b.bootstrap_servers}
    apply(stack.api, mirror("a-to-b", stack.namespace, source, target, **spec))
    apply(stack.api, selection("app-topics", stack.namespace, "a-to-b", [re.escape(topic)]))


def completed(stack: NodeStack, kind: str) -> None:
    def done() -> bool:
        return operation_of(stack.api, stack.namespace).get("phase") == "Completed"

    wait_for(
        done, 240, lambda: f"the {kind} to complete: {operation_of(stack.api, stack.namespace)}"
    )


def test_a_promote_with_an_empty_partition_and_an_aborted_and_an_open_transaction_completes(
    node_stack: NodeStack,
) -> None:
    a, b = node_stack.kafka_a, node_stack.kafka_b
    topic, app = unique("idle-"), unique("app-")
    remote = f"{topic}.A"
    create_topics(a.bootstrap_servers, [topic], partitions=3)
    produce(a.bootstrap_servers, topic, tagged("kept", 600, (0, 1)))  # partition 2 stays empty
    aborted = open_transaction(a.bootstrap_servers, topic, 0, 50)
    aborted.abort_transaction(30)
    produce(a.bootstrap_servers, topic, tagged("after", 100, (0, 0)))
    still_open = open_transaction(a.bootstrap_servers, topic, 1, 20)
    try:
        start_mirror(node_stack, topic)
        # A Java consumer at the end commits every assigned partition: past the aborted records
        # and the marker on 0, where read_committed stops on 1, and 0 on the empty 2.
        stable = admin_for(a.bootstrap_servers).list_offsets(
            {TopicPartition(topic, p): OffsetSpec.latest() for p in range(3)},  # type: ignore[no-untyped-call]
            isolation_level=IsolationLevel.READ_COMMITTED,
        )
        at = {tp.partition: f.result(timeout=10).offset for tp, f in stable.items()}
        assert at[2] == 0 and at[1] == 300 and at[0] == 300 + 50 + 1 + 100, at
        commit_group(a, app, topic, at)

        patch_spec(
            node_stack.api,
            node_stack.namespace,
            "a-to-b",
            {"operation": {"type": "Promote", "id": "p-idle"}},
        )
        completed(node_stack, "promote")

        # Every committed record is on B once; nothing of either transaction.
        on_b = [r.value for p in range(3) for r in read_partition(b, remote, p, 0)]
        expected = [r.value for r in tagged("kept", 600, (0, 1)) + tagged("after", 100, (0, 0))]
        assert set(on_b) == set(expected) and len(on_b) >= len(expected)
        # The group resumes on B at the end of the copies, and at 0 on the empty partition.
        copies = end_offsets(b.bootstrap_servers, remote)
        assert copies[2] == 0, copies
        assert group_offsets(b, app) == {(remote, p): copies[p] for p in range(3)}
        # The hand-over named what the open transaction leaves on A, and how long it has been open.
        events = client.CoreV1Api(node_stack.api).list_namespaced_event(node_stack.namespace).items
        said = [e.message or "" for e in events if e.involved_object.name == "a-to-b"]
        assert any(
            f"records in or after open transactions on the source ({topic}[1] 20, open for" in m
            for m in said
        ), said
    finally:
        still_open.abort_transaction(30)


def test_a_group_rewound_on_a_resumes_on_b_at_the_rewound_position_after_a_failover(
    node_stack: NodeStack,
) -> None:
    a, b = node_stack.kafka_a, node_stack.kafka_b
    topic, app = unique("rewound-"), unique("app-")
    remote = f"{topic}.A"
    create_topics(a.bootstrap_servers, [topic], partitions=2)
    produce(a.bootstrap_servers, topic, tagged("r", 2_000, (0, 1)))
    start_mirror(node_stack, topic, checkpoints={"intervalSeconds": 1, "syncGroupOffsets": True})
    forward, back = dict.fromkeys(range(2), 800), dict.fromkeys(range(2), 200)
    commit_group(a, app, topic, forward)

    def synced_to(at: dict[int, int]) -> bool:
        newest = newest_checkpoints(b, remote)
        return all(
            (c := newest.get((app, p))) is not None
            and c.upstream_offset == o
            and group_offsets(b, app).get((remote, p)) == c.downstream_offset
            for p, o in at.items()
        )

    wait_for(lambda: synced_to(forward), 120, "the group's offsets synced to B")
    synced = group_offsets(b, app)
    commit_group(a, app, topic, back)  # rewound on A to read 600 records a partition again

    def checkpointed(at: dict[int, int]) -> bool:
        newest = newest_checkpoints(b, remote)
        return all(
            (c := newest.get((app, p))) is not None and c.upstream_offset == o
            for p, o in at.items()
        )

    wait_for(lambda: checkpointed(back), 120, "the checkpoints to follow the rewind")
    # The background sync never moves a group back: B still holds the forward position.
    assert group_offsets(b, app) == synced
    newest = newest_checkpoints(b, remote)
    rewound = {(remote, p): newest[(app, p)].downstream_offset for p in range(2)}

    patch_spec(
        node_stack.api,
        node_stack.namespace,
        "a-to-b",
        {"operation": {"type": "Failover", "id": "f-rewound"}},
    )
    completed(node_stack, "failover")
    assert group_offsets(b, app) == rewound != synced
    # From there the group reads every record from its rewound position on, on B.
    read = set(application(b, app, [remote], limit=None))
    expected = {r.value for r in tagged("r", 2_000, (0, 1)) if int(r.key.split(b"-")[1]) >= 400}
    assert read == expected, (len(read), len(expected))
