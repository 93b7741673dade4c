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
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

from common import create_topic
from confluent_kafka import Producer

from kafka_mirror.worker.clients import mirror_producer_settings
from kafka_mirror.worker.linger import DRAINING_LINGER_MS
from kafka_mirror_dev.kafka import LocalKafka

PARTITIONS = 64


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def write(
    cluster: LocalKafka, topic: str, records: int, size: int, producers: int, run: int
) -> str:
    """Write the records through `producers` producers (partition p through producer p mod n)
    and flush them; the figures as a line."""
    settings = mirror_producer_settings(
        {"bootstrap.servers": cluster.bootstrap_servers, "linger.ms": DRAINING_LINGER_MS}
    )
    clients = [Producer(settings) for _ in range(producers)]
    for client in clients:
        client.list_topics(topic, timeout=10)
    value = os.urandom(size)
    cpu, started = cpu_seconds(), time.monotonic()
    for i in range(records):
        partition = i // run % PARTITIONS
        client = clients[partition % producers]
        while True:
            try:
                client.produce(topic, value, None, partition)
                break
            except BufferError:  # its queue is full: serve the reports, then again
                for each in clients:
                    each.poll(0.001)
        if i % 1000 == 0:
            for each in clients:
                each.poll(0)
    for client in clients:
        assert client.flush(120) == 0, "records left unacknowledged"
    elapsed, cpu = time.monotonic() - started, cpu_seconds() - cpu
    return (
        f"{producers} producer(s): {records / elapsed:,.0f} records/s, "
        f"{records * size / 1e6 / elapsed:.0f} MB/s, {cpu / elapsed:.2f} cores"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=1_000_000)
    parser.add_argument("--size", type=int, default=1024, help="record value size in bytes")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--run", type=int, default=1000, help="records in a row per partition")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="kafka-mirror-bench-"))
    cluster = LocalKafka("B", workdir / "B")
    try:
        print("starting Kafka B…", flush=True)
        cluster.start()
        for round_ in range(args.rounds):
            for producers in (1, 2, 3):
                topic = f"ceiling-{round_}-{producers}"
                create_topic(cluster, topic, PARTITIONS)
                print(
                    f"  {write(cluster, topic, args.records, args.size, producers, args.run)}",
                    flush=True,
                )
    finally:
        cluster.remove()
        shutil.rmtree(workdir)


if __name__ == "__main__":
    main()
