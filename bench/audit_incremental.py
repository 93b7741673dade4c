"""Incremental audit cost: audit N records, add M, audit again; the second run reads only what came
after the first run's verified watermark, and a full re-audit gives the same verdict.

Starts its own Kafka clusters A and B, preloads N records on A with Kafka's ProducerPerformance,
mirrors them with one worker (run as a pod runs it), then in one local-mode Spark session:

1. the first audit (no watermark yet: every record);
2. M more records produced and mirrored, and the audit again (from the watermark);
3. a full re-audit (`--full`) of all N + M records: its verdict must be the second's.

    .venv/bin/python bench/audit_incremental.py   # 1,000,000 then 100,000 x 100 B, 8 partitions

Prints progress and a JSON summary, written to bench/results/audit_incremental.json (--output).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

import psutil
from common import (
    audit_arguments,
    mirror_until_committed,
    mirrored_preload,
    perf_rate,
    produce_perf,
    summary_header,
    two_clusters,
    write_summary,
)

from kafka_mirror.api.worker_config import WorkerConfig
from kafka_mirror.audit.main import audit
from kafka_mirror.audit.report import AuditReport
from kafka_mirror.audit.spark import session
from kafka_mirror_dev.builds import export_spark_jars

VERDICT = ("result", "missing", "altered", "duplicates", "lost_to_retention", "unsafe_checkpoints")


def spark_cpu_seconds() -> float:
    """CPU time so far of this process (Spark's driver) and Spark's JVM, not the brokers': less
    swayed than the wall time by whatever else the machine runs."""
    me = psutil.Process()
    jvms = [p for p in me.children(recursive=True) if "SparkSubmit" in _command(p)]
    return sum(t.user + t.system for p in (me, *jvms) for t in [p.cpu_times()])


def _command(process: psutil.Process) -> str:
    """Its command line; empty for one that ended meanwhile (a zombie child: a finished tool)."""
    try:
        return " ".join(process.cmdline())
    except psutil.Error:
        return ""


@dataclass(frozen=True)
class Run:
    report: AuditReport
    seconds: float  # wall time
    cpu: float  # CPU time of Spark's driver and JVM


def timed(what: str, run: Callable[[], AuditReport]) -> Run:
    print(f"{what}…", flush=True)
    started, cpu = time.monotonic(), spark_cpu_seconds()
    report = run()
    done = Run(report, time.monotonic() - started, spark_cpu_seconds() - cpu)
    print(f"  {report.records_checked:,} records checked in {done.seconds:.1f}s", flush=True)
    return done


def main() -> None:
    parser = audit_arguments(__doc__.splitlines()[0], 1_000_000, "audit_incremental.json")
    parser.add_argument("--added", type=int, default=100_000)
    args = parser.parse_args()

    load_before = os.getloadavg()[0]
    with two_clusters() as (workdir, a, b):
        topic, raw = mirrored_preload(a, b, workdir, "bench/audit-incremental", args)
        config = WorkerConfig.model_validate(raw)
        export_spark_jars()
        started = time.monotonic()
        spark = session(args.master, {})
        startup = time.monotonic() - started  # the JVM and the jars: paid by every run's pod
        print(f"Spark session start: {startup:.2f} s", flush=True)
        try:
            first = timed("first audit", lambda: audit(config, spark))
            perf_rate(produce_perf(a, topic, args.added, args.size))
            total = args.records + args.added
            mirror_until_committed(raw, workdir, topic, args.partitions, total)
            second = timed("incremental audit", lambda: audit(config, spark))
            full = timed("full re-audit", lambda: audit(config, spark, full=True))
        finally:
            spark.stop()
    summary = {
        **summary_header(
            "kafka-mirror audit (PySpark, local mode): a run after new records vs a full one",
            "audit_incremental.py",
        ),
        "spark_master": args.master,
        "records": args.records,
        "added": args.added,
        "record_size_bytes": args.size,
        "partitions": args.partitions,
        "load_average_before": round(load_before, 2),
        "load_average_after": round(os.getloadavg()[0], 2),
        "spark_session_start_seconds": round(startup, 2),  # not in the runs' figures
        **{
            name: {
                "result": run.report.result,
                "records_checked": run.report.records_checked,
                "records_verified": run.report.records_verified,
                "partitions_resumed": run.report.partitions_resumed,
                "seconds": round(run.seconds, 1),
                "cpu_seconds": round(run.cpu, 1),
            }
            for name, run in (("first", first), ("incremental", second), ("full", full))
        },
        "incremental_over_first": round(second.seconds / first.seconds, 3),
        "incremental_over_full": round(second.seconds / full.seconds, 3),
        "cpu_incremental_over_first": round(second.cpu / first.cpu, 3),
        "cpu_incremental_over_full": round(second.cpu / full.cpu, 3),
        "same_verdict_as_full": [getattr(second.report, k) for k in VERDICT]
        == [getattr(full.report, k) for k in VERDICT]
        and second.report.records_verified == full.report.records_checked,
    }
    write_summary(summary, args.output)


if __name__ == "__main__":
    main()
