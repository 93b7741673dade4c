"""What the fault tests share: a steady producer, the bound on re-sends, waiting for the final
commits, the reasons committed for partitions that do not flow, the independent content check
and the real audit, and a row of figures per fault."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pyspark.sql import SparkSession

from kafka_mirror.api.worker_config import WorkerConfig
from kafka_mirror.audit.main import audit
from kafka_mirror.audit.report import AuditReport
from kafka_mirror.kafka.coordinator import GroupCoordinator
from kafka_mirror_dev.kafka import LocalKafka
from tests.helpers.content import ContentReport, check_content
from tests.helpers.kafka import end_offsets, produce, records
from tests.helpers.worker import (
    WorkerProcess,
    group_offsets,
    wait_while_advancing,
    worker_group,
)


@dataclass
class Outcome:
    """What a user wants to know after a fault."""

    fault: str
    records: int  # source records the audit checked
    lost: int
    duplicates: int
    duplicate_bound: int  # records not yet committed when the faults hit
    recovery_seconds: float  # until everything produced before the fault was committed


class SteadyProducer(threading.Thread):
    """Produces `total` records to `topic` at about `per_second`, in batches."""

    def __init__(self, cluster: LocalKafka, topic: str, total: int, per_second: int) -> None:
        super().__init__(daemon=True)
        self.cluster, self.topic, self.total, self.per_second = cluster, topic, total, per_second
        self.error: BaseException | None = None

    def run(self) -> None:
        batch = max(self.per_second // 4, 1)
        try:
            for _ in range(self.total // batch):
                started = time.monotonic()
                # A broker restarting on a busy machine can be away for a minute or more: the
                # records wait for it, as librdkafka lets them (message.timeout.ms, 5 minutes).
                produce(
                    self.cluster.bootstrap_servers,
                    self.topic,
                    records(batch, partitions=8),
                    timeout=300,
                )
                time.sleep(max(0.0, 0.25 - (time.monotonic() - started)))
        except BaseException as error:  # shown by finish()
            self.error = error

    def finish(self, timeout: float = 300) -> None:
        self.join(timeout)
        assert not self.is_alive(), "the producer did not finish"
        assert self.error is None, f"producing failed: {self.error}"


def resend_bound(
    source: LocalKafka, group: str, topics: list[str], fault: Callable[[], None]
) -> int:
    """Run `fault`; what it can make the workers send again: the records not committed before
    it began, up to the source's end once it is over (an upper bound)."""
    committed = group_offsets(source, group)
    fault()
    return sum(max(end - committed.get(key, 0), 0) for key, end in ends(source, topics).items())


def committed_through(
    source: LocalKafka, group: str, targets: dict[tuple[str, int], int]
) -> Callable[[], bool]:
    def done() -> bool:
        committed = group_offsets(source, group)
        return all(committed.get(key, -1) >= offset for key, offset in targets.items())

    return done


def ends(source: LocalKafka, topics: list[str]) -> dict[tuple[str, int], int]:
    return {
        (topic, partition): end
        for topic in topics
        for partition, end in end_offsets(source.bootstrap_servers, topic).items()
    }


def committed_towards(
    source: LocalKafka, group: str, targets: dict[tuple[str, int], int]
) -> Callable[[], int]:
    """How many of the records up to `targets` the group has committed, summed."""

    def progress() -> int:
        committed = group_offsets(source, group)
        return sum(min(committed.get(key, 0), end) for key, end in targets.items())

    return progress


def seconds_until_committed(
    source: LocalKafka, group: str, topics: list[str], since: float, stall: float = 120
) -> float:
    """Seconds from `since` until the workers committed everything on the source now."""
    targets = ends(source, topics)
    progress = committed_towards(source, group, targets)
    wait_while_advancing(progress, sum(targets.values()), stall, "the commits")
    return time.monotonic() - since


def audited(config: dict[str, Any], spark: SparkSession, total: int) -> AuditReport:
    report = audit(WorkerConfig.model_validate(config), spark)
    assert report.result == "Passed", report.summary().message
    assert report.missing == 0 and report.records_checked == total, report.summary().message
    return report


def settle(kafka_a: LocalKafka, config: dict[str, Any], topics: list[str]) -> int:
    """Wait until everything on the source is committed, for as long as the commits advance;
    the number of source records."""
    targets = ends(kafka_a, topics)
    progress = committed_towards(kafka_a, worker_group(config), targets)
    wait_while_advancing(progress, sum(targets.values()), 120, "the final commits")
    return sum(targets.values())


def audit_and_record(
    outcomes: list[Outcome],
    fault: str,
    kafka_a: LocalKafka,
    config: dict[str, Any],
    topics: list[str],
    spark: SparkSession,
    bound: int,
    recovery: float,
) -> None:
    """Wait for the final commits, run the audit (it must pass with nothing missing), hold the
    re-sends to `bound`, and record the figures."""
    total = settle(kafka_a, config, topics)
    report = audited(config, spark, total)
    assert report.duplicates <= bound, (report.duplicates, bound)
    outcomes.append(Outcome(fault, total, report.missing, report.duplicates, bound, recovery))
    return report


def producers_replaced(worker: WorkerProcess) -> float:
    """The worker's producer replacements other than its watchdog's (nothing acknowledged for
    a minute, which a starved machine can bring about): those the faults caused."""
    replaced = worker.metric("kafka_mirror_errors_total", kind="producer replaced")
    return replaced - worker.metric("kafka_mirror_errors_total", kind="deliveries stalled")


def committed_problems(source: LocalKafka, group: str) -> dict[tuple[str, int], str]:
    """The reasons the workers committed with their offsets, per topic and partition (read
    straight from the source's group coordinator)."""
    coordinator = GroupCoordinator({"bootstrap.servers": source.bootstrap_servers})
    return {
        key: found.metadata
        for key, found in coordinator.committed(group, 10).items()
        if found.metadata
    }


def verify(
    outcomes: list[Outcome],
    fault: str,
    source: LocalKafka,
    target: LocalKafka,
    config: dict[str, Any],
    topics: list[str],
    workers: list[WorkerProcess],
    spark: SparkSession,
    bound: int,
    recovery: float,
    audit: bool = True,
) -> ContentReport:
    """The independent content check of `topics` (remote topics under the suffix policy, alias
    A), then our audit; no worker exited; figures recorded. Returns the content check's
    report."""
    total = settle(source, config, topics)
    report = check_content(
        source.bootstrap_servers, target.bootstrap_servers, {t: f"{t}.A" for t in topics}
    )
    print(f"{fault}: {report}")
    assert report.source_records == total
    assert report.lossless, report
    # Re-sends beyond what was in flight at the fault only where the workers counted them (a
    # producer replaced because nothing was acknowledged for a minute on a starved machine).
    resent = sum(int(w.metric("kafka_mirror_records_resent_total")) for w in workers)
    assert report.duplicates <= max(bound, resent), (report.duplicates, bound, resent)
    if audit:
        audited(config, spark, total)
    for worker in workers:
        assert worker.running(), f"{worker.name} exited:\n{worker.log()[-3000:]}"
    outcomes.append(Outcome(fault, total, report.missing, report.duplicates, bound, recovery))
    return report
