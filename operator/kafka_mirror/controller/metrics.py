"""The operator's Prometheus metrics: each mirror's status as gauges, and converge timings.

The workers export the per-partition figures; these are what only the operator knows (the
conditions, the Deployment's readiness, the audit's verdict), so dashboards and alerts need no
kube-state-metrics. The status loop refreshes them; a deleted mirror's series go with it.
"""

from __future__ import annotations

from contextlib import suppress

from prometheus_client import CollectorRegistry, Gauge, Histogram, make_wsgi_app

from kafka_mirror import endpoints
from kafka_mirror.api.status import KafkaMirrorStatus

MIRROR_LABELS = ["namespace", "mirror"]
AUDIT_RESULTS = ("Passed", "Failed", "Error")


class OperatorMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()

        def gauge(name: str, documentation: str, extra: tuple[str, ...] = ()) -> Gauge:
            labels = [*MIRROR_LABELS, *extra]
            return Gauge(name, documentation, labels, registry=self.registry)

        self.ready = gauge("kafka_mirror_ready", "1 when the mirror's Ready condition is True.")
        self.condition = gauge(
            "kafka_mirror_condition",
            "1 for each condition type and status the mirror has now.",
            ("type", "status", "reason"),
        )
        self.workers_desired = gauge("kafka_mirror_workers_desired", "Worker replicas wanted.")
        self.workers_ready = gauge("kafka_mirror_workers_ready", "Worker replicas ready.")
        self.active_topics = gauge("kafka_mirror_active_topics", "Topics being mirrored.")
        self.skipped_topics = gauge("kafka_mirror_skipped_topics", "Selected topics not mirrored.")
        self.total_lag = gauge(
            "kafka_mirror_total_lag_records", "Records on the source not yet mirrored, all topics."
        )
        self.max_latency = gauge(
            "kafka_mirror_max_latency_seconds",
            "Age of the oldest record not yet mirrored (0 when caught up).",
        )
        self.rpo_target = gauge(
            "kafka_mirror_rpo_target_seconds",
            "spec.rpoTargetSeconds: the recovery point objective the latency is held against.",
        )
        self.audit_result = gauge(
            "kafka_mirror_audit_result",
            "1 for the result of the last audit (Passed, Failed or Error).",
            ("result",),
        )
        self.audit_time = gauge(
            "kafka_mirror_audit_timestamp_seconds", "When the last audit ran (Unix time)."
        )
        self.audit_missing = gauge(
            "kafka_mirror_audit_missing_records", "Records the last audit found missing on B."
        )
        self.audit_duplicates = gauge(
            "kafka_mirror_audit_duplicate_records", "Records the last audit found twice on B."
        )
        self.audit_unsafe_checkpoints = gauge(
            "kafka_mirror_audit_unsafe_checkpoints", "Checkpoints the last audit found unsafe."
        )
        self.converge_seconds = Histogram(
            "kafka_mirror_operator_converge_seconds",
            "Time to apply a mirror's children (ConfigMap, Deployment, Service, CronJob).",
            registry=self.registry,
        )
        self.status_refreshed = Gauge(
            "kafka_mirror_operator_status_refreshed_timestamp_seconds",
            "When the status loop last listed and refreshed every mirror and selection (Unix "
            "time; 0 until then, and on a replica that is not the leader).",
            registry=self.registry,
        )
        self._per_mirror = [
            self.ready,
            self.workers_desired,
            self.workers_ready,
            self.active_topics,
            self.skipped_topics,
            self.total_lag,
            self.max_latency,
            self.rpo_target,
            self.audit_time,
            self.audit_missing,
            self.audit_duplicates,
            self.audit_unsafe_checkpoints,
        ]
        self._conditions: dict[tuple[str, str], list[tuple[str, str, str]]] = {}

    def serve(self, port: int) -> None:
        try:
            endpoints.serve(make_wsgi_app(self.registry), port, "metrics")
        except OSError as error:
            raise SystemExit(
                f"cannot serve metrics on port {port}: {error.strerror}; "
                "choose another with --metrics-port"
            ) from error

    def observe(
        self,
        namespace: str,
        mirror: str,
        status: KafkaMirrorStatus,
        rpo_target_seconds: int | None = None,
    ) -> None:
        labels = (namespace, mirror)
        ready = any(c.type == "Ready" and c.status == "True" for c in status.conditions)
        self.ready.labels(*labels).set(1 if ready else 0)
        for stale in self._conditions.pop(labels, []):
            self.condition.remove(*labels, *stale)
        current: list[tuple[str, str, str]] = [
            (c.type, c.status, c.reason) for c in status.conditions
        ]
        for condition in current:
            self.condition.labels(*labels, *condition).set(1)
        self._conditions[labels] = current
        self.workers_desired.labels(*labels).set(status.replicas)
        self.workers_ready.labels(*labels).set(status.ready_replicas)
        self.active_topics.labels(*labels).set(status.active_topic_count)
        self.skipped_topics.labels(*labels).set(len(status.skipped_topics))
        self.total_lag.labels(*labels).set(status.total_lag)
        self.max_latency.labels(*labels).set(status.max_latency_seconds or 0)
        if rpo_target_seconds is None:
            with suppress(KeyError):  # a target removed from the spec: its series goes
                self.rpo_target.remove(*labels)
        else:
            self.rpo_target.labels(*labels).set(rpo_target_seconds)
        audit = status.last_audit
        if audit is None or audit.result is None:
            return
        for result in AUDIT_RESULTS:
            self.audit_result.labels(*labels, result).set(1 if audit.result == result else 0)
        if audit.time is not None:
            self.audit_time.labels(*labels).set(audit.time.timestamp())
        self.audit_missing.labels(*labels).set(audit.missing)
        self.audit_duplicates.labels(*labels).set(audit.duplicates)
        self.audit_unsafe_checkpoints.labels(*labels).set(audit.unsafe_checkpoints)

    def forget(self, namespace: str, mirror: str) -> None:
        labels = (namespace, mirror)
        for stale in self._conditions.pop(labels, []):
            self.condition.remove(*labels, *stale)
        series = [(metric, labels) for metric in self._per_mirror] + [
            (self.audit_result, (*labels, result)) for result in AUDIT_RESULTS
        ]
        for metric, values in series:
            with suppress(KeyError):  # never set: no audit yet, say
                metric.remove(*values)
