"""The operator's shared status loop against the real API server and Kafka (workers not running,
so the lag is real): thirty mirrors' statuses follow what is produced within a few intervals,
a deleted mirror goes at once (no finalizer) and is no longer refreshed or exported, and its
selection then says its mirror is missing."""

from __future__ import annotations

import urllib.request
import uuid
from typing import Any

import pytest
from kubernetes import client

from kafka_mirror.api.models import GROUP, VERSION
from kafka_mirror.controller.handlers import FINALIZER
from kafka_mirror.kube import apply
from kafka_mirror_dev.operator import OperatorProcess
from tests.helpers.kafka import create_topics, produce, records
from tests.helpers.objects import condition, exists, get_custom, mirror, selection, status_of
from tests.helpers.stack import MirrorStack
from tests.helpers.worker import wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.kube]
MIRRORS = 30


def lags(api: client.ApiClient, namespace: str) -> dict[str, int | None]:
    """Each mirror's totalLag as stored."""
    found: Any = client.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, VERSION, namespace, "kafkamirrors"
    )
    return {m["metadata"]["name"]: m.get("status", {}).get("totalLag") for m in found["items"]}


def scraped(operator: OperatorProcess) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{operator.metrics_port}/metrics") as response:
        return str(response.read().decode())


def test_one_loop_keeps_thirty_statuses_fresh_and_drops_a_deleted_mirror(
    kube_api: client.ApiClient,
    namespace: str,
    stack: MirrorStack,
    operator: OperatorProcess,
) -> None:
    topic = f"loop-{uuid.uuid4().hex[:8]}"
    create_topics(stack.kafka_a.bootstrap_servers, [topic], partitions=2)
    produce(stack.kafka_a.bootstrap_servers, topic, records(10, partitions=2))
    source = {"bootstrapServers": stack.kafka_a.bootstrap_servers}
    target = {"bootstrapServers": stack.kafka_b.bootstrap_servers}
    names = [f"m{i}" for i in range(MIRRORS)]
    for name in names:
        apply(kube_api, mirror(name, namespace, source, target))
        apply(kube_api, selection(f"{name}-topics", namespace, name, [topic]))
    wait_for(
        lambda: set(lags(kube_api, namespace).values()) == {10},
        120,
        "every mirror's status to count the records produced",
    )
    assert "finalizers" not in get_custom(kube_api, namespace, "kafkamirrors", "m0")["metadata"]

    # Fresh: the status interval is 2 s; a batch shows in every status within a few.
    produce(stack.kafka_a.bootstrap_servers, topic, records(5, partitions=2))
    wait_for(
        lambda: set(lags(kube_api, namespace).values()) == {15},
        30,
        lambda: f"every mirror's status to count the new records: {lags(kube_api, namespace)}",
    )

    # Deleted: gone at once, and forgotten by the operator; its selection reports it missing.
    client.CustomObjectsApi(kube_api).delete_namespaced_custom_object(
        GROUP, VERSION, namespace, "kafkamirrors", "m0"
    )
    assert "m0" not in lags(kube_api, namespace)
    wait_for(lambda: 'mirror="m0"' not in scraped(operator), 30, "m0's metrics to go")
    # The test API server runs no garbage collector: the operator removed the children.
    assert not exists(client.AppsV1Api(kube_api).read_namespaced_deployment, "m0-worker", namespace)
    assert exists(client.AppsV1Api(kube_api).read_namespaced_deployment, "m1-worker", namespace)
    wait_for(
        lambda: (
            condition(
                get_custom(kube_api, namespace, "mirrortopicselections", "m0-topics"), "Ready"
            ).get("reason")
            == "MirrorNotFound"
        ),
        30,
        "the orphaned selection to say its mirror is missing",
    )
    produce(stack.kafka_a.bootstrap_servers, topic, records(5, partitions=2))
    wait_for(
        lambda: set(lags(kube_api, namespace).values()) == {20},
        30,
        "the other mirrors' statuses to go on",
    )
    assert len(lags(kube_api, namespace)) == MIRRORS - 1
    assert status_of(kube_api, namespace, "m1")["totalLag"] == 20
    assert "failed with an exception" not in operator.log()


def test_the_operator_removes_older_versions_finalizer_and_its_objects_then_go_at_once(
    kube_api: client.ApiClient, namespace: str, operator: OperatorProcess
) -> None:
    # What an operator before the status loop left on every object: its finalizer.
    source = {"bootstrapServers": "kafka-a.invalid:9092"}
    for body in (mirror("m", namespace, source, source), selection("s", namespace, "m", [".*"])):
        body["metadata"]["finalizers"] = [FINALIZER]
        apply(kube_api, body)

    def finalizers(plural: str, name: str) -> list[str]:
        return list(get_custom(kube_api, namespace, plural, name)["metadata"].get("finalizers", []))

    wait_for(
        lambda: (
            not finalizers("kafkamirrors", "m") and not finalizers("mirrortopicselections", "s")
        ),
        60,
        "the operator to remove the old finalizer",
    )
    operator.stop()
    custom = client.CustomObjectsApi(kube_api)
    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "kafkamirrors", "m")
    custom.delete_namespaced_custom_object(GROUP, VERSION, namespace, "mirrortopicselections", "s")
    for plural in ("kafkamirrors", "mirrortopicselections"):
        found: Any = custom.list_namespaced_custom_object(GROUP, VERSION, namespace, plural)
        assert found["items"] == []  # nothing held with the operator gone


@pytest.mark.parametrize("schedule", ["0 3 * * MON-FRI", "0 3 ? * sat,SUN"])
def test_a_mirror_whose_audit_runs_on_named_days_keeps_its_status_fresh(
    kube_api: client.ApiClient,
    namespace: str,
    stack: MirrorStack,
    operator: OperatorProcess,
    schedule: str,
) -> None:
    """Schedules Kubernetes accepts, with day names and `?`: once the audit has reported (the
    condition then reads the schedule), every refresh still goes through."""
    topic = f"days-{uuid.uuid4().hex[:8]}"
    create_topics(stack.kafka_a.bootstrap_servers, [topic], partitions=1)
    produce(stack.kafka_a.bootstrap_servers, topic, records(10, partitions=1))
    source = {"bootstrapServers": stack.kafka_a.bootstrap_servers}
    target = {"bootstrapServers": stack.kafka_b.bootstrap_servers}
    apply(kube_api, mirror("weekdays", namespace, source, target, audit={"schedule": schedule}))
    apply(kube_api, selection("weekdays-topics", namespace, "weekdays", [topic]))
    wait_for(lambda: lags(kube_api, namespace) == {"weekdays": 10}, 60, "the first status")
    # The audit reports, as its job does: a patch of status.lastAudit.
    reported = {"time": "2026-11-23T03:00:00Z", "result": "Passed", "recordsChecked": 10}
    client.CustomObjectsApi(kube_api).patch_namespaced_custom_object_status(
        GROUP, VERSION, namespace, "kafkamirrors", "weekdays", {"status": {"lastAudit": reported}}
    )

    def audit_condition() -> dict[str, Any]:
        return condition(get_custom(kube_api, namespace, "kafkamirrors", "weekdays"), "AuditPassed")

    wait_for(
        lambda: audit_condition().get("reason") in ("AuditPassed", "AuditStale"),
        30,
        lambda: f"the audit's condition: {audit_condition()}",
    )
    produce(stack.kafka_a.bootstrap_servers, topic, records(5, partitions=1))
    wait_for(lambda: lags(kube_api, namespace) == {"weekdays": 15}, 30, "the status to go on")
    assert "failed with an exception" not in operator.log()
