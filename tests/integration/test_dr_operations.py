"""Promote and fail over as operations of the product, end to end: real Kafka A and B, the real
operator (restarted midway), the worker pods as local processes, and a real application's
producer and consumer group. Every check reads the records' content straight from Kafka: each
record is consumed at least once by the group, re-reads stay within the documented bound, and
the RPO the operator reports equals the records the test counts missing on B."""

from __future__ import annotations

import subprocess
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client

from kafka_mirror.devstack.kafka import KafkaCluster
from kafka_mirror.devstack.kube import KubeApiServer
from kafka_mirror.devstack.kubelet import LocalKubelet
from kafka_mirror.devstack.operator import OperatorProcess
from tests.helpers.dr import (
    FORMS,
    PARTITIONS,
    AckedProducer,
    checkpoints_follow,
    failed_over_consumer_checks,
    operation_of,
    patch_spec,
    remote_values,
    request_operation,
    restart_operator_during,
    start_scenario,
    values,
    workers_stopped,
)
from tests.helpers.failover import newest_checkpoints
from tests.helpers.kafka import end_offsets, produce
from tests.helpers.objects import condition, get_custom, status_of
from tests.helpers.worker import group_offsets, read_partition, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.kube]


@pytest.mark.parametrize("form", FORMS)
def test_a_failover_after_a_is_lost_commits_offsets_and_reports_the_records_lost(
    form: str,
    kafka_a: KafkaCluster,
    kafka_b: KafkaCluster,
    kube_api: client.ApiClient,
    kube_apiserver: KubeApiServer,
    namespace: str,
    operator: OperatorProcess,
    kubelet: LocalKubelet,
) -> None:
    scenario = start_scenario(kube_api, namespace, kafka_a, kafka_b)
    topic, app, remote, read_on_a = (
        scenario.topic,
        scenario.app,
        scenario.remote,
        scenario.read_on_a,
    )
    assert len(remote_values(kafka_b, remote, 300)) == 300
    checkpoints_follow(kafka_b, kafka_a, app, topic)

    # The mirror falls behind (its workers stop), A takes 120 more records, then A is lost.
    patch_spec(kube_api, namespace, "a-to-b", {"paused": True})
    wait_for(lambda: workers_stopped(kube_api, namespace, "a-to-b"), 60, "the workers to stop")
    produce(kafka_a.bootstrap_servers, topic, values(topic, 300, 120))

    seen: dict[str, Any] = {}

    def behind() -> bool:
        seen.update(status_of(kube_api, namespace, "a-to-b"))
        topics = seen.get("topics") or [{}]
        return seen.get("totalLag") == 120 and topics[0].get("latencySeconds") is not None

    try:
        wait_for(behind, 60, "the status to show the 120 records and their age")
    except AssertionError as error:
        raise AssertionError(f"{error}; the status: {seen}") from None
    kafka_a.stop()
    try:
        failover = {"type": "Failover", "id": "region-a-lost"}
        request_operation(form, kube_api, kube_apiserver.kubeconfig, namespace, "a-to-b", failover)
        restart_operator_during(operator, kube_api, namespace)
        wait_for(
            lambda: operation_of(kube_api, namespace).get("phase") == "Completed",
            120,
            "the failover to complete",
        )
        done = operation_of(kube_api, namespace)

        # Counted independently: what A took that B does not hold.
        on_b = remote_values(kafka_b, remote, 300)
        produced = {r.value or b"" for r in values(topic, 0, 420)}
        lost = produced - on_b
        assert len(lost) == 120
        rpo = done["rpo"]
        assert rpo["totalRecords"] == len(lost) and rpo["lowerBound"], rpo  # A idle: exact
        assert [(t["name"], t["records"]) for t in rpo["topics"]] == [(topic, len(lost))]
        assert rpo["topics"][0]["seconds"] > 0 and rpo["sourceLastSeen"]

        # The group's offsets on B are its translated checkpoints, committed by the operator.
        newest = newest_checkpoints(kafka_b, remote)
        committed = {(c["group"], c["partition"]): c["offset"] for c in done["committed"]}
        assert committed == {key: c.downstream_offset for key, c in newest.items() if key[0] == app}
        assert {(t, p): o for (t, p), o in group_offsets(kafka_b, app).items()} == {
            (remote, p): o for (_, p), o in committed.items()
        }
        mirror_now = get_custom(kube_api, namespace, "kafkamirrors", "a-to-b")
        assert condition(mirror_now, "Ready")["reason"] == "FailedOver"
        assert condition(mirror_now, "OperationDone")["status"] == "True"

        rereads = failed_over_consumer_checks(kafka_b, app, remote, on_b, read_on_a)
        print(f"failover: RPO {rpo['totalRecords']} records, {rereads} re-reads")

        # The same id again (a GitOps sync, a restart) repeats nothing.
        patch_spec(
            kube_api,
            namespace,
            "a-to-b",
            {"operation": {"type": "Failover", "id": "region-a-lost"}, "replicas": 2},
        )
        time.sleep(6)
        again = operation_of(kube_api, namespace)
        assert again["completedAt"] == done["completedAt"] and again["phase"] == "Completed"
        assert not kubelet.pods_of("a-to-b-worker")
        reasons = {
            e.reason for e in client.CoreV1Api(kube_api).list_namespaced_event(namespace).items
        }
        assert {"FailoverStarted", "CommittingOffsets", "FailedOver"} <= reasons, reasons
    finally:
        kafka_a.start()


