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

import argparse
import time
from pathlib import Path

from common import (
    RESULTS,
    preload,
    start_worker,
    stop,
    summary_header,
    two_clusters,
    worker_config,
    write_summary,
)

from kafka_mirror.audit.checks import run_checks
from kafka_mirror.audit.main import audit_inputs
from kafka_mirror.audit.records import source_records, target_records
from kafka_mirror.audit.spark import session
from kafka_mirror.kafka.observe import ClusterReader
from kafka_mirror.worker.config import WorkerConfig


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=5_000_000)
    parser.add_argument("--size", type=int, default=100, help="record value size in bytes")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--output", type=Path, default=RESULTS / "audit_throughput.json")
    args = parser.parse_args()

    worker = None
    with two_clusters() as (workdir, a, b):
        try:
            topic = "audited"
            preload(a, topic, args.records, args.size, args.partitions)
            raw = worker_config(a, b, "bench/audit", [topic])
            config = WorkerConfig.model_validate(raw)
            print("mirroring with one worker until it has committed every record…", flush=True)
            started = time.monotonic()
            worker = start_worker(raw, workdir)
            reader = ClusterReader("A", config.source.client_config())
            committed = 0
            while committed < args.records:
                time.sleep(2)
                progress = reader.progress(config.consumer_group, {topic: args.partitions})
                committed = sum(p.committed or 0 for p in progress)
                print(
                    f"  {time.monotonic() - started:6.1f}s  {committed:>10,} committed", flush=True
                )
                if worker.poll() is not None:
                    raise SystemExit(f"the worker exited; see {workdir / 'worker.log'}")
            reader.close()
            stop(worker, 60)

            inputs = audit_inputs(config)
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
        finally:
            stop(worker)


if __name__ == "__main__":
    main()
