"""Audit throughput: records audited per second, next to Spark just reading the same records.

Starts its own Kafka clusters A and B, preloads N records on A with Kafka's ProducerPerformance,
mirrors them with one worker (run as a pod runs it) until its group has committed them all, then
in one local-mode Spark session:

1. reads the same records (the source window and the remote topic, as the audit reads them) and
   only counts them: the cost of reading;
2. runs the audit's checks (completeness join, offset syncs, checkpoints).

The ratio of (2) to (1) is the audit's overhead over reading.

    .venv/bin/python bench/audit_throughput.py   # 5,000,000 x 100 B over 8 partitions
    .venv/bin/python bench/audit_throughput.py --records 200000

Prints progress while it runs and a JSON summary, written to bench/results/audit_throughput.json
(see --output).
"""

from __future__ import annotations

import time

from common import (
    audit_arguments,
    mirrored_preload,
    summary_header,
    two_clusters,
    write_summary,
)

from kafka_mirror.api.worker_config import WorkerConfig
from kafka_mirror.audit.checks import run_checks
from kafka_mirror.audit.main import audit_inputs
from kafka_mirror.audit.records import source_records, target_records
from kafka_mirror.audit.spark import session
from kafka_mirror_dev.builds import export_spark_jars


def main() -> None:
    parser = audit_arguments(__doc__.splitlines()[0], 5_000_000, "audit_throughput.json")
    args = parser.parse_args()

    with two_clusters() as (workdir, a, b):
        _, raw = mirrored_preload(a, b, workdir, "bench/audit", args)
        config = WorkerConfig.model_validate(raw)

        inputs = audit_inputs(config)
        export_spark_jars()
        spark = session(args.master, {})
        try:
            print("Spark reading the same records, counting only…", flush=True)
            started = time.monotonic()
            read = source_records(spark, inputs).count() + target_records(spark, inputs).count()
            read_seconds = time.monotonic() - started
            print(f"  read {read:,} records in {read_seconds:.1f}s", flush=True)
            print("auditing…", flush=True)
            started = time.monotonic()
            report = run_checks(spark, inputs)
            audit_seconds = time.monotonic() - started
        finally:
            spark.stop()
        summary = {
            **summary_header(
                "kafka-mirror audit (PySpark, local mode) vs Spark reading the records",
                "audit_throughput.py",
            ),
            "spark_master": args.master,
            "records": args.records,
            "record_size_bytes": args.size,
            "partitions": args.partitions,
            "audit_result": report.result,
            "records_checked": report.records_checked,
            "missing": report.missing,
            "duplicates": report.duplicates,
            "read_seconds": round(read_seconds, 1),
            "audit_seconds": round(audit_seconds, 1),
            "records_audited_per_second": round(report.records_checked / audit_seconds),
            "audit_over_read": round(audit_seconds / read_seconds, 2),
        }
        write_summary(summary, args.output)


if __name__ == "__main__":
    main()
