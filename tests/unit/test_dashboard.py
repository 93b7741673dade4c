"""The Grafana dashboard in the Helm chart is well-formed and queries only metrics we export."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest

from tests.helpers.metrics import (
    exported_metric_names,
    metric_names_in,
    operator_metric_names,
    series_names,
    worker_metric_names,
)

DASHBOARD = (
    Path(__file__).resolve().parents[2]
    / "charts"
    / "kafka-mirror-operator"
    / "dashboards"
    / "kafka-mirror.json"
)
GRID_COLUMNS = 24
PANEL_TYPES = {"row", "stat", "timeseries", "table"}
DATASOURCE = {"type": "prometheus", "uid": "${datasource}"}
WORKER_FILTER = 'namespace=~"$namespace", service=~"$mirror-metrics"'
OPERATOR_FILTER = 'namespace=~"$namespace", mirror=~"$mirror"'
# One metric per part of the dashboard: throughput, latency, lag, checkpoints, health, audit.
COVERED = (
    "kafka_mirror_records_total",
    "kafka_mirror_bytes_total",
    "kafka_mirror_replication_latency_seconds_bucket",
    "kafka_mirror_lag_records",
    "kafka_mirror_checkpoint_latency_seconds_bucket",
    "kafka_mirror_cluster_reachable",
    "kafka_mirror_errors_total",
    "kafka_mirror_ready",
    "kafka_mirror_workers_ready",
    "kafka_mirror_workers_desired",
    "kafka_mirror_total_lag_records",
    "kafka_mirror_max_latency_seconds",
    "kafka_mirror_rpo_target_seconds",
    "kafka_mirror_audit_result",
    "kafka_mirror_audit_missing_records",
    "kafka_mirror_audit_duplicate_records",
    "kafka_mirror_audit_unsafe_checkpoints",
    "kafka_mirror_audit_timestamp_seconds",
)


@pytest.fixture(scope="module")
def dashboard() -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(DASHBOARD.read_text())
    return loaded


def _panels(dashboard: dict[str, Any]) -> list[dict[str, Any]]:
    """All panels, those inside collapsed rows included."""
    panels: list[dict[str, Any]] = []
    for panel in dashboard["panels"]:
        panels.append(panel)
        panels.extend(panel.get("panels", []))
    return panels


def _queries(dashboard: dict[str, Any]) -> list[str]:
    """Every PromQL expression: the panels' targets and the template variables' queries."""
    exprs = [t["expr"] for p in _panels(dashboard) for t in p.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            query = variable["query"]
            exprs.append(query["query"] if isinstance(query, dict) else query)
    return exprs


def test_dashboard_is_formatted_with_two_spaces(dashboard: dict[str, Any]) -> None:
    assert DASHBOARD.read_text() == json.dumps(dashboard, indent=2, ensure_ascii=False) + "\n"


def test_dashboard_has_grafanas_top_level_fields(dashboard: dict[str, Any]) -> None:
    assert dashboard["title"] == "Kafka mirroring"
    assert dashboard["uid"] == "kafka-mirror"
    assert type(dashboard["schemaVersion"]) is int
    assert dashboard["schemaVersion"] == 39
    assert isinstance(dashboard["templating"]["list"], list)
    assert isinstance(dashboard["panels"], list) and dashboard["panels"]
    assert dashboard["time"].keys() == {"from", "to"}


def test_variables_select_the_data_source_namespace_and_mirror(dashboard: dict[str, Any]) -> None:
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables.keys() == {"datasource", "namespace", "mirror"}
    assert variables["datasource"]["type"] == "datasource"
    assert variables["datasource"]["query"] == "prometheus"
    expected = {
        "namespace": "label_values(kafka_mirror_ready, namespace)",
        "mirror": 'label_values(kafka_mirror_ready{namespace=~"$namespace"}, mirror)',
    }
    for name, query in expected.items():
        assert variables[name]["type"] == "query"
        assert variables[name]["query"] == query
        assert variables[name]["datasource"] == DATASOURCE


def test_panels_are_well_formed(dashboard: dict[str, Any]) -> None:
    panels = _panels(dashboard)
    ids = [p["id"] for p in panels]
    assert all(type(i) is int for i in ids), ids
    assert len(ids) == len(set(ids)), f"duplicate panel ids: {ids}"
    for panel in panels:
        where = f"panel {panel['id']} ({panel.get('title')!r})"
        assert panel["type"] in PANEL_TYPES, where
        assert isinstance(panel["title"], str) and panel["title"], where
        grid = panel["gridPos"]
        assert grid.keys() >= {"x", "y", "w", "h"}, where
        assert all(type(grid[k]) is int for k in "xywh"), where
        assert grid["x"] >= 0 and grid["y"] >= 0 and grid["w"] >= 1 and grid["h"] >= 1, where
        assert grid["x"] + grid["w"] <= GRID_COLUMNS, where
        if panel["type"] == "row":
            assert grid["w"] == GRID_COLUMNS, where
            continue
        assert panel["datasource"] == DATASOURCE, where
        assert panel["targets"], where
        ref_ids = [t["refId"] for t in panel["targets"]]
        assert len(ref_ids) == len(set(ref_ids)), where
        for target in panel["targets"]:
            assert isinstance(target["refId"], str) and target["refId"], where
            assert isinstance(target["expr"], str) and target["expr"].strip(), where
            assert target.get("datasource", DATASOURCE) == DATASOURCE, where


def test_panels_do_not_overlap(dashboard: dict[str, Any]) -> None:
    taken: dict[tuple[int, int], int] = {}
    for panel in dashboard["panels"]:  # a collapsed row's panels are laid out when it opens
        grid = panel["gridPos"]
        for x in range(grid["x"], grid["x"] + grid["w"]):
            for y in range(grid["y"], grid["y"] + grid["h"]):
                assert (x, y) not in taken, f"panels {taken[x, y]} and {panel['id']} overlap"
                taken[x, y] = panel["id"]


def test_queries_use_only_exported_metrics(dashboard: dict[str, Any]) -> None:
    exported = exported_metric_names()
    for expr in _queries(dashboard):
        used = metric_names_in(expr)
        assert used, f"no kafka_mirror metric in {expr!r}"
        assert used <= exported, f"not exported: {sorted(used - exported)} in {expr!r}"


def test_queries_filter_by_the_selected_namespace_and_mirror(dashboard: dict[str, Any]) -> None:
    """Worker series are told apart by their Service (`<mirror>-metrics`), operator series by
    their own `mirror` label."""
    workers, operator = worker_metric_names(), operator_metric_names()
    for panel in _panels(dashboard):
        for target in panel.get("targets", []):
            expr, used = target["expr"], metric_names_in(target["expr"])
            if used & workers:
                assert WORKER_FILTER in expr, expr
            if used & operator:
                assert OPERATOR_FILTER in expr, expr


@pytest.mark.parametrize("metric", COVERED)
def test_dashboard_covers(dashboard: dict[str, Any], metric: str) -> None:
    assert any(metric in metric_names_in(expr) for expr in _queries(dashboard))


def test_series_names_match_what_prometheus_client_writes() -> None:
    """The type-to-suffix table in the helper agrees with the client library's exposition."""
    registry = CollectorRegistry()
    Counter("c", "A counter.", ["l"], registry=registry).labels("x").inc()
    Gauge("g", "A gauge.", registry=registry).set(1)
    Histogram("h", "A histogram.", registry=registry).observe(1)
    written = {
        re.split(r"[{ ]", line)[0]
        for line in generate_latest(registry).decode().splitlines()
        if line and not line.startswith("#")
    }
    assert written <= series_names(registry)
    assert {"c_total", "g", "h_bucket", "h_sum", "h_count"} <= written


def test_metric_names_in_skips_string_literals() -> None:
    expr = 'sum(rate(kafka_mirror_records_total{topic="kafka_mirror_x"}[5m])) > 0'
    assert metric_names_in(expr) == {"kafka_mirror_records_total"}
