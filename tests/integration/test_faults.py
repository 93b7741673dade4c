"""Faults against the real parts, each ending with the real audit (PySpark reading A and B):
worker pods killed again and again on the real node as a cluster kills them (a container
SIGKILLed through the runtime, its process SIGKILLed on the node, a pod deleted), the target and
the source broker restarted mid-stream, the operator killed mid-reconcile, the node's API server
restarted. Each loses no record, re-sends at most what was not committed when the fault hit,
and recovers; the figures are printed as a table (docs/reliability.md has a run's)."""

from __future__ import annotations

import re
import time
from functools import partial
from typing import Any

import pytest
import yaml
from kubernetes import client
from pyspark.sql import SparkSession

from kafka_mirror import render
from kafka_mirror.kube import apply
from kafka_mirror_dev.node import KubeNode
from tests.helpers.faults import (
    Outcome,
    SteadyProducer,
    audit_and_record,
    resend_bound,
    seconds_until_committed,
)
from tests.helpers.kafka import create_topics, end_offsets, produce, records, unique
from tests.helpers.node import NodeStack
from tests.helpers.objects import condition, get_custom, mirror, selection, status_of
from tests.helpers.stack import MirrorStack
from tests.helpers.worker import (
    group_offsets,
    wait_for,
    worker_config,
    worker_group,
)

pytestmark = [pytest.mark.kafka, pytest.mark.spark]


