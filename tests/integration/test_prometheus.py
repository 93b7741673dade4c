"""A real Prometheus (its Go module) scrapes a mirror's worker pods on the real node through the
chart's workers ServiceMonitor (as the Prometheus Operator renders it: Endpoints discovery of the
`<mirror>-metrics` Services), and the operator, which runs here as a local process, at its
metrics port with the operator ServiceMonitor's `honorLabels`; it evaluates the chart's rules.
The lag alert fires on a paused mirror while records keep coming, and resolves once the mirror
runs again and has caught up."""

from __future__ import annotations

import re
import threading
from pathlib import Path
from typing import Any

import pytest
import yaml

from kafka_mirror.api.models import API_VERSION
from kafka_mirror.kube import apply, merge_patch
from kafka_mirror_dev.prometheus import PrometheusServer, scrape_config
from tests.helpers.content import check_content
from tests.helpers.helm import CHART, run_helm
from tests.helpers.kafka import consume, create_topics, produce, records, unique
from tests.helpers.node import NodeStack
from tests.helpers.objects import mirror, selection, status_of
from tests.helpers.worker import wait_for

pytestmark = [pytest.mark.kafka, pytest.mark.kube, pytest.mark.node, pytest.mark.helm]
INTERVAL = "2s"  # scrapes and rule evaluations, as often as the test operator refreshes
RELEASE = "r"
LAG_ALERT = "KafkaMirrorLagGrowing"


def chart_monitoring(helm: Path, home: Path, namespace: str) -> tuple[dict[str, Any], ...]:
    """The chart's ServiceMonitors (operator, workers) and its rule groups, the lag alert's
    `for` shortened so that the test need not wait its default quarter of an hour."""
    rendered = run_helm(
        helm,
        home,
        *("template", RELEASE, str(CHART), "--namespace", namespace),
        *("--set", "metrics.serviceMonitor.enabled=true,prometheusRule.enabled=true"),
        *("--set", "prometheusRule.lagGrowingFor=10s"),
        *("--show-only", "templates/servicemonitor.yaml"),
        *("--show-only", "templates/prometheusrule.yaml"),
    )
    documents = [d for d in yaml.safe_load_all(rendered) if d]
    operator, workers = (d for d in documents if d["kind"] == "ServiceMonitor")
    (rule,) = (d for d in documents if d["kind"] == "PrometheusRule")
    return operator, workers, rule["spec"]


@pytest.mark.timeout(900)
def test_prometheus_scrapes_the_workers_and_the_lag_alert_fires_while_paused_and_resolves(
    node_stack: NodeStack, helm: Path, tmp_path: Path
) -> None:
    namespace, name = node_stack.namespace, "watched"
    topic = f"{unique()}.events"
    a, b = node_stack.kafka_a.bootstrap_servers, node_stack.kafka_b.bootstrap_servers
    create_topics(a, [topic], partitions=3)
    apply(node_stack.api, mirror(name, namespace, {"bootstrapServers": a}, {"bootstrapServers": b}))
    apply(node_stack.api, selection("events", namespace, name, [re.escape(topic)]))
    produce(a, topic, records(300, partitions=3))
    assert len(consume(b, f"{topic}.A", 300, timeout=120)) == 300

    operator_monitor, workers_monitor, rules = chart_monitoring(helm, tmp_path, namespace)
    workers_job = scrape_config(
        workers_monitor, node_stack.operator.kubeconfig, namespace, INTERVAL
    )
    (operator_endpoint,) = operator_monitor["spec"]["endpoints"]
    operator_job = {
        "job_name": "operator",
        "honor_labels": operator_endpoint["honorLabels"],
        "static_configs": [{"targets": [f"127.0.0.1:{node_stack.operator.metrics_port}"]}],
    }
    lag = f'kafka_mirror_total_lag_records{{namespace="{namespace}", mirror="{name}"}}'
    server = PrometheusServer(tmp_path / "prometheus", [operator_job, workers_job], rules, INTERVAL)
    with server as prometheus:

        def worker_targets() -> list[dict[str, Any]]:
            return [
                t
                for t in prometheus.targets()
                if t["labels"].get("job") == workers_job["job_name"]
                and t["health"] == "up"
                and t["labels"].get("kafkamirror_io_mirror") == name
            ]

        wait_for(
            lambda: len(worker_targets()) == 1,
            120,
            lambda: f"the worker pod scraped through the Service: {prometheus.targets()}",
        )
        # The worker's own series, under its pod and the mirror's namespace.
        (target,) = worker_targets()
        assert target["labels"]["namespace"] == namespace
        wait_for(
            lambda: bool(
                prometheus.query(f'kafka_mirror_records_total{{pod="{target["labels"]["pod"]}"}}')
            ),
            60,
            "the worker's records counter in Prometheus",
        )
        wait_for(
            lambda: [s["value"][1] for s in prometheus.query(lag)] == ["0"],
            60,
            lambda: f"the operator's lag series at 0: {prometheus.query(lag)}",
        )
        assert not alerts_named(prometheus.alerts(), LAG_ALERT)

        # Paused, with records still coming: the lag grows and the alert fires.
        pause(node_stack, name, True)
        produced = [300]
        stop = threading.Event()

        def keep_producing() -> None:
            while not stop.wait(0.5):
                produce(a, topic, records(30, partitions=3))
                produced[0] += 30

        producer = threading.Thread(target=keep_producing, daemon=True)
        producer.start()
        try:
            wait_for(
                lambda: any(
                    alert["state"] == "firing"
                    for alert in alerts_named(prometheus.alerts(), LAG_ALERT)
                ),
                120,
                lambda: (
                    f"{LAG_ALERT} firing: alerts {prometheus.alerts()}, lag {prometheus.query(lag)}"
                ),
            )
        finally:
            stop.set()
            producer.join(30)
        (firing,) = alerts_named(prometheus.alerts(), LAG_ALERT)
        assert (firing["labels"]["namespace"], firing["labels"]["mirror"]) == (namespace, name)

        # Running again, it catches up, and the alert resolves.
        pause(node_stack, name, False)
        wait_for(
            lambda: not alerts_named(prometheus.alerts(), LAG_ALERT),
            180,
            lambda: (
                f"{LAG_ALERT} resolved: alerts {prometheus.alerts()}, "
                f"status lag {status_of(node_stack.api, namespace, name).get('totalLag')}"
            ),
        )
    # Every record on B, by content, as Kafka has them.
    report = check_content(a, b, {topic: f"{topic}.A"})
    assert report.lossless and report.source_records == produced[0], report


def alerts_named(alerts: list[dict[str, Any]], alert: str) -> list[dict[str, Any]]:
    return [a for a in alerts if a["labels"]["alertname"] == alert]


def pause(stack: NodeStack, name: str, paused: bool) -> None:
    patch = {"spec": {"paused": paused}}
    merge_patch(stack.api, API_VERSION, "KafkaMirror", stack.namespace, name, patch, "test")
