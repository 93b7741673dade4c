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

from kafka_mirror.audit.main import audit
from kafka_mirror.audit.report import AuditReport
from kafka_mirror.audit.spark import session
from kafka_mirror.worker.config import WorkerConfig

VERDICT = ("result", "missing", "altered", "duplicates", "lost_to_retention", "unsafe_checkpoints")


def timed(what: str, run: Callable[[], AuditReport]) -> tuple[AuditReport, float]:
    print(f"{what}…", flush=True)
    started = time.monotonic()
    report = run()
    seconds = time.monotonic() - started
    print(f"  {report.records_checked:,} records checked in {seconds:.1f}s", flush=True)
    return report, seconds


def main() -> None:
    parser = audit_arguments(__doc__.splitlines()[0], 1_000_000, "audit_incremental.json")
    parser.add_argument("--added", type=int, default=100_000)
    args = parser.parse_args()

    load_before = os.getloadavg()[0]
    with two_clusters() as (workdir, a, b):
        topic, raw = mirrored_preload(a, b, workdir, "bench/audit-incremental", args)
        config = WorkerConfig.model_validate(raw)
        spark = session(args.master, {})
        try:
            first, first_seconds = timed("first audit", lambda: audit(config, spark))
            perf_rate(produce_perf(a, topic, args.added, args.size))
            total = args.records + args.added
            mirror_until_committed(raw, workdir, topic, args.partitions, total)
            second, second_seconds = timed("incremental audit", lambda: audit(config, spark))
            full, full_seconds = timed("full re-audit", lambda: audit(config, spark, full=True))
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
        "first": {"result": first.result, "records_checked": first.records_checked},
        "first_seconds": round(first_seconds, 1),
        "incremental": {
            "result": second.result,
            "records_checked": second.records_checked,
            "records_verified": second.records_verified,
            "partitions_resumed": second.partitions_resumed,
        },
        "incremental_seconds": round(second_seconds, 1),
        "full": {"result": full.result, "records_checked": full.records_checked},
        "full_seconds": round(full_seconds, 1),
        "incremental_over_first": round(second_seconds / first_seconds, 3),
        "incremental_over_full": round(second_seconds / full_seconds, 3),
        "same_verdict_as_full": [getattr(second, k) for k in VERDICT]
        == [getattr(full, k) for k in VERDICT]
        and second.records_verified == full.records_checked,
    }
    write_summary(summary, args.output)


if __name__ == "__main__":
    main()
