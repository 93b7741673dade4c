"""How fast one process writes to one broker with the worker's own producer settings, through 1, 2
or 3 producers (the partitions split between them): whether a mirroring process's rate at large
records is its loop's or the producer's.

Starts Kafka B alone (one broker, as the benchmarks' clusters), then per round and producer
count writes `--records` records of `--size` bytes to a new topic of 64 partitions (the drains'
8 x 8) from this one process, in runs of `--run` records per partition (a mirroring process
writes what its consumer fetched, runs of one partition), flushes, and prints records/s, MB/s
and the process's CPU (all its threads, librdkafka's included) in cores:

    .venv/bin/python bench/producer_ceiling.py                # 1,000,000 x 1 KB, 2 rounds
    .venv/bin/python bench/producer_ceiling.py --size 100 --records 4000000
    .venv/bin/python bench/producer_ceiling.py --cpus 0   # the producers on CPU 0 (equal CPU)
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
from pathlib import Path

from common import create_topic, librdkafka_produce_rate

from kafka_mirror_dev.kafka import KAFKA_SCRIPTS_JVM, LocalKafka

PARTITIONS = 64


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=1024, help="record value size in bytes")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--run", type=int, default=1000, help="records in a row per partition")
    parser.add_argument(
        "--cpus", help="pin the producers (not the broker) to these CPUs, e.g. 0 (as equal CPU)"
    )
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="kafka-mirror-bench-"))
    cluster = LocalKafka("B", workdir / "B", jvm=KAFKA_SCRIPTS_JVM, threads={})
    try:
        print("starting Kafka B…", flush=True)
        cluster.start()
        if args.cpus:
            # This thread only: the producers' threads, started from it, inherit it.
            os.sched_setaffinity(0, {int(cpu) for cpu in args.cpus.split(",")})
        for round_ in range(args.rounds):
            for producers in (1, 2, 3):
                topic = f"ceiling-{round_}-{producers}"
                create_topic(cluster, topic, PARTITIONS)
                rate, cores = librdkafka_produce_rate(
                    cluster.bootstrap_servers,
                    topic,
                    PARTITIONS,
                    args.records,
                    args.size,
                    producers,
                    args.run,
                )
                print(
                    f"  {producers} producer(s): {rate:,.0f} records/s, "
                    f"{rate * args.size / 1e6:.0f} MB/s, {cores:.2f} cores",
                    flush=True,
                )
    finally:
        cluster.remove()
        shutil.rmtree(workdir)


if __name__ == "__main__":
    main()
