"""Where an incremental audit's time goes: audit N records, add M, then audit twice more (the M
new records, then nothing new), timing each phase and counting the Spark jobs it starts; and the
Spark session's start-up, apart. The JSON summary goes to bench/results/audit_profile.json
(--output).

    .venv/bin/python bench/audit_profile.py   # 200,000 then 20,000 x 100 B, 8 partitions

The phases are the audit's own functions, wrapped here with a timer; Spark's jobs are counted
with `statusTracker()` (the audit sets no job group).
"""

from __future__ import annotations

import functools
import os
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

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
from pyspark.sql import SparkSession

import kafka_mirror.audit.checks as checks
import kafka_mirror.audit.main as main_module
from kafka_mirror.api.worker_config import WorkerConfig
from kafka_mirror.audit.spark import session
from kafka_mirror_dev.builds import export_spark_jars

PHASES = {
    checks: (
        "newest_checkpoints",
        "offset_syncs_to_check",
        "first_copies",
        "compare",
        "check_checkpoints",
        "_verified",
    ),
    main_module: ("read_watermarks", "audit_inputs", "run_checks", "write_watermarks"),
}


def count_phases(spark: SparkSession, profile: list[tuple[str, float, int]]) -> None:
    """Wrap each phase so that it appends (name, seconds, Spark jobs) to `profile`."""

    def jobs() -> int:
        return len(spark.sparkContext.statusTracker().getJobIdsForGroup())

    def timed(name: str, phase: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(phase)
        def run(*args: Any, **kwargs: Any) -> Any:
            started, before = time.monotonic(), jobs()
            try:
                return phase(*args, **kwargs)
            finally:
                profile.append((name, time.monotonic() - started, jobs() - before))

        return run

    module: ModuleType
    for module, names in PHASES.items():
        for name in names:
            setattr(module, name, timed(name, getattr(module, name)))


def main() -> None:
    parser = audit_arguments(__doc__.splitlines()[0], 200_000, "audit_profile.json")
    parser.add_argument("--added", type=int, default=20_000)
    args = parser.parse_args()
    profile: list[tuple[str, float, int]] = []
    runs: dict[str, Any] = {}
    load_before = os.getloadavg()[0]
    with two_clusters() as (workdir, a, b):
        topic, raw = mirrored_preload(a, b, workdir, "bench/audit-profile", args)
        config = WorkerConfig.model_validate(raw)
        export_spark_jars()
        started = time.monotonic()
        spark = session(args.master, {})
        spark.range(1).collect()  # the JVM, the jars and a first job: a floor under every run
        startup = time.monotonic() - started
        print(f"Spark session start and a first job: {startup:.2f} s")
        count_phases(spark, profile)
        try:
            for what in ("first", "incremental", "nothing new"):
                if what == "incremental":
                    perf_rate(produce_perf(a, topic, args.added, args.size))
                    total = args.records + args.added
                    mirror_until_committed(raw, workdir, topic, args.partitions, total)
                profile.clear()
                started = time.monotonic()
                report = main_module.audit(config, spark)
                seconds = time.monotonic() - started
                print(f"{what}: {report.records_checked:,} records checked, {report.result}")
                for name, phase_seconds, jobs in profile:
                    print(f"  {name:22} {phase_seconds:6.2f} s {jobs:3d} Spark jobs")
                runs[what] = {
                    "records_checked": report.records_checked,
                    "result": report.result,
                    "seconds": round(seconds, 2),
                    "phases": [
                        {"phase": name, "seconds": round(t, 2), "spark_jobs": jobs}
                        for name, t, jobs in profile
                    ],
                }
        finally:
            spark.stop()
    write_summary(
        {
            **summary_header(
                "kafka-mirror audit: time and Spark jobs per phase", "audit_profile.py"
            ),
            "records": args.records,
            "added": args.added,
            "partitions": args.partitions,
            "load_average_before": round(load_before, 2),
            "load_average_after": round(os.getloadavg()[0], 2),
            "spark_session_start_seconds": round(startup, 2),
            **runs,
        },
        args.output,
    )


if __name__ == "__main__":
    main()