def applied_config(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    """The worker configuration the operator wrote, as its pods read it."""
    config_map = client.CoreV1Api(api).read_namespaced_config_map(
        render.config_map_name(name), namespace
    )
    return dict(yaml.safe_load(config_map.data[render.CONFIG_FILE]))


def is_ready(api: client.ApiClient, namespace: str, name: str) -> bool:
    found = get_custom(api, namespace, "kafkamirrors", name)
    return condition(found, "Ready").get("status") == "True"


# --- the worker ----------------------------------------------------------------------------


@pytest.mark.kube
@pytest.mark.node
def test_worker_pods_killed_every_few_seconds_lose_nothing(
    node_stack: NodeStack,
    spark: SparkSession,
    outcomes: list[Outcome],
) -> None:
    kafka_a, api, namespace = node_stack.kafka_a, node_stack.api, node_stack.namespace
    topic = unique("kills")
    create_topics(kafka_a.bootstrap_servers, [topic], partitions=8)
    plain = {"bootstrapServers": kafka_a.bootstrap_servers}
    target = {"bootstrapServers": node_stack.kafka_b.bootstrap_servers}
    apply(api, mirror("m", namespace, plain, target, replicas=2))
    apply(api, selection("kills", namespace, "m", [re.escape(topic)]))
    wait_for(lambda: is_ready(api, namespace, "m"), 120, "the mirror to be Ready")
    config = applied_config(api, namespace, "m")
    group = worker_group(config)
    # No commit, no leaving the group, each time: the cluster's three ways to end a worker.
    ways = [
        node_stack.pods.kill_container,
        node_stack.pods.kill_process,
        partial(node_stack.pods.delete, grace_seconds=0),
    ]
    producer = SteadyProducer(kafka_a, topic, 1_000_000, per_second=40_000)
    producer.start()
    kills, bound, last_kill = 0, 0, time.monotonic()
    while producer.is_alive() or kills < 6:
        time.sleep(4)
        running = [p for p in node_stack.pods.workers("m") if node_stack.pods.running_containers(p)]
        if not running:
            continue  # both restarting (the kubelet's back-off): nothing to kill now
        bound += resend_bound(kafka_a, group, [topic], partial(ways[kills % 3], running[0]))
        last_kill = time.monotonic()
        kills += 1
    producer.finish()
    recovery = seconds_until_committed(kafka_a, group, [topic], since=last_kill)
    fault = (
        f"worker pods killed {kills} times, every 4 s (container SIGKILL, process SIGKILL "
        "on the node, pod deleted)"
    )
    audit_and_record(outcomes, fault, kafka_a, config, [topic], spark, bound, recovery)


@pytest.mark.parametrize("broker", ["target", "source"])
def test_a_broker_restarted_mid_stream_loses_nothing(
    broker: str,
    stack: MirrorStack,
    outcomes: list[Outcome],
) -> None:
    topic = unique(f"{broker}-restart")
    create_topics(stack.kafka_a.bootstrap_servers, [topic], partitions=8)
    config = worker_config(stack.kafka_a, stack.kafka_b, [re.escape(topic)])
    group = worker_group(config)
    stack.start_worker(config)
    producer = SteadyProducer(stack.kafka_a, topic, 200_000, per_second=10_000)
    producer.start()
    wait_for(
        lambda: sum(group_offsets(stack.kafka_a, group).values()) > 20_000,
        60,
        "mirroring to be under way (20,000 records committed)",
    )
    restarted = stack.kafka_b if broker == "target" else stack.kafka_a

    def restart() -> None:
        restarted.stop()
        time.sleep(5)
        restarted.start()

    bound = resend_bound(stack.kafka_a, group, [topic], restart)
    back = time.monotonic()
    recovery = seconds_until_committed(stack.kafka_a, group, [topic], since=back)
    producer.finish()
    fault = f"{broker} broker stopped for 5 s mid-stream"
    audit_and_record(outcomes, fault, stack.kafka_a, config, [topic], stack.spark, bound, recovery)


# --- the operator and the API server ---------------------------------------------------------


@pytest.mark.kube
@pytest.mark.node
def test_an_operator_killed_mid_reconcile_loses_nothing_and_converges(
    node_stack: NodeStack,
    spark: SparkSession,
    outcomes: list[Outcome],
) -> None:
    first, second = unique("op-a"), unique("op-b")
    create_topics(node_stack.kafka_a.bootstrap_servers, [first, second], partitions=8)
    plain = {"bootstrapServers": node_stack.kafka_a.bootstrap_servers}
    target = {"bootstrapServers": node_stack.kafka_b.bootstrap_servers}
    apply(node_stack.api, mirror("m", node_stack.namespace, plain, target, replicas=2))
    apply(node_stack.api, selection("first", node_stack.namespace, "m", [re.escape(first)]))
    wait_for(
        lambda: is_ready(node_stack.api, node_stack.namespace, "m"), 120, "the mirror to be Ready"
    )
    producers = [
        SteadyProducer(node_stack.kafka_a, t, 100_000, per_second=5_000) for t in (first, second)
    ]
    for producer in producers:
        producer.start()
    time.sleep(3)

    # A second selection and a third replica, and the operator killed while it applies them.
    apply(node_stack.api, selection("second", node_stack.namespace, "m", [re.escape(second)]))
    apply(node_stack.api, mirror("m", node_stack.namespace, plain, target, replicas=3))
    time.sleep(0.1)  # the operator has the watch events and is applying the children
    group = f"kafka-mirror.{node_stack.namespace}.m"
    bound = resend_bound(node_stack.kafka_a, group, [first, second], node_stack.operator.kill)
    node_stack.operator.start()
    restarted = time.monotonic()
    wait_for(
        lambda: (
            len(node_stack.pods.workers("m")) == 3
            and status_of(node_stack.api, node_stack.namespace, "m").get("activeTopicCount") == 2
            and is_ready(node_stack.api, node_stack.namespace, "m")
        ),
        120,
        "three workers mirroring both topics, Ready",
    )
    recovery = time.monotonic() - restarted
    for producer in producers:
        producer.finish()
    config = applied_config(node_stack.api, node_stack.namespace, "m")
    fault = "operator SIGKILLed 0.1 s after a new selection and replicas 2→3"
    audit_and_record(
        outcomes, fault, node_stack.kafka_a, config, [first, second], spark, bound, recovery
    )


@pytest.mark.kube
@pytest.mark.node
def test_an_api_server_restart_loses_nothing_and_the_status_resumes(
    node_stack: NodeStack,
    kube_node: KubeNode,
    spark: SparkSession,
    outcomes: list[Outcome],
) -> None:
    p = unique("api")
    topic, later = f"{p}.first", f"{p}.later"
    create_topics(node_stack.kafka_a.bootstrap_servers, [topic], partitions=8)
    plain = {"bootstrapServers": node_stack.kafka_a.bootstrap_servers}
    target = {"bootstrapServers": node_stack.kafka_b.bootstrap_servers}
    apply(node_stack.api, mirror("m", node_stack.namespace, plain, target))
    apply(node_stack.api, selection("all", node_stack.namespace, "m", [f"{re.escape(p)}\\..*"]))
    wait_for(
        lambda: is_ready(node_stack.api, node_stack.namespace, "m"), 120, "the mirror to be Ready"
    )
    producer = SteadyProducer(node_stack.kafka_a, topic, 100_000, per_second=5_000)
    producer.start()
    time.sleep(3)

    before = sum(end_offsets(node_stack.kafka_b.bootstrap_servers, f"{topic}.A").values())
    bound = resend_bound(
        node_stack.kafka_a,
        f"kafka-mirror.{node_stack.namespace}.m",
        [topic],
        lambda: kube_node.apiserver.restart_apiserver(down_seconds=10),
    )
    back = time.monotonic()
    # The workers need no API server: they mirrored all along.
    assert sum(end_offsets(node_stack.kafka_b.bootstrap_servers, f"{topic}.A").values()) > before
    # The operator is back at work: a topic created now shows in the status.
    create_topics(node_stack.kafka_a.bootstrap_servers, [later], partitions=1)
    produce(node_stack.kafka_a.bootstrap_servers, later, records(100, partitions=1))
    wait_for(
        lambda: (
            later
            in (status_of(node_stack.api, node_stack.namespace, "m").get("activeTopics") or [])
        ),
        120,
        "the status to show the topic created after the restart",
    )
    recovery = time.monotonic() - back
    assert node_stack.operator.running()
    producer.finish()
    config = applied_config(node_stack.api, node_stack.namespace, "m")
    fault = "kube-apiserver down for 10 s (recovery: status current again)"
    audit_and_record(
        outcomes, fault, node_stack.kafka_a, config, [topic, later], spark, bound, recovery
    )
