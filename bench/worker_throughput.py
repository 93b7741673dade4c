"""First throughput figure for one worker: mirror N records of S bytes over P partitions.

Starts its own Kafka clusters A and B (real, KRaft, from the dev stack), preloads the topic on A
with Kafka's own ProducerPerformance tool, then runs one worker process exactly as a pod would
(`python -m kafka_mirror worker --config FILE`) and times how long B takes to hold every record.

    .venv/bin/python bench/worker_throughput.py   # 1,000,000 x 1 KB over 8 partitions
    .venv/bin/python bench/worker_throughput.py --records 200000 --size 100

Prints progress while it runs and a JSON summary at the end (also written with --output).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from common import (
    end_offsets,
    preload,
    start_worker,
    stop,
    summary_header,
    two_clusters,
    worker_config,
    write_summary,
)
from confluent_kafka.admin import AdminClient


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=1024, help="record value size in bytes")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--output", type=Path, help="also write the JSON summary here")
    args = parser.parse_args()

    worker = None
    with two_clusters() as (workdir, a, b):
        try:
            topic = "bench"
            preload(a, topic, args.records, args.size, args.partitions)
            config = worker_config(a, b, "bench/throughput", [topic])
            remote = [(f"{topic}.A", p) for p in range(args.partitions)]
            admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
            print("mirroring with one worker…", flush=True)
            started = time.monotonic()
            worker = start_worker(config, workdir)
            first_seen = None
            mirrored = 0
            while mirrored < args.records:
                time.sleep(1)
                mirrored = end_offsets(admin, remote)
                if mirrored and first_seen is None:
                    first_seen = time.monotonic()
                elapsed = time.monotonic() - started
                print(f"  {elapsed:6.1f}s  {mirrored:>10,} / {args.records:,} on B", flush=True)
                if worker.poll() is not None:
                    raise SystemExit(f"the worker exited; see {workdir / 'worker.log'}")
            finished = time.monotonic()
            steady = finished - (first_seen or started)
            megabytes = args.records * args.size / 1e6
            summary = {
                **summary_header(
                    "one kafka-mirror worker, A -> B on loopback", "worker_throughput.py"
                ),
                "records": args.records,
                "record_size_bytes": args.size,
                "partitions": args.partitions,
                "seconds_total": round(finished - started, 2),
                "seconds_mirroring": round(steady, 2),
                "records_per_second": round(args.records / steady),
                "megabytes_per_second": round(megabytes / steady, 1),
            }
            write_summary(summary, args.output)
        finally:
            stop(worker)


if __name__ == "__main__":
    main()
