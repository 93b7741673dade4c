"""The README's main job, against the session's real API server and Kafka clusters."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from kubernetes import client

from kafka_mirror.demo import run_demo
from kafka_mirror.devstack.kafka import KafkaCluster
from kafka_mirror.devstack.kube import KubeApiServer

pytestmark = [pytest.mark.kube, pytest.mark.kafka, pytest.mark.spark]


def test_demo_runs_the_example_mirror_until_it_is_ready_with_no_lag_and_audits_it(
    kube_apiserver: KubeApiServer,
    kube_api: client.ApiClient,
    kafka_a: KafkaCluster,
    kafka_b: KafkaCluster,
    namespace: str,
    tmp_path: Path,
) -> None:
    out = io.StringIO()
    caught_up = run_demo(
        kube_api,
        kube_apiserver.kubeconfig,
        kafka_a.bootstrap_servers,
        kafka_b.bootstrap_servers,
        namespace,
        tmp_path,
        out,
    )
    shown = out.getvalue()
    print(shown)
    assert caught_up
    assert f"applied KafkaMirror {namespace}/a-to-b" in shown
    table = shown.split(f"$ kubectl get kafkamirrors -n {namespace}\n")[1].splitlines()
    assert table[0].split() == ["NAME", "READY", "REPLICAS", "ACTIVE", "TOPICS", "LAG", "AGE"]
    assert table[1].split()[:5] == ["a-to-b", "True", "1", "2", "0"]
    assert "- accounting.invoices\n  - accounting.payments\n" in shown  # activeTopics
    assert "hr.salaries" not in shown.split("# status, abridged")[1]
    audit = shown.split("lastAudit:")[1]
    assert "result: Passed" in audit and "missing: 0" in audit
