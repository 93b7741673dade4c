"""The seed's disaster-recovery scenario end to end, as one test (IBM Event Streams' "Using
mirroring in a disaster recovery example scenario"): real Kafka A and B, the real operator, the
worker pods on the real node (kafka_mirror_dev/node.py), a real producer and a real consumer group.

A producer writes `t` on A, the group reads it on A and commits mid-stream; A is cut off while
the mirror is behind; fail over (declaratively); the group reads `t.A` on B from its committed
offsets, the producer writes the local `t` on B (100,000 records) and the group reads part of
it; A returns, throttled by a quota; the reverse mirror B→A (`t` as `t.B`, never `t.A` back)
turns Ready with most of that still to copy, and is returned at once (one operation, from the
CLI, the operator killed midway): it catches up first, then commits the group's offsets on A
for `t.B` and, by reverse checkpoints, for `t`, stops, and starts A→B again, which brings the
records A held but never mirrored to B; the group returns to A and reads on as A→B mirrors
again. Every record produced anywhere is read by the group at least once (checked by content),
and no cycle topic appears."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest
from kubernetes import client

from kafka_mirror_dev.kafka import LocalKafka
from kafka_mirror_dev.node import KubeNode
from tests.helpers.dr import (
    MAX_LAG,
    PARTITIONS,
    WORKERS_STOP,
    application,
    fail_over_behind,
    mirrored_scenario,
    operation_of,
    remote_values,
    start_failback,
    values,
    workers_stopped,
)
from tests.helpers.kafka import admin_for, client_quota, produce
from tests.helpers.node import NodeStack
from tests.helpers.objects import condition, get_custom, status_of
from tests.helpers.worker import wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.kube, pytest.mark.node]

SWITCHES = 2  # A to B, then B to A: each may re-read up to the bound per partition
ON_B = 100_000  # records B takes while A is away
SLOW_A = 200_000  # bytes a second A takes from a producer when it comes back


def topics_named(cluster: LocalKafka, topic: str) -> set[str]:
    listed = admin_for(cluster.bootstrap_servers).list_topics(timeout=10).topics
    return {name for name in listed if name.startswith(topic)}


def test_fail_over_to_b_fail_back_to_a_and_resume_without_loss_or_cycles(
    node_stack: NodeStack,
    kube_node: KubeNode,
    tmp_path: Path,
    request: pytest.FixtureRequest,
) -> None:
    kafka_a, kafka_b = node_stack.kafka_a, node_stack.kafka_b
    kube_api, namespace = node_stack.api, node_stack.namespace
    scenario = mirrored_scenario(kube_api, namespace, kafka_a, kafka_b)
    t, app = scenario.topic, scenario.app

    # The mirror falls behind by 50 records, then A is cut off: fail over, declaratively. On B
    # the group reads t.A, producers write the local t (100,000 records) and the group reads
    # part of it. A comes back, and a-to-b says what A holds that B never had: the 50.
    read_on_b = fail_over_behind(
        kube_api, namespace, kafka_a, kafka_b, scenario, on_b=ON_B, operator=node_stack.operator
    )

    # A is back, slowed by a quota, and B took a lot: the reverse mirror B→A (t as t.B; never
    # t.A back) turns Ready with a backlog, and the return is asked at once, as the runbook's
    # `kubectl wait --for=condition=Ready` then `kafka-mirror return` would.
    client_quota(kafka_a, f"producer_byte_rate={SLOW_A}")
    request.addfinalizer(lambda: client_quota(kafka_a, None))  # A serves the other tests too
    start_failback(kube_api, namespace, kafka_a, kafka_b, t)
    backlog = status_of(kube_api, namespace, "b-to-a").get("totalLag") or 0
    print(f"b-to-a Ready with a backlog of {backlog} records")
    # Return, from the CLI, which follows the status across the operator's restart.
    output = tmp_path / "return.out"
    with output.open("w") as sink:
        cli = subprocess.Popen(
            [
                *(sys.executable, "-m", "kafka_mirror", "return", "b-to-a", "--resume", "a-to-b"),
                *("--namespace", namespace, "--id", "back-to-a", "--timeout", "240"),
                *("--kubeconfig", str(kube_node.kubeconfig)),
            ],
            stdout=sink,
            stderr=subprocess.STDOUT,
        )
        wait_for(lambda: bool(operation_of(kube_api, namespace, "b-to-a")), 60, "the return")
        assert not node_stack.pods.any_workers("a-to-b")
        node_stack.operator.kill()
        node_stack.operator.start()
        assert cli.wait(timeout=300) == 0, output.read_text()
    printed = output.read_text()
    print(printed)
    assert "Return back-to-a requested" in printed and "Completed" in printed, printed
    assert "CatchingUp: mirroring the last" in printed, printed  # it had a backlog to copy
    back = operation_of(kube_api, namespace, "b-to-a")
    assert back["rpo"]["totalRecords"] == 0
    committed = {(c["group"], c["topic"]) for c in back["committed"]}
    assert {(app, f"{t}.B"), (app, t)} <= committed, committed  # forward and reverse
    # Reverse: the group read t.A to its end on B, so on A it resumes in t right after the 400
    # records that reached B: at the 50 that did not.
    reverse = {c["partition"]: c["offset"] for c in back["committed"] if c["topic"] == t}
    assert reverse == {p: len(range(p, 400, PARTITIONS)) for p in range(PARTITIONS)}, reverse
    # B→A stopped; A→B mirrors again, started by the return though its spec names the failover.
    wait_for(lambda: workers_stopped(kube_api, namespace, "b-to-a"), WORKERS_STOP, "b-to-a to stop")
    resumed = operation_of(kube_api, namespace)["resumedBy"]
    assert (resumed["mirror"], resumed["id"]) == ("b-to-a", "back-to-a")
    wait_for(lambda: node_stack.pods.any_workers("a-to-b"), 120, "a-to-b's workers")
    a_to_b = get_custom(kube_api, namespace, "kafkamirrors", "a-to-b")
    assert a_to_b["spec"]["operation"]["id"] == "a-lost"
    assert condition(a_to_b, "OperationDone")["reason"] == "Resumed"
    b_to_a = get_custom(kube_api, namespace, "kafkamirrors", "b-to-a")
    assert condition(b_to_a, "OperationDone")["reason"] == "Returned"
    reasons = {e.reason for e in client.CoreV1Api(kube_api).list_namespaced_event(namespace).items}
    assert {"ReturnStarted", "ResumingMirror", "Returned"} <= reasons, reasons
    # What A held but never mirrored reaches B now.
    assert remote_values(kafka_b, f"{t}.A", 450) == {r.value for r in values(t, 0, 450)}

    # The group returns to A: t.B (written on B during the outage), then t; the producer writes
    # t on A again, and A→B mirrors it.
    read_on_a = application(kafka_a, app, [f"{t}.B"], limit=None)
    read_on_a += application(kafka_a, app, [t], limit=None)
    produce(kafka_a.bootstrap_servers, t, values(t, 450, 50))
    read_on_a += application(kafka_a, app, [t], limit=None)
    assert remote_values(kafka_b, f"{t}.A", 500) == {r.value for r in values(t, 0, 500)}

    # Every record produced anywhere was read by the group at least once.
    on_b = {r.value for r in values(f"{t}-on-b", 0, ON_B)}
    produced = {r.value for r in values(t, 0, 500)} | on_b
    read = Counter([*scenario.read_on_a, *read_on_b, *read_on_a])
    unread = produced - set(read)
    assert not unread, f"{len(unread)} records never read, e.g. {sorted(unread)[:3]}"
    rereads = sum(n - 1 for n in read.values())
    assert rereads <= SWITCHES * MAX_LAG * PARTITIONS, rereads
    print(f"scenario: {sum(read.values())} reads of {len(produced)} records, {rereads} re-reads")

    # No cycle: t.A never went back to A, nor t.B to B.
    assert topics_named(kafka_a, t) == {t, f"{t}.B"}
    assert topics_named(kafka_b, t) == {t, f"{t}.A"}
