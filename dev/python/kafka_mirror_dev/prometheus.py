"""A real Prometheus (built from its Go module) scraping what the chart's ServiceMonitors name and
evaluating the chart's alert rules, for the tests: `scrape_config` turns a ServiceMonitor into
the scrape configuration the Prometheus Operator would generate for it, so no operator is needed
in between."""

from __future__ import annotations

import json
import re
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from kafka_mirror_dev.builds import PROMETHEUS
from kafka_mirror_dev.processes import ServerProcess, answers, free_port


def _label(name: str) -> str:
    """A Kubernetes label name as Prometheus' service discovery writes it in a meta label."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", name)


def scrape_config(
    monitor: dict[str, Any], kubeconfig: Path, default_namespace: str, interval: str
) -> dict[str, Any]:
    """The scrape job of a ServiceMonitor's (one) endpoint, by Endpoints discovery: the Services
    its selector matches in its namespaces, their endpoints on the named port, its target labels
    copied from the Service, as the Prometheus Operator renders it."""
    spec = monitor["spec"]
    (endpoint,) = spec["endpoints"]
    names = spec.get("namespaceSelector", {}).get("matchNames") or [default_namespace]
    keep = [
        {
            "source_labels": [f"__meta_kubernetes_service_label_{_label(key)}"],
            "regex": value,
            "action": "keep",
        }
        for key, value in sorted(spec["selector"]["matchLabels"].items())
    ]
    keep.append(
        {
            "source_labels": ["__meta_kubernetes_endpoint_port_name"],
            "regex": endpoint["port"],
            "action": "keep",
        }
    )
    copied = [
        {
            "source_labels": [f"__meta_kubernetes_service_label_{_label(label)}"],
            "target_label": _label(label),
        }
        for label in spec.get("targetLabels", [])
    ]
    located = [
        {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
        {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
    ]
    return {
        "job_name": f"serviceMonitor/{monitor['metadata']['name']}",
        "scrape_interval": interval,
        "honor_labels": bool(endpoint.get("honorLabels", False)),
        "kubernetes_sd_configs": [
            {
                "role": "endpoints",
                "kubeconfig_file": str(kubeconfig),
                "namespaces": {"names": names},
            }
        ],
        "relabel_configs": keep + located + copied,
    }


class PrometheusServer:
    """Prometheus on a loopback port, with the given scrape jobs and rule groups."""

    def __init__(
        self, workdir: Path, jobs: list[dict[str, Any]], rules: dict[str, Any], interval: str
    ) -> None:
        workdir.mkdir(parents=True, exist_ok=True)
        (workdir / "rules.yaml").write_text(yaml.safe_dump(rules))
        config = {
            "global": {"scrape_interval": interval, "evaluation_interval": interval},
            "rule_files": ["rules.yaml"],
            "scrape_configs": jobs,
        }
        (workdir / "prometheus.yaml").write_text(yaml.safe_dump(config))
        self.port = free_port()
        self.process = ServerProcess(
            "prometheus",
            [
                str(PROMETHEUS.ensure()),
                f"--config.file={workdir / 'prometheus.yaml'}",
                f"--storage.tsdb.path={workdir / 'data'}",
                f"--web.listen-address=127.0.0.1:{self.port}",
            ],
            workdir / "prometheus.log",
        )

    def __enter__(self) -> PrometheusServer:
        self.process.start()
        self.process.wait_until(self._ready, 60, "ready")
        return self

    def __exit__(self, *_: object) -> None:
        self.process.stop()

    def _ready(self) -> bool:
        return answers(f"http://127.0.0.1:{self.port}/-/ready")

    def _api(self, path: str, **query: str) -> Any:
        url = f"http://127.0.0.1:{self.port}/api/v1/{path}?{urllib.parse.urlencode(query)}"
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.load(response)["data"]

    def query(self, expression: str) -> list[dict[str, Any]]:
        """The instant vector of an expression now."""
        return list(self._api("query", query=expression)["result"])

    def alerts(self) -> list[dict[str, Any]]:
        """The alerts pending or firing now (a resolved one is gone from the list)."""
        return list(self._api("alerts")["alerts"])

    def targets(self) -> list[dict[str, Any]]:
        return list(self._api("targets", state="active")["activeTargets"])

    def log_tail(self) -> str:
        return self.process.log_tail()
