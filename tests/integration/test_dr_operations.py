"""Promote and fail over as operations of the product, end to end: real Kafka A and B, the real
operator (restarted midway), the worker pods on the real node (kafka_mirror_dev/node.py), and a real
application's producer and consumer group. Every check reads the records' content straight from
Kafka: each record is consumed at least once by the group, re-reads stay within the documented
bound, and the RPO the operator reports equals the records the test counts missing on B."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from kafka_mirror_dev.node import KubeNode
from tests.helpers.dr import (
    FORMS,
    PARTITIONS,
    AckedProducer,
    checkpoints_follow,
    failed_over_consumer_checks,
    operation_of,
    patch_spec,
    pause_until_stopped,
    remote_values,
    request_operation,
    restart_operator_during,
    start_scenario,
    values,
)
from tests.helpers.failover import newest_checkpoints
from tests.helpers.kafka import end_offsets, produce
from tests.helpers.node import NodeStack
from tests.helpers.objects import condition, get_custom, status_of
from tests.helpers.worker import group_offsets, read_partition, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.kube, pytest.mark.node]


@pytest.mark.parametrize("form", FORMS)
def test_a_failover_after_a_is_lost_commits_offsets_and_reports_the_records_lost(
    node_stack: NodeStack,
    form: str,
    kube_node: KubeNode,
) -> None:
    scenario = start_scenario(
        node_stack.api, node_stack.namespace, node_stack.kafka_a, node_stack.kafka_b
    )
    topic, app, remote, read_on_a = (
        scenario.topic,
        scenario.app,
        scenario.remote,
        scenario.read_on_a,
    )
    assert len(remote_values(node_stack.kafka_b, remote, 300)) == 300
    checkpoints_follow(node_stack.kafka_b, node_stack.kafka_a, app, topic)

    # The mirror falls behind (its workers stop), A takes 120 more records, then A is lost.
    pause_until_stopped(node_stack.api, node_stack.namespace, "a-to-b")
    produce(node_stack.kafka_a.bootstrap_servers, topic, values(topic, 300, 120))

    seen: dict[str, Any] = {}

    def behind() -> bool:
        seen.update(status_of(node_stack.api, node_stack.namespace, "a-to-b"))
        topics = seen.get("topics") or [{}]
        return seen.get("totalLag") == 120 and topics[0].get("latencySeconds") is not None

    try:
        wait_for(behind, 60, "the status to show the 120 records and their age")
    except AssertionError as error:
        raise AssertionError(f"{error}; the status: {seen}") from None
    node_stack.kafka_a.stop()
    try:
        failover = {"type": "Failover", "id": "region-a-lost"}
        request_operation(
            form, node_stack.api, kube_node.kubeconfig, node_stack.namespace, "a-to-b", failover
        )
        restart_operator_during(node_stack.operator, node_stack.api, node_stack.namespace)
        wait_for(
            lambda: operation_of(node_stack.api, node_stack.namespace).get("phase") == "Completed",
            120,
            "the failover to complete",
        )
        done = operation_of(node_stack.api, node_stack.namespace)

        # Counted independently: what A took that B does not hold.
        on_b = remote_values(node_stack.kafka_b, remote, 300)
        produced = {r.value or b"" for r in values(topic, 0, 420)}
        lost = produced - on_b
        assert len(lost) == 120
        rpo = done["rpo"]
        assert rpo["totalRecords"] == len(lost) and rpo["lowerBound"], rpo  # A idle: exact
        assert [(t["name"], t["records"]) for t in rpo["topics"]] == [(topic, len(lost))]
        assert rpo["topics"][0]["seconds"] > 0 and rpo["sourceLastSeen"]

        # The group's offsets on B are its translated checkpoints, committed by the operator.
        newest = newest_checkpoints(node_stack.kafka_b, remote)
        committed = {(c["group"], c["partition"]): c["offset"] for c in done["committed"]}
        assert committed == {key: c.downstream_offset for key, c in newest.items() if key[0] == app}
        assert {(t, p): o for (t, p), o in group_offsets(node_stack.kafka_b, app).items()} == {
            (remote, p): o for (_, p), o in committed.items()
        }
        mirror_now = get_custom(node_stack.api, node_stack.namespace, "kafkamirrors", "a-to-b")
        assert condition(mirror_now, "Ready")["reason"] == "FailedOver"
        assert condition(mirror_now, "OperationDone")["status"] == "True"

        rereads = failed_over_consumer_checks(node_stack.kafka_b, app, remote, on_b, read_on_a)
        print(f"failover: RPO {rpo['totalRecords']} records, {rereads} re-reads")

        # The same id again (a GitOps sync, a restart) repeats nothing.
        patch_spec(
            node_stack.api,
            node_stack.namespace,
            "a-to-b",
            {"operation": {"type": "Failover", "id": "region-a-lost"}, "replicas": 2},
        )
        time.sleep(6)
        again = operation_of(node_stack.api, node_stack.namespace)
        assert again["completedAt"] == done["completedAt"] and again["phase"] == "Completed"
        assert not node_stack.pods.any_workers("a-to-b")
        reasons = {
            e.reason
            for e in client.CoreV1Api(node_stack.api)
            .list_namespaced_event(node_stack.namespace)
            .items
        }
        assert {"FailoverStarted", "CommittingOffsets", "FailedOver"} <= reasons, reasons
    finally:
        node_stack.kafka_a.start()


@pytest.mark.parametrize("form", FORMS)
def test_a_promote_catches_up_commits_offsets_and_loses_nothing(
    node_stack: NodeStack,
    form: str,
    kube_node: KubeNode,
    tmp_path: Path,
) -> None:
    scenario = start_scenario(
        node_stack.api, node_stack.namespace, node_stack.kafka_a, node_stack.kafka_b
    )
    topic, app, remote, read_on_a = (
        scenario.topic,
        scenario.app,
        scenario.remote,
        scenario.read_on_a,
    )
    produce(
        node_stack.kafka_a.bootstrap_servers, topic, values(topic, 300, 100)
    )  # then producers stop

    if form == "declarative":
        patch_spec(
            node_stack.api,
            node_stack.namespace,
            "a-to-b",
            {"operation": {"type": "Promote", "id": "p-1"}},
        )
        restart_operator_during(node_stack.operator, node_stack.api, node_stack.namespace)
        wait_for(
            lambda: operation_of(node_stack.api, node_stack.namespace).get("phase") == "Completed",
            180,
            "promote",
        )
    else:  # the CLI follows the status to the end, across the operator's restart
        output = tmp_path / "promote.out"
        with output.open("w") as sink:
            cli = subprocess.Popen(
                [
                    *(sys.executable, "-m", "kafka_mirror", "promote", "a-to-b"),
                    *(
                        "--namespace",
                        node_stack.namespace,
                        "--id",
                        "p-1",
                        "--timeout",
                        "180",
                    ),
                    *("--kubeconfig", str(kube_node.kubeconfig)),
                ],
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
            restart_operator_during(node_stack.operator, node_stack.api, node_stack.namespace)
            assert cli.wait(timeout=240) == 0, output.read_text()
        printed = output.read_text()
        assert "Promote p-1 requested" in printed and "Completed" in printed, printed

    done = operation_of(node_stack.api, node_stack.namespace)
    assert done["rpo"]["totalRecords"] == 0, done
    on_b = remote_values(node_stack.kafka_b, remote, 400)
    assert on_b == {r.value or b"" for r in values(topic, 0, 400)}
    assert {c["group"] for c in done["committed"]} == {app}
    assert not node_stack.pods.any_workers("a-to-b")
    assert (
        condition(
            get_custom(node_stack.api, node_stack.namespace, "kafkamirrors", "a-to-b"), "Ready"
        )["reason"]
        == "Promoted"
    )

    rereads = failed_over_consumer_checks(node_stack.kafka_b, app, remote, on_b, read_on_a)
    print(f"promote: {rereads} re-reads")


def test_a_failover_cut_mid_flight_reports_a_bound_the_records_really_lost_lie_within(
    node_stack: NodeStack,
) -> None:
    """A is cut while a producer writes to it and the workers copy: nobody but A knows what A
    took after it was last read, so the RPO is a lower bound, and what the test counts missing
    on B (by content) lies between it and it plus what A acknowledged after `sourceLastSeen`."""
    kafka_a, kafka_b = node_stack.kafka_a, node_stack.kafka_b
    api, namespace = node_stack.api, node_stack.namespace
    scenario = start_scenario(api, namespace, kafka_a, kafka_b)
    topic, remote = scenario.topic, scenario.remote
    assert len(remote_values(kafka_b, remote, 300)) == 300
    load = AckedProducer(kafka_a, topic, first=300)
    load.start()
    seen: dict[str, Any] = {}

    def copying_behind() -> bool:
        seen.update(status_of(api, namespace, "a-to-b"))
        copied = sum(end_offsets(kafka_b.bootstrap_servers, remote).values())
        return copied > 1000 and (seen.get("totalLag") or 0) > 1000

    try:
        # B's copy grows while the status, refreshed from A, sees the mirror behind.
        wait_for(copying_behind, 90, "the mirror copying and behind")
        kafka_a.stop()
    finally:
        load.stop()
    try:
        patch_spec(api, namespace, "a-to-b", {"operation": {"type": "Failover", "id": "cut"}})
        wait_for(lambda: operation_of(api, namespace).get("phase") == "Completed", 120, "failover")
        rpo = operation_of(api, namespace)["rpo"]

        on_b = {
            r.value or b"" for p in range(PARTITIONS) for r in read_partition(kafka_b, remote, p, 0)
        }
        acked = {**{r.value or b"": 0.0 for r in values(topic, 0, 300)}, **load.acked}
        lost = set(acked) - on_b
        last_seen = datetime.fromisoformat(rpo["sourceLastSeen"]).timestamp()
        after = {value for value, at in acked.items() if at >= last_seen}
        print(
            f"cut mid-flight: {len(acked)} acknowledged by A, {len(lost)} not on B; RPO at least "
            f"{rpo['totalRecords']}; {len(after)} acknowledged after A was last read"
        )
        assert rpo["lowerBound"], rpo
        assert rpo["totalRecords"] <= len(lost) <= rpo["totalRecords"] + len(after), rpo
    finally:
        kafka_a.start()
