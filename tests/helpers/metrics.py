"""The Prometheus series names our code exports, and the metric names a PromQL expression uses.

Shared by the tests that check dashboards and alert rules against the code: a query on a
metric nobody exports would silently show "No data" or never fire.
"""

from __future__ import annotations

import re

from prometheus_client import CollectorRegistry

from kafka_mirror.controller.metrics import OperatorMetrics
from kafka_mirror.worker.metrics import WorkerMetrics

# The series each metric type exposes, as suffixes of the family's name.
SERIES_SUFFIXES: dict[str, tuple[str, ...]] = {
    "counter": ("_total", "_created"),
    "gauge": ("",),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "summary": ("", "_sum", "_count", "_created"),
    "info": ("_info",),
}
_METRIC = re.compile(r"\bkafka_mirror_\w+")
# PromQL string literals: label values, regexes (and `label_values` arguments) are not metrics.
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"|\'(?:[^\'\\]|\\.)*\'|`[^`]*`')


def series_names(registry: CollectorRegistry) -> set[str]:
    """Every series name the registry exposes, from its families' names and types."""
    names: set[str] = set()
    for family in registry.collect():
        if family.type not in SERIES_SUFFIXES:
            raise ValueError(f"{family.name}: no series suffixes known for type {family.type}")
        names.update(family.name + suffix for suffix in SERIES_SUFFIXES[family.type])
    return names


def worker_metric_names() -> set[str]:
    """The series a worker pod exports."""
    return series_names(WorkerMetrics().registry)


def operator_metric_names() -> set[str]:
    """The series the operator exports."""
    return series_names(OperatorMetrics().registry)


def exported_metric_names() -> set[str]:
    """The series the workers and the operator export."""
    return worker_metric_names() | operator_metric_names()


def metric_names_in(expr: str) -> set[str]:
    """The `kafka_mirror_*` metric names in a PromQL expression, outside string literals."""
    return set(_METRIC.findall(_STRING.sub('""', expr)))
