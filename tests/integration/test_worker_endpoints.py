"""A worker's health endpoints hold against a pod that stalls its port: 50 connections held
open to port 9400 and sending nothing (opened again as the worker closes them, as someone
stalling the port would), on the real node with the real kubelet probing. `/healthz` answers
within a second throughout, every liveness probe the kubelet makes meanwhile succeeds (its own
counters, `prober_probe_total`), and the worker is never restarted.

Whether another pod may reach the port at all is the NetworkPolicy's business; the node's
network (a plain bridge) enforces none, so what the chart asks of one is checked in
`test_helm.py`."""

from __future__ import annotations

import re
import socket
import threading
import time
import urllib.request
from typing import Any

import pytest
from kubernetes import client
from prometheus_client.parser import text_string_to_metric_families

from kafka_mirror.kube import apply
from kafka_mirror_dev.node import NODE_NAME
from tests.helpers.kafka import create_topics, produce, records, unique
from tests.helpers.node import NodeStack
from tests.helpers.objects import mirror, selection
from tests.helpers.worker import wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.kube, pytest.mark.node]

HELD = 50
PROBES = 4  # liveness probes, 10 s apart, made while the connections are held: the kubelet
# restarts a worker after three failed ones


class IdleConnections(threading.Thread):
    """`count` connections to address that never send a byte, each opened again once the
    server closes it, until stopped."""

    def __init__(self, address: tuple[str, int], count: int) -> None:
        super().__init__(daemon=True)
        self.address, self.count = address, count
        self.stopping = threading.Event()
        self.opened = 0

    def run(self) -> None:
        held: list[socket.socket] = []
        while not self.stopping.is_set():
            for connection in list(held):
                connection.setblocking(False)
                try:
                    closed = connection.recv(1) == b""
                except BlockingIOError:
                    closed = False
                if closed:
                    held.remove(connection)
                    connection.close()
            while len(held) < self.count:
                held.append(socket.create_connection(self.address, timeout=5))
                self.opened += 1
            self.stopping.wait(0.5)
        for connection in held:
            connection.close()


def liveness_probes(api: client.ApiClient, pod: str) -> dict[str, float]:
    """The kubelet's count of the pod's liveness probes, by result."""
    text = client.CoreV1Api(api).connect_get_node_proxy_with_path(NODE_NAME, "metrics/probes")
    counts: dict[str, float] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            labels = sample.labels
            if (
                sample.name == "prober_probe_total"
                and labels.get("pod") == pod
                and labels.get("probe_type") == "Liveness"
            ):
                counts[labels["result"]] = counts.get(labels["result"], 0) + sample.value
    return counts


def ready_worker(stack: NodeStack, mirror_name: str) -> Any:
    def ready() -> Any:
        for pod in stack.pods.workers(mirror_name):
            conditions = {c.type: c.status for c in pod.status.conditions or []}
            if conditions.get("Ready") == "True":
                return pod
        return None

    wait_for(lambda: ready() is not None, 180, "a ready worker")
    return ready()


def test_a_workers_probes_pass_while_50_idle_connections_are_held_to_its_port(
    node_stack: NodeStack,
) -> None:
    topic = unique("stall-")
    a, b = node_stack.kafka_a, node_stack.kafka_b
    create_topics(a.bootstrap_servers, [topic], partitions=2)
    produce(a.bootstrap_servers, topic, records(100, partitions=2))
    ns = node_stack.namespace
    apply(
        node_stack.api,
        mirror(
            "m",
            ns,
            {"bootstrapServers": a.bootstrap_servers},
            {"bootstrapServers": b.bootstrap_servers},
        ),
    )
    apply(node_stack.api, selection("all", ns, "m", [re.escape(topic)]))
    pod = ready_worker(node_stack, "m")
    name, ip = pod.metadata.name, pod.status.pod_ip
    before = liveness_probes(node_stack.api, name)

    stall = IdleConnections((ip, 9400), HELD)
    stall.start()
    try:
        slowest = 0.0

        def probed_enough() -> bool:
            nonlocal slowest
            started = time.monotonic()
            with urllib.request.urlopen(f"http://{ip}:9400/healthz", timeout=5) as answer:
                assert answer.status == 200
            slowest = max(slowest, time.monotonic() - started)
            now = liveness_probes(node_stack.api, name)
            return now.get("successful", 0) - before.get("successful", 0) >= PROBES

        wait_for(probed_enough, 120, f"{PROBES} liveness probes while {HELD} connections are held")
        after = liveness_probes(node_stack.api, name)
    finally:
        stall.stopping.set()
        stall.join(10)
    assert stall.opened >= HELD
    # Each probe above answered within its 5 s timeout, where a server taking one connection at a
    # time would wait out every held one (10 s each); how fast it answered is the machine's.
    print(f"slowest /healthz while {HELD} connections were held: {slowest:.2f} s")
    assert after.get("failed", 0) == before.get("failed", 0), (before, after)
    (status,) = (
        client.CoreV1Api(node_stack.api).read_namespaced_pod(name, ns).status.container_statuses
    )
    assert status.restart_count == 0
