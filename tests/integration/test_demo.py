"""The README's main job, against the session's real API server."""

from __future__ import annotations

import io

import pytest
from kubernetes import client

from kafka_mirror.demo import apply_examples
from kafka_mirror.devstack.kafka import KafkaCluster

pytestmark = pytest.mark.kube


def test_demo_applies_the_examples_and_shows_them(
    kube_api: client.ApiClient, kafka_a: KafkaCluster, kafka_b: KafkaCluster, namespace: str
) -> None:
    out = io.StringIO()
    apply_examples(kube_api, kafka_a.bootstrap_servers, kafka_b.bootstrap_servers, namespace, out)
    shown = out.getvalue()
    assert f"applied KafkaMirror {namespace}/a-to-b" in shown
    assert f"bootstrapServers: {kafka_a.bootstrap_servers}" in shown
    assert "policy: suffix" in shown  # a default the server filled in
    header = shown.split(f"$ kubectl get kafkamirrors -n {namespace}\n")[1].splitlines()[0]
    assert header.split() == ["NAME", "READY", "REPLICAS", "ACTIVE", "TOPICS", "LAG", "AGE"]
    assert "a-to-b" in shown.split(f"$ kubectl get kafkamirrors -n {namespace}\n")[1]
