"""Drills of the hand-overs in the states where they are hardest, on the real node with the real
operator, judged from Kafka: a Promote whose group sits on an empty partition, past an aborted
transaction and at the edge of one still open on the source; a Failover after the group was
rewound on A, with its offsets on B synced forward before the rewind; a failover longer than the
source's offsets retention, failed back and returned; a failover by an operator that never
reached the lost region."""

from __future__ import annotations

import re
from collections import Counter

import pytest
from confluent_kafka import IsolationLevel, TopicPartition
from confluent_kafka.admin import OffsetSpec
from kubernetes import client

from kafka_mirror.api.worker_config import WORKER_GROUP_PREFIX
from kafka_mirror.kube import apply
from kafka_mirror_dev.kafka import LocalKafka
from kafka_mirror_dev.node import KubeNode
from tests.helpers.audit import delete_before
from tests.helpers.dr import (
    MAX_LAG,
    PARTITIONS,
    application,
    checkpoints_follow,
    fail_over_behind,
    failed_over_consumer_checks,
    mirrored_scenario,
    operation_of,
    patch_spec,
    remote_values,
    run_cli,
    start_failback,
    start_scenario,
    values,
)
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
from tests.helpers.node import NodeStack, region_gone
from tests.helpers.objects import mirror, selection, status_of
from tests.helpers.worker import (
    commit_group,
    copies,
    group_offsets,
    read_partition,
    wait_for,
)

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


