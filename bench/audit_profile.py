"""Where an incremental audit's time goes: audit N records, add M, then audit twice more (the M
new records, then nothing new), timing each phase and counting the Spark jobs it starts.

    .venv/bin/python bench/audit_profile.py   # 200,000 then 20,000 x 100 B, 8 partitions

The phases are the audit's own functions, wrapped here with a timer; Spark's jobs are counted
with `statusTracker()` (the audit sets no job group).
"""

from __future__ import annotations

import functools
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
    two_clusters,
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
        "verifiable_from",
        "_findings",
        "check_offset_syncs",
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
    with two_clusters() as (workdir, a, b):
        topic, raw = mirrored_preload(a, b, workdir, "bench/audit-profile", args)
        config = WorkerConfig.model_validate(raw)
        export_spark_jars()
        spark = session(args.master, {})
        count_phases(spark, profile)
        try:
            main_module.audit(config, spark)
            perf_rate(produce_perf(a, topic, args.added, args.size))
            mirror_until_committed(raw, workdir, topic, args.partitions, args.records + args.added)
            for what in ("incremental", "nothing new"):
                profile.clear()
                report = main_module.audit(config, spark)
                print(f"{what}: {report.records_checked:,} records checked, {report.result}")
                for name, seconds, jobs in profile:
                    print(f"  {name:20} {seconds:6.2f} s {jobs:3d} Spark jobs")
        finally:
            spark.stop()


if __name__ == "__main__":
    main()
