"""`spec.autoscaling` with the real operator, API server and Kafka (no kubelet, so no worker
runs and the lag is real): records waiting scale the worker Deployment up, in proportion and
within the bounds, a second step only after the first settled; once the workers' group has
caught up (committed as workers would), it comes back down after the window, each step an event
with the reason, the status saying why the count is what it is."""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

import pytest
from kubernetes import client

from kafka_mirror.controller.autoscaler import SCALE_UP_PAUSE_SECONDS
from kafka_mirror.kube import apply
from kafka_mirror.render import worker_name
from kafka_mirror_dev.operator import OperatorProcess
from tests.helpers.kafka import create_topics, end_offsets, produce, records, unique
from tests.helpers.objects import mirror, selection, status_of
from tests.helpers.stack import MirrorStack
from tests.helpers.worker import commit_group, wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.kube]
PARTITIONS = 8


def test_waiting_records_scale_the_workers_up_and_a_caught_up_mirror_back_down(
    kube_api: client.ApiClient,
    namespace: str,
    stack: MirrorStack,
    operator: OperatorProcess,
) -> None:
    topic = unique("scale")
    create_topics(stack.kafka_a.bootstrap_servers, [topic], partitions=PARTITIONS)
    # 1,500 records a partition waiting, against a target of 1,000: 1.5 times one worker.
    produce(stack.kafka_a.bootstrap_servers, topic, records(12_000, partitions=PARTITIONS))
    source = {"bootstrapServers": stack.kafka_a.bootstrap_servers}
    target = {"bootstrapServers": stack.kafka_b.bootstrap_servers}
    policy = {
        "minReplicas": 1,
        "maxReplicas": 4,
        "targetLagPerPartition": 1_000,
        "scaleDownWindowSeconds": 10,
    }
    apply(kube_api, mirror("scaled", namespace, source, target, autoscaling=policy))
    apply(kube_api, selection("scaled-topics", namespace, "scaled", [re.escape(topic)]))
    apps = client.AppsV1Api(kube_api)

    def deployment_replicas() -> int:
        """The worker Deployment's count (0 until the operator has made it)."""
        try:
            found: Any = apps.read_namespaced_deployment(worker_name("scaled"), namespace)
        except client.ApiException as error:
            if error.status == 404:
                return 0
            raise
        return int(found.spec.replicas)

    def autoscaling() -> dict[str, Any]:
        return dict(status_of(kube_api, namespace, "scaled").get("autoscaling") or {})

    wait_for(lambda: deployment_replicas() == 2, 90, lambda: f"a step up to 2: {autoscaling()}")
    first = autoscaling()
    # (With no worker running, the lag stays: the next reading already asks for 3, held back.)
    assert first["reason"].startswith("lag 1,500 records per partition (target 1,000)"), first
    # Five times the target now: ten workers' worth, held to maxReplicas, after the pause.
    produce(stack.kafka_a.bootstrap_servers, topic, records(28_000, partitions=PARTITIONS))
    wait_for(
        lambda: deployment_replicas() == 4,
        SCALE_UP_PAUSE_SECONDS + 60,
        lambda: f"the step to maxReplicas after the pause: {autoscaling()}",
    )
    second = autoscaling()
    assert second["reason"].endswith("; at maxReplicas"), second
    paused = datetime.fromisoformat(second["lastScaleTime"]) - datetime.fromisoformat(
        first["lastScaleTime"]
    )
    assert paused.total_seconds() >= SCALE_UP_PAUSE_SECONDS, (first, second)

    # Caught up: the workers' group commits the ends, as workers that copied everything do.
    group = f"kafka-mirror.{namespace}.scaled"
    commit_group(stack.kafka_a, group, topic, end_offsets(stack.kafka_a.bootstrap_servers, topic))
    wait_for(
        lambda: "wanted if the load stays low for 10 s" in autoscaling().get("reason", ""),
        30,
        lambda: f"the autoscaler to see the mirror caught up: {autoscaling()}",
    )
    assert deployment_replicas() == 4  # the window has not passed yet
    wait_for(
        lambda: deployment_replicas() == 1,
        60,
        lambda: f"the step down after the window: {autoscaling()}",
    )
    events = client.CoreV1Api(kube_api).list_namespaced_event(namespace).items
    scaled = [e.message for e in events if e.reason == "Scaled"]
    assert any(m.startswith("workers scaled up from 1 to 2: lag 1,500") for m in scaled), scaled
    assert any(m.startswith("workers scaled up from 2 to 4") for m in scaled), scaled
    assert any(m.startswith("workers scaled down from 4 to 1") for m in scaled), scaled
    assert "failed with an exception" not in operator.log()