@pytest.mark.parametrize("delivery", ["atLeastOnce", "exactlyOnce"])
def test_a_promote_with_an_empty_partition_and_an_aborted_and_an_open_transaction_completes(
    node_stack: NodeStack, delivery: str
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
        start_mirror(node_stack, topic, delivery=delivery)

        # A Java consumer at the end commits every assigned partition: past the aborted records
        # and the marker on 0, where read_committed stops on 1, and 0 on the empty 2.
        def stable() -> dict[int, int]:
            asked = admin_for(a.bootstrap_servers).list_offsets(
                {TopicPartition(topic, p): OffsetSpec.latest() for p in range(3)},  # type: ignore[no-untyped-call]
                isolation_level=IsolationLevel.READ_COMMITTED,
            )
            return {tp.partition: f.result(timeout=10).offset for tp, f in asked.items()}

        # The abort's marker is written after abort_transaction returns: until then 0 is stable
        # only up to where the transaction began (seen in a busy run).
        at = {0: 300 + 50 + 1 + 100, 1: 300, 2: 0}
        wait_for(lambda: stable() == at, 60, lambda: f"stable offsets {at}, saw {stable()}")
        commit_group(a, app, topic, at)

        patch_spec(
            node_stack.api,
            node_stack.namespace,
            "a-to-b",
            {"operation": {"type": "Promote", "id": "p-idle"}},
        )
        completed(node_stack, "promote")

        # Every committed record is on B once; nothing of either transaction.
        on_b = {p: read_partition(b, remote, p, 0) for p in range(3)}
        copied = [r.value for p in range(3) for r in on_b[p]]
        expected = [r.value for r in tagged("kept", 600, (0, 1)) + tagged("after", 100, (0, 0))]
        assert set(copied) == set(expected) and len(copied) >= len(expected)
        if delivery == "exactlyOnce":
            assert len(copied) == len(expected), Counter(copied).most_common(3)
        # The group resumes on B past the last copy, with nothing left to read (exactly once,
        # before or after the last transaction's commit marker), and at 0 on the empty partition.
        ends = end_offsets(b.bootstrap_servers, remote)
        resumes = group_offsets(b, app)
        assert ends[2] == 0 and resumes[(remote, 2)] == 0, (ends, resumes)
        for p in range(2):
            at = resumes[(remote, p)]
            assert on_b[p][-1].offset < at <= ends[p], (p, at, on_b[p][-1].offset, ends)
            assert not read_partition(b, remote, p, at), (p, at)
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
    # Every record copied before the failover: this drill is about the rewound group (a backlog
    # at the failover is `fail_over_behind`'s). On a busy machine a worker's re-sends had not
    # reached the end yet when the failover stopped it (CI, 2026-11-28).
    on_b: list[bytes] = []

    def copied_all() -> bool:
        on_b[:] = [r.value or b"" for p in range(2) for r in read_partition(b, remote, p, 0)]
        return len(set(on_b)) == 2_000

    wait_for(copied_all, 120, lambda: f"B to hold all 2,000 records: {len(set(on_b)):,} there")

    patch_spec(
        node_stack.api,
        node_stack.namespace,
        "a-to-b",
        {"operation": {"type": "Failover", "id": "f-rewound"}},
    )
    completed(node_stack, "failover")
    assert group_offsets(b, app) == rewound != synced
    # From there the group reads every record from its rewound position on, on B: none skipped.
    # At least once, it may read again records below it that B holds twice (a worker's
    # re-sends put their copies after the first ones), no more of them than B holds twice.
    read = set(application(b, app, [remote], limit=None))
    expected = {r.value for r in tagged("r", 2_000, (0, 1)) if int(r.key.split(b"-")[1]) >= 400}
    assert expected <= read, f"skipped: {sorted(expected - read)[:10]}"
    twice = len(on_b) - len(set(on_b))
    assert len(read - expected) <= twice, (sorted(read - expected)[:10], twice)


def test_a_failover_longer_than_the_sources_offsets_retention_fails_back_without_a_recopy(
    node_stack: NodeStack,
    node_kafka_a_forgetful: LocalKafka,
    kube_node: KubeNode,
) -> None:
    """The long outage, in short: A forgets an empty group's offsets after a minute (Kafka's
    default is 7 days), so the mirror's own group on A expires while it stands failed over, and
    A's retention removes records below its position (on 0, ten it had not copied yet; on 1,
    only copied ones). After the failback and the return, a-to-b resumes where its copies on B
    end: no source offset copied twice, none copied again from a log start, and the ten counted
    lost to retention, exactly; the application reads every other record."""
    a, b = node_kafka_a_forgetful, node_stack.kafka_b
    api, namespace = node_stack.api, node_stack.namespace
    scenario = mirrored_scenario(api, namespace, a, b)
    t, app = scenario.topic, scenario.app

    # The mirror falls behind by 50 records (16, 17 and 17 a partition), and A is lost.
    read_on_b = fail_over_behind(
        api, namespace, a, b, scenario, on_b=3_000, operator=node_stack.operator
    )

    # The outage outlasts A's offsets retention: the mirror's group is gone. Then retention
    # moves the log starts past its position on 0 (offsets 134-143 never copied), and below it
    # on 1 (copied up to 132); partition 2 keeps its whole log.
    workers = f"{WORKER_GROUP_PREFIX}{namespace}.a-to-b"
    wait_for(lambda: group_offsets(a, workers) == {}, 180, f"A to forget {workers}'s offsets")
    delete_before(a, t, {0: 144, 1: 100})
    lost = {r.value for r in values(t, 0, 450) if r.partition == 0 and 402 <= int(r.key[1:]) < 432}
    assert len(lost) == 10

    start_failback(api, namespace, a, b, t)
    printed = run_cli(
        kube_node.kubeconfig,
        *("return", "b-to-a", "--resume", "a-to-b", "--namespace", namespace),
        *("--id", "back-to-a", "--timeout", "240"),
    )
    assert "Completed" in printed, printed
    assert operation_of(api, namespace, "b-to-a")["rpo"]["totalRecords"] == 0

    # a-to-b resumed after its last copies: each source offset on B once, the lost ten never.
    remote = f"{t}.A"
    assert remote_values(b, remote, 440) == {r.value for r in values(t, 0, 450)} - lost
    assert copies(b, remote, 0) == Counter([*range(134), *range(144, 150)])
    assert copies(b, remote, 1) == Counter(range(150))
    assert copies(b, remote, 2) == Counter(range(150))
    wait_for(
        lambda: status_of(api, namespace, "a-to-b").get("totalLostToRetention") == 10,
        60,
        lambda: f"the ten lost records in a-to-b's status: {status_of(api, namespace, 'a-to-b')}",
    )
    assert "resuming after the last copy on the target" in node_stack.pods.worker_logs("a-to-b")

    # The application, back on A: t.B (what B took), then t. Every record but the lost is read.
    read_on_a = application(a, app, [f"{t}.B"], limit=None)
    read_on_a += application(a, app, [t], limit=None)
    produced = {r.value or b"" for r in [*values(t, 0, 450), *values(f"{t}-on-b", 0, 3_000)]}
    read = Counter([*scenario.read_on_a, *read_on_b, *read_on_a])
    assert produced - set(read) == lost, sorted(produced - set(read) - lost)[:3]
    assert sum(n - 1 for n in read.values()) <= 2 * MAX_LAG * PARTITIONS


def test_a_failover_completes_though_the_operator_never_reached_the_lost_region(
    node_stack: NodeStack,
) -> None:
    """The operator runs in B's region: A's region goes (its packets dropped, so every
    connection to A hangs until its timeout), and the operator restarts after that, never
    having reached A. The Failover needs nothing of A: it completes, and the group resumes on B
    where it stood on A."""
    a, b = node_stack.kafka_a, node_stack.kafka_b
    api, namespace = node_stack.api, node_stack.namespace
    scenario = start_scenario(api, namespace, a, b)
    assert len(remote_values(b, scenario.remote, 300)) == 300
    checkpoints_follow(b, a, scenario.app, scenario.topic)
    with region_gone(a):
        node_stack.operator.kill()
        node_stack.operator.start()
        patch_spec(api, namespace, "a-to-b", {"operation": {"type": "Failover", "id": "region"}})
        completed(node_stack, "failover")
        assert operation_of(api, namespace)["rpo"]["totalRecords"] == 0
        on_b = {r.value or b"" for r in values(scenario.topic, 0, 300)}
        failed_over_consumer_checks(b, scenario.app, scenario.remote, on_b, scenario.read_on_a)
