"""The worker's Prometheus metrics and its health endpoints.

Hot-path figures (records, bytes, latency) are gathered in plain dicts by the mirroring loop and
published here about once a second, so the per-record cost stays a dict update.

A pod running several mirroring processes (`supervisor.py`) keeps them in prometheus_client's
multiprocess mode: counters and histograms add up, and each gauge says how its processes' values
combine. A series a process no longer has is set to 0 before it is removed, since the
multiprocess files keep whatever was last written.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, make_wsgi_app
from prometheus_client.exposition import ThreadingWSGIServer

from kafka_mirror import endpoints

TASK_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 10)
LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300)


class WorkerMetrics:
    """All metrics of one worker process, in their own registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        r = self.registry
        self.records = Counter(
            "kafka_mirror_records",
            "Records mirrored (acknowledged by the target).",
            ["topic", "partition"],
            registry=r,
        )
        self.bytes = Counter(
            "kafka_mirror_bytes",
            "Key and value bytes mirrored.",
            ["topic", "partition"],
            registry=r,
        )
        self.lag = Gauge(
            "kafka_mirror_lag_records",
            "Records on the source partition not yet mirrored.",
            ["topic", "partition"],
            registry=r,
            multiprocess_mode="livesum",  # a partition is one process's at a time
        )
        self.latency = Histogram(
            "kafka_mirror_replication_latency_seconds",
            "From the record's timestamp to the target's acknowledgement (exactly once: to "
            "the commit of its transaction).",
            ["topic"],
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.last_latency = Gauge(
            "kafka_mirror_last_latency_seconds",
            "Replication latency of the newest acknowledged (exactly once: committed) record.",
            ["topic"],
            registry=r,
            multiprocess_mode="livemax",
        )
        self.checkpoint_latency = Histogram(
            "kafka_mirror_checkpoint_latency_seconds",
            "From reading a group's source offsets to its checkpoints being acknowledged.",
            buckets=LATENCY_BUCKETS,
            registry=r,
        )
        self.checkpoints = Counter(
            "kafka_mirror_checkpoints", "Checkpoints emitted.", ["group"], registry=r
        )
        self.checkpoint_translations = Counter(
            "kafka_mirror_checkpoint_translations",
            "Group positions translated, by how: exact (read on the target), end, partial, "
            "sync (MirrorMaker 2's rule alone).",
            ["how"],
            registry=r,
        )
        self.offset_syncs = Counter(
            "kafka_mirror_offset_syncs", "Offset syncs emitted.", ["topic"], registry=r
        )
        self.group_offsets_synced = Counter(
            "kafka_mirror_group_offsets_synced",
            "Translated offsets committed to groups on the target.",
            ["group"],
            registry=r,
        )
        self.active_topic = Gauge(
            "kafka_mirror_active_topic",
            "1 for each topic being mirrored.",
            ["topic", "remote_topic"],
            registry=r,
            multiprocess_mode="livemax",
        )
        self.skipped_topic = Gauge(
            "kafka_mirror_skipped_topic",
            "1 for each selected topic that cannot be mirrored.",
            ["topic", "reason"],
            registry=r,
            multiprocess_mode="livemax",
        )
        self.cluster_reachable = Gauge(
            "kafka_mirror_cluster_reachable",
            "1 when the cluster answered the last admin call.",
            ["cluster", "alias"],
            registry=r,
            multiprocess_mode="livemin",
        )
        self.acl_bindings = Gauge(
            "kafka_mirror_acl_bindings",
            "Topic ACL bindings the ACL sync holds on the target for the mirrored topics.",
            registry=r,
            multiprocess_mode="livemax",
        )
        self.acl_sync_refused = Gauge(
            "kafka_mirror_acl_sync_refused",
            "1 while the cluster refuses the ACL sync its ACLs (a right missing).",
            ["cluster"],
            registry=r,
            multiprocess_mode="livemax",
        )
        self.schemas_copied = Gauge(
            "kafka_mirror_schemas_copied",
            "Schema ids of mirrored records known on the target's registry, counted per topic "
            "that carries them (spec.schemaRegistry).",
            registry=r,
            multiprocess_mode="livemax",
        )
        self.schemas_waiting = Gauge(
            "kafka_mirror_schemas_waiting",
            "Schema ids that mirrored records wait for, by state: pending (being copied) or "
            "refused (a person must act: the partition's status says why).",
            ["state"],
            registry=r,
            multiprocess_mode="livemax",
        )
        self.schema_registry_reachable = Gauge(
            "kafka_mirror_schema_registry_reachable",
            "1 when both schema registries answered the last round of copies.",
            registry=r,
            multiprocess_mode="livemin",
        )
        self.invalid_patterns = Gauge(
            "kafka_mirror_invalid_patterns",
            "Selection patterns that do not compile.",
            registry=r,
            multiprocess_mode="livemax",
        )
        self.task_seconds = Histogram(
            "kafka_mirror_task_seconds",
            "How long a periodic task (commit, topics, configs, checkpoints, heartbeats, "
            "deliveries) held the mirroring loop: records wait meanwhile.",
            ["task"],
            buckets=TASK_BUCKETS,
            registry=r,
        )
        self.lost_to_retention = Counter(
            "kafka_mirror_records_lost_to_retention",
            "Records that left the source (retention, DeleteRecords) before they were mirrored.",
            ["topic", "partition"],
            registry=r,
        )
        self.lost_to_truncation = Counter(
            "kafka_mirror_records_lost_to_truncation",
            "Records the source lost after they were mirrored, its log truncated below the "
            "mirror's position by an unclean leader election (the target keeps their copies).",
            ["topic", "partition"],
            registry=r,
        )
        self.resent = Counter(
            "kafka_mirror_records_resent",
            "Records handed to the target again, from the first one it had not acknowledged "
            "(a replaced producer, a refusal retried): at most this many copies twice.",
            registry=r,
        )
        self.errors = Counter("kafka_mirror_errors", "Errors, by kind.", ["kind"], registry=r)
        self.partition_problem = Gauge(
            "kafka_mirror_partition_problem",
            "1 for each partition that does not flow: stopped at a record the target cannot "
            "take, or stalled (no acknowledgement for a minute).",
            ["topic", "partition", "problem"],
            registry=r,
            multiprocess_mode="livemax",
        )
        self._flags: dict[Gauge, set[tuple[str, ...]]] = {}

    def _show_flags(self, gauge: Gauge, flagged: set[tuple[str, ...]]) -> None:
        """1 for each label set in `flagged`; the others shown before are retired."""
        for labels in self._flags.get(gauge, set()) - flagged:
            _retire(gauge, labels)
        for labels in flagged:
            gauge.labels(*labels).set(1)
        self._flags[gauge] = flagged

    def set_topics(self, mirrored: dict[str, str], skipped: Iterable[tuple[str, str]]) -> None:
        self._show_flags(self.active_topic, set(mirrored.items()))
        self._show_flags(self.skipped_topic, set(skipped))

    def set_partition_problems(self, problems: Iterable[tuple[str, int, str | None]]) -> None:
        """Each partition's problem (its description's first word: stopped, stalled) or None."""
        self._show_flags(
            self.partition_problem,
            {(t, str(p), problem.split()[0]) for t, p, problem in problems if problem is not None},
        )

    def forget_partition(self, topic: str, partition: int) -> None:
        _retire(self.lag, (topic, str(partition)))


def _retire(gauge: Gauge, labels: tuple[str, ...]) -> None:
    gauge.labels(*labels).set(0)  # what the multiprocess files keep
    gauge.remove(*labels)


def serve(
    registry: CollectorRegistry, port: int, live: Callable[[], bool], ready: Callable[[], bool]
) -> ThreadingWSGIServer:
    """Serve /metrics, /healthz (the loop is alive) and /readyz (both clusters answer)."""
    metrics_app = make_wsgi_app(registry)

    def app(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        path = environ.get("PATH_INFO", "/")
        if path in ("/healthz", "/readyz"):
            ok = live() if path == "/healthz" else ready()
            start_response(
                "200 OK" if ok else "503 Service Unavailable", [("Content-Type", "text/plain")]
            )
            return [b"ok\n" if ok else b"not ok\n"]
        return metrics_app(environ, start_response)  # type: ignore[no-any-return]

    return endpoints.serve(app, port, "metrics")


class LoopWatchdog:
    """When the mirroring loop last went round, for the liveness probe."""

    def __init__(self, stale_after: float = 60.0) -> None:
        self.stale_after, self.last = stale_after, time.monotonic()

    def beat(self) -> None:
        self.last = time.monotonic()

    def alive(self) -> bool:
        return time.monotonic() - self.last < self.stale_after