@pytest.mark.parametrize("form", FORMS)
def test_a_promote_catches_up_commits_offsets_and_loses_nothing(
    form: str,
    kafka_a: KafkaCluster,
    kafka_b: KafkaCluster,
    kube_api: client.ApiClient,
    kube_apiserver: KubeApiServer,
    namespace: str,
    operator: OperatorProcess,
    kubelet: LocalKubelet,
    tmp_path: Path,
) -> None:
    scenario = start_scenario(kube_api, namespace, kafka_a, kafka_b)
    topic, app, remote, read_on_a = (
        scenario.topic,
        scenario.app,
        scenario.remote,
        scenario.read_on_a,
    )
    produce(kafka_a.bootstrap_servers, topic, values(topic, 300, 100))  # then producers stop

    if form == "declarative":
        patch_spec(kube_api, namespace, "a-to-b", {"operation": {"type": "Promote", "id": "p-1"}})
        restart_operator_during(operator, kube_api, namespace)
        wait_for(
            lambda: operation_of(kube_api, namespace).get("phase") == "Completed", 180, "promote"
        )
    else:  # the CLI follows the status to the end, across the operator's restart
        output = tmp_path / "promote.out"
        with output.open("w") as sink:
            cli = subprocess.Popen(
                [
                    *(sys.executable, "-m", "kafka_mirror", "promote", "a-to-b"),
                    *("--namespace", namespace, "--id", "p-1", "--timeout", "180"),
                    *("--kubeconfig", str(kube_apiserver.kubeconfig)),
                ],
                stdout=sink,
                stderr=subprocess.STDOUT,
            )
            restart_operator_during(operator, kube_api, namespace)
            assert cli.wait(timeout=240) == 0, output.read_text()
        printed = output.read_text()
        assert "Promote p-1 requested" in printed and "Completed" in printed, printed

    done = operation_of(kube_api, namespace)
    assert done["rpo"]["totalRecords"] == 0, done
    on_b = remote_values(kafka_b, remote, 400)
    assert on_b == {r.value or b"" for r in values(topic, 0, 400)}
    assert {c["group"] for c in done["committed"]} == {app}
    assert not kubelet.pods_of("a-to-b-worker")
    assert (
        condition(get_custom(kube_api, namespace, "kafkamirrors", "a-to-b"), "Ready")["reason"]
        == "Promoted"
    )

    rereads = failed_over_consumer_checks(kafka_b, app, remote, on_b, read_on_a)
    print(f"promote: {rereads} re-reads")


def test_a_failover_cut_mid_flight_reports_a_bound_the_records_really_lost_lie_within(
    kafka_a: KafkaCluster,
    kafka_b: KafkaCluster,
    kube_api: client.ApiClient,
    namespace: str,
    operator: OperatorProcess,
    kubelet: LocalKubelet,
) -> None:
    """A is cut while a producer writes to it and the workers copy: nobody but A knows what A
    took after it was last read, so the RPO is a lower bound, and what the test counts missing
    on B (by content) lies between it and it plus what A acknowledged after `sourceLastSeen`."""
    scenario = start_scenario(kube_api, namespace, kafka_a, kafka_b)
    topic, remote = scenario.topic, scenario.remote
    assert len(remote_values(kafka_b, remote, 300)) == 300
    load = AckedProducer(kafka_a, topic, first=300)
    load.start()
    seen: dict[str, Any] = {}

    def copying_behind() -> bool:
        seen.update(status_of(kube_api, namespace, "a-to-b"))
        copied = sum(end_offsets(kafka_b.bootstrap_servers, remote).values())
        return copied > 1000 and (seen.get("totalLag") or 0) > 1000

    try:
        # B's copy grows while the status, refreshed from A, sees the mirror behind.
        wait_for(copying_behind, 90, "the mirror copying and behind")
        kafka_a.stop()
    finally:
        load.stop()
    try:
        patch_spec(kube_api, namespace, "a-to-b", {"operation": {"type": "Failover", "id": "cut"}})
        wait_for(
            lambda: operation_of(kube_api, namespace).get("phase") == "Completed", 120, "failover"
        )
        rpo = operation_of(kube_api, namespace)["rpo"]

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
