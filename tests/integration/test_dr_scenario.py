"""The seed's disaster-recovery scenario end to end, as one test (IBM Event Streams' "Using
mirroring in a disaster recovery example scenario"): real Kafka A and B, the real operator, the
worker pods on the real node (devstack/node.py), a real producer and a real consumer group.

A producer writes `t` on A, the group reads it on A and commits mid-stream; A is cut off while
the mirror is behind; fail over (declaratively); the group reads `t.A` on B from its committed
offsets, the producer writes the local `t` on B and the group reads part of it; A returns; the
reverse mirror B→A (`t` as `t.B`, never `t.A` back) catches up and is promoted (from the CLI),
which commits the group's offsets on A for `t.B` and, by reverse checkpoints, for `t`; the group
returns to A; mirroring A→B resumes, and the records A held but never mirrored reach B. Every
record produced anywhere is read by the group at least once, and no cycle topic appears."""

from __future__ import annotations

from collections import Counter

import pytest

from kafka_mirror.devstack.kafka import KafkaCluster
from kafka_mirror.devstack.node import KubeNode
from kafka_mirror.kube import apply, delete
from tests.helpers.dr import (
    MAX_LAG,
    PARTITIONS,
    application,
    checkpoints_follow,
    operation_of,
    patch_spec,
    pause_until_stopped,
    remote_values,
    run_cli,
    start_scenario,
    values,
)
from tests.helpers.kafka import admin_for, create_topics, produce
from tests.helpers.node import NodeStack
from tests.helpers.objects import mirror, selection, status_of
from tests.helpers.worker import wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.kube, pytest.mark.node]

SWITCHES = 2  # A to B, then B to A: each may re-read up to the bound per partition


def topics_named(cluster: KafkaCluster, topic: str) -> set[str]:
    listed = admin_for(cluster.bootstrap_servers).list_topics(timeout=10).topics
    return {name for name in listed if name.startswith(topic)}


def test_fail_over_to_b_fail_back_to_a_and_resume_without_loss_or_cycles(
    node_stack: NodeStack,
    kube_node: KubeNode,
) -> None:
    scenario = start_scenario(
        node_stack.api, node_stack.namespace, node_stack.kafka_a, node_stack.kafka_b
    )
    t, app = scenario.topic, scenario.app
    produce(node_stack.kafka_a.bootstrap_servers, t, values(t, 300, 100))
    assert len(remote_values(node_stack.kafka_b, f"{t}.A", 400)) == 400
    checkpoints_follow(node_stack.kafka_b, node_stack.kafka_a, app, t)

    # The mirror falls behind by 50 records, then A is cut off: fail over, declaratively.
    pause_until_stopped(node_stack.api, node_stack.namespace, "a-to-b")
    produce(node_stack.kafka_a.bootstrap_servers, t, values(t, 400, 50))
    wait_for(
        lambda: status_of(node_stack.api, node_stack.namespace, "a-to-b").get("totalLag") == 50,
        60,
        "lag 50",
    )
    node_stack.kafka_a.stop()
    try:
        patch_spec(
            node_stack.api,
            node_stack.namespace,
            "a-to-b",
            {"operation": {"type": "Failover", "id": "a-lost"}},
        )
        wait_for(
            lambda: operation_of(node_stack.api, node_stack.namespace).get("phase") == "Completed",
            120,
            "failover",
        )
        assert operation_of(node_stack.api, node_stack.namespace)["rpo"]["totalRecords"] == 50

        # On B: the group reads t.A from its translated offsets; producers write the local t,
        # of which the group reads 100 before it commits and leaves.
        read_on_b = application(node_stack.kafka_b, app, [f"{t}.A"], limit=None)
        create_topics(node_stack.kafka_b.bootstrap_servers, [t], partitions=PARTITIONS)
        produce(node_stack.kafka_b.bootstrap_servers, t, values(f"{t}-on-b", 0, 150))
        read_on_b += application(node_stack.kafka_b, app, [t], limit=100)
    finally:
        node_stack.kafka_a.start()

    # A is back: mirror B to A what was written on B (t as t.B; never t.A back).
    source = {"alias": "B", "bootstrapServers": node_stack.kafka_b.bootstrap_servers}
    target = {"alias": "A", "bootstrapServers": node_stack.kafka_a.bootstrap_servers}
    apply(
        node_stack.api,
        mirror("b-to-a", node_stack.namespace, source, target, offsetSyncs={"maxLag": MAX_LAG}),
    )
    apply(node_stack.api, selection("failback", node_stack.namespace, "b-to-a", [t], (".*\\.A",)))
    assert len(remote_values(node_stack.kafka_a, f"{t}.B", 150)) == 150
    printed = run_cli(
        kube_node.kubeconfig,
        *(
            "promote",
            "b-to-a",
            "--namespace",
            node_stack.namespace,
            "--id",
            "failback",
            "--timeout",
            "180",
        ),
    )
    assert "Completed" in printed, printed
    failback = operation_of(node_stack.api, node_stack.namespace, "b-to-a")
    assert failback["rpo"]["totalRecords"] == 0
    committed = {(c["group"], c["topic"]) for c in failback["committed"]}
    assert {(app, f"{t}.B"), (app, t)} <= committed, committed  # forward and reverse
    # Reverse: the group read t.A to its end on B, so on A it resumes in t right after the 400
    # records that reached B: at the 50 that did not.
    reverse = {c["partition"]: c["offset"] for c in failback["committed"] if c["topic"] == t}
    assert reverse == {p: len(range(p, 400, PARTITIONS)) for p in range(PARTITIONS)}, reverse

    # The group returns to A: t.B (written on B during the outage), then t.
    read_on_a = application(node_stack.kafka_a, app, [f"{t}.B"], limit=None)
    read_on_a += application(node_stack.kafka_a, app, [t], limit=None)

    # Every record produced anywhere was read by the group at least once.
    produced = {r.value for r in values(t, 0, 450)} | {r.value for r in values(f"{t}-on-b", 0, 150)}
    read = Counter([*scenario.read_on_a, *read_on_b, *read_on_a])
    unread = produced - set(read)
    assert not unread, f"{len(unread)} records never read, e.g. {sorted(unread)[:3]}"
    rereads = sum(n - 1 for n in read.values())
    assert rereads <= SWITCHES * MAX_LAG * PARTITIONS, rereads
    print(f"scenario: {sum(read.values())} reads of {len(produced)} records, {rereads} re-reads")

    # Return to normal: the reverse mirror goes, A→B resumes and brings what A never mirrored.
    delete(node_stack.api, "kafkamirror.io/v1alpha1", "KafkaMirror", node_stack.namespace, "b-to-a")
    patch_spec(node_stack.api, node_stack.namespace, "a-to-b", {"operation": None, "paused": False})
    produce(node_stack.kafka_a.bootstrap_servers, t, values(t, 450, 50))
    assert remote_values(node_stack.kafka_b, f"{t}.A", 500) == {r.value for r in values(t, 0, 500)}
    assert topics_named(node_stack.kafka_a, t) == {t, f"{t}.B"}
    assert topics_named(node_stack.kafka_b, t) == {t, f"{t}.A"}
