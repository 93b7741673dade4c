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
import json
import os
import platform
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

from common import preload, start_worker, two_clusters, worker_config
from confluent_kafka import Consumer, TopicPartition


def total_on(bootstrap: str, topic: str, partitions: int) -> int:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": "bench-watermarks"})
    try:
        return sum(
            consumer.get_watermark_offsets(TopicPartition(topic, p), timeout=10)[1]
            for p in range(partitions)
        )
    except Exception:
        return 0
    finally:
        consumer.close()


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
            config = worker_config(a, b, "bench/throughput", topic)
            print("mirroring with one worker…", flush=True)
            started = time.monotonic()
            worker = start_worker(config, workdir)
            first_seen = None
            mirrored = 0
            while mirrored < args.records:
                time.sleep(1)
                mirrored = total_on(b.bootstrap_servers, f"{topic}.A", args.partitions)
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
                "what": "one kafka-mirror worker, A -> B on loopback",
                "date": datetime.now(UTC).isoformat(timespec="seconds"),
                "machine": f"{platform.machine()}, {os.cpu_count()} cores",
                "records": args.records,
                "record_size_bytes": args.size,
                "partitions": args.partitions,
                "seconds_total": round(finished - started, 2),
                "seconds_mirroring": round(steady, 2),
                "records_per_second": round(args.records / steady),
                "megabytes_per_second": round(megabytes / steady, 1),
                "command": "python bench/worker_throughput.py " + " ".join(sys.argv[1:]),
            }
            print(json.dumps(summary, indent=2))
            if args.output:
                args.output.write_text(json.dumps(summary, indent=2) + "\n")
        finally:
            if worker is not None and worker.poll() is None:
                worker.terminate()
                worker.wait(30)


if __name__ == "__main__":
    main()
