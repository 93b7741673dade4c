"""Where one mirroring process spends its CPU while it drains a backlog, thread by thread.

Starts its own Kafka clusters A and B, preloads N records on A (8 topics x 8 partitions), then
drains them `--rounds` times with one worker process pinned to CPU 0, as its pod runs it, each
round under a fresh source alias. Per round: records/s, CPU µs per record of the whole process,
and of each of its threads that lived through the round (the loop's thread is `python`,
librdkafka's are `rdk:*`; a producer renewed during the round takes its threads' CPU with it,
counted in the total only), and the process's minor page faults per record. `--config` and
`--source-config` add librdkafka settings to the target's and the source's `config`, `--env`
environment variables to the worker's:

    .venv/bin/python bench/worker_cpu.py                                 # the worker as shipped
    .venv/bin/python bench/worker_cpu.py --config '{"linger.ms": "5"}'    # a fixed 5 ms linger
    .venv/bin/python bench/worker_cpu.py --size 1024 --records 2000000 \
        --source-config '{"fetch.max.bytes": "16777216", "max.partition.fetch.bytes": "2097152"}'
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

from common import (
    cpu_seconds,
    end_offsets,
    peak_rss_bytes,
    preload,
    start_worker,
    stop,
    two_clusters,
    worker_config,
)
from confluent_kafka.admin import AdminClient

TOPICS, PARTITIONS = 8, 8


def thread_cpu(pid: int) -> dict[str, tuple[str, float]]:
    """CPU seconds of each of the process's threads, by thread id: (name, seconds)."""
    threads = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            stat = Path(f"/proc/{pid}/task/{tid}/stat").read_text()
        except OSError:
            continue  # ended meanwhile
        name = stat[stat.index("(") + 1 : stat.rindex(")")]
        fields = stat[stat.rindex(")") + 2 :].split()
        threads[tid] = (name, (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK"))
    return threads


def minor_faults(pid: int) -> int:
    stat = Path(f"/proc/{pid}/stat").read_text()
    return int(stat[stat.rindex(")") + 2 :].split()[7])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=4_000_000)
    parser.add_argument("--size", type=int, default=100, help="record value size in bytes")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--config", type=json.loads, default={}, help="target config, JSON")
    parser.add_argument("--source-config", type=json.loads, default={}, help="JSON")
    parser.add_argument("--env", type=json.loads, default={}, help="the worker's, JSON")
    args = parser.parse_args()
    with two_clusters() as (workdir, a, b):
        print(f"preloading {args.records:,} records of {args.size} B on A…", flush=True)
        for t in range(TOPICS):
            preload(a, f"bench-{t}", args.records // TOPICS, args.size, PARTITIONS)
        admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        for round_ in range(args.rounds):
            alias = f"R{round_}"
            config = worker_config(a, b, f"bench/{alias}", ["bench-.*"], alias=alias)
            config["topicNaming"] = {"policy": "prefix"}
            config["target"]["config"] = args.config
            config["source"]["config"] = args.source_config
            worker = start_worker(
                config, workdir, alias, prefix=["taskset", "-c", "0"], env=args.env
            )
            remote = [(f"{alias}.bench-{t}", p) for t in range(TOPICS) for p in range(PARTITIONS)]
            try:
                # Timed from the first record on B to the last, as `vs_mirrormaker.py` does,
                # counting only the records that reached B in that time.
                while not (before := end_offsets(admin, remote)):
                    time.sleep(0.1)
                records = args.records - before
                started, cpu, threads, faults = (
                    time.monotonic(),
                    cpu_seconds(worker.pid),
                    thread_cpu(worker.pid),
                    minor_faults(worker.pid),
                )
                while end_offsets(admin, remote) < args.records:
                    time.sleep(0.25)
                seconds = time.monotonic() - started
                cpu, after = cpu_seconds(worker.pid) - cpu, thread_cpu(worker.pid)
                faults = minor_faults(worker.pid) - faults
                peak = peak_rss_bytes(worker.pid)
            finally:
                stop(worker)
            print(
                f"round {round_}: {records / seconds:,.0f} records/s, "
                f"{cpu / records * 1e6:.2f} CPU µs per record, "
                f"{faults / records:.3f} minor page faults per record, "
                f"{peak / 2**20:,.0f} MiB peak",
                flush=True,
            )
            for tid, (name, total) in sorted(after.items(), key=lambda t: -t[1][1]):
                spent = total - threads.get(tid, (name, 0.0))[1]
                if spent >= 0.05:
                    print(f"  {name:12} {spent / records * 1e6:.2f} µs per record")
            for line in (workdir / f"{alias}.log").read_text().splitlines():
                if "the producer lingers" in line or "linger stays" in line:
                    print(f"  {line.split(' ', 2)[2]}")


if __name__ == "__main__":
    main()
