"""The README's main job on the real node (kafka_mirror_dev/node.py), against the session's node and
its Kafka clusters; and what `make demo` says where no node can run."""

from __future__ import annotations

import io
from pathlib import Path

import pytest
from kubernetes import client

from kafka_mirror_dev import demo
from kafka_mirror_dev.kafka import LocalKafka
from kafka_mirror_dev.node import KubeNode

pytestmark = [pytest.mark.kube, pytest.mark.kafka, pytest.mark.spark, pytest.mark.node]


def test_demo_runs_the_example_mirror_until_it_is_ready_with_no_lag_and_audits_it(
    kube_node: KubeNode,
    node_api: client.ApiClient,
    node_kafka_a: LocalKafka,
    node_kafka_b: LocalKafka,
    node_namespace: str,
    tmp_path: Path,
) -> None:
    out = io.StringIO()
    passed = demo.run_demo(
        node_api,
        kube_node.kubeconfig,
        kube_node.image,
        kube_node.audit_image,
        node_kafka_a.bootstrap_servers,
        node_kafka_b.bootstrap_servers,
        node_namespace,
        tmp_path,
        out,
    )
    shown = out.getvalue()
    print(shown)
    assert passed
    assert f"applied KafkaMirror {node_namespace}/a-to-b" in shown
    table = shown.split(f"$ kubectl get kafkamirrors -n {node_namespace}\n")[1].splitlines()
    header = ["NAME", "READY", "REASON", "REPLICAS", "ACTIVE", "TOPICS", "LAG", "LATENCY", "(S)"]
    assert table[0].split() == [*header, "AGE"]
    assert table[1].split()[:6] == ["a-to-b", "True", "Mirroring", "1", "2", "0"]
    assert "- accounting.invoices\n  - accounting.payments\n" in shown  # activeTopics
    assert "hr.salaries" not in shown.split("# status, abridged")[1]
    audit = shown.split("lastAudit:")[1]
    assert "result: Passed" in audit and "missing: 0" in audit


def test_demo_says_what_it_needs_where_no_node_can_run(monkeypatch: pytest.MonkeyPatch) -> None:
    needs = "a node needs root (containerd, the pods' bridge, iptables, cgroups)"
    monkeypatch.setattr(demo, "unavailable_reason", lambda: needs)
    out = io.StringIO()
    assert not demo.run(out)
    assert needs in out.getvalue() and "make kind-e2e" in out.getvalue()
