"""What the mirroring producer costs while the target stalls: librdkafka's idempotent producer
with the worker's settings, with librdkafka's default of 5 requests in flight, and without
idempotence (the peer), each writing a steady rate of 1 KB records to 3 partitions (one of
`make bench`'s three mirroring processes at 5,000/s) while the broker runs, then while it is
paused (SIGSTOP) for `--stall` seconds, as B paused for disk writeback in the latency runs
(docs/performance.md, "the target's stalls").

    .venv/bin/python bench/producer_stall.py               # 3 rounds, about 2 minutes
    .venv/bin/python bench/producer_stall.py --stall 1 --rate 5000

librdkafka's idempotent producer lets one request per partition be in flight once its batches
hold five records or more, and its broker thread polls with a zero timeout while the next
batch waits for that answer: it spins for as long as the broker is silent. The worker allows
one request in flight per connection, so the next batch waits in the send queue instead.
Reports each producer's CPU (cores) while the broker runs and while it is paused, and the
ratios to the peer while paused; writes bench/results/producer_stall.json.
"""

from __future__ import annotations

import argparse
import os
import shutil
import signal
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from common import RESULTS, create_topic, own_cpu_seconds, summary_header, write_summary
from confluent_kafka import Producer

from kafka_mirror.worker.clients import mirror_producer_settings
from kafka_mirror_dev.kafka import KAFKA_SCRIPTS_JVM, LocalKafka

PARTITIONS = 3
RUNNING_SECONDS = 5.0
VARIANTS = {
    "the mirror's settings (idempotent, 1 request in flight)": {},
    "idempotent, 5 requests in flight (librdkafka's default)": {
        "max.in.flight.requests.per.connection": 5
    },
    "not idempotent (the peer)": {"enable.idempotence": False, "enable.gapless.guarantee": False},
}


def produce_for(producer: Producer, topic: str, rate: int, seconds: float) -> float:
    """Write `rate` records/s for `seconds`; returns the cores this process used meanwhile."""
    value = os.urandom(1024)
    tick, sent = 0.01, 0
    cpu, started = own_cpu_seconds(), time.monotonic()
    while (elapsed := time.monotonic() - started) < seconds:
        while sent < rate * elapsed:
            producer.produce(topic, value, partition=sent % PARTITIONS)
            sent += 1
        producer.poll(0)
        time.sleep(tick)
    return (own_cpu_seconds() - cpu) / (time.monotonic() - started)


def one_round(cluster: LocalKafka, name: str, rate: int, stall: float) -> dict[str, float]:
    topic = f"stall-{time.monotonic_ns()}"
    create_topic(cluster, topic, PARTITIONS)
    settings = mirror_producer_settings({"bootstrap.servers": cluster.bootstrap_servers})
    producer = Producer({**settings, **VARIANTS[name]})
    produce_for(producer, topic, rate, 2.0)  # connected, the producer ID assigned
    running = produce_for(producer, topic, rate, RUNNING_SECONDS)
    broker = cluster.process
    assert broker is not None and broker.pid is not None
    os.kill(broker.pid, signal.SIGSTOP)
    try:
        paused = produce_for(producer, topic, rate, stall)
    finally:
        os.kill(broker.pid, signal.SIGCONT)
    assert producer.flush(60) == 0, "records left unacknowledged"
    return {"running_cores": running, "paused_cores": paused}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--rate", type=int, default=1667, help="records/s")
    parser.add_argument("--stall", type=float, default=2.0, help="seconds the broker is paused")
    parser.add_argument("--output", type=Path, default=RESULTS / "producer_stall.json")
    args = parser.parse_args()
    workdir = Path(tempfile.mkdtemp(prefix="kafka-mirror-bench-"))
    cluster = LocalKafka("B", workdir / "B", jvm=KAFKA_SCRIPTS_JVM, threads={})
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in VARIANTS}
    try:
        cluster.start()
        for round_ in range(args.rounds):
            for name in VARIANTS if round_ % 2 == 0 else reversed(list(VARIANTS)):
                result = one_round(cluster, name, args.rate, args.stall)
                runs[name].append(result)
                print(
                    f"round {round_ + 1}, {name}: {result['running_cores']:.3f} cores while "
                    f"the broker runs, {result['paused_cores']:.3f} while it is paused",
                    flush=True,
                )
    finally:
        cluster.remove()
        shutil.rmtree(workdir)
    medians: dict[str, Any] = {
        name: {
            key: round(statistics.median(r[key] for r in results), 3)
            for key in ("running_cores", "paused_cores")
        }
        for name, results in runs.items()
    }
    ours, default, peer = (medians[name]["paused_cores"] for name in VARIANTS)
    summary = {
        **summary_header(
            "CPU of librdkafka's producer while the target broker is paused", "producer_stall.py"
        ),
        "rate": args.rate,
        "stall_seconds": args.stall,
        "medians": medians,
        "paused_ratio_over_peer": {
            "the mirror's settings": round(ours / max(peer, 1e-3), 1),
            "5 requests in flight": round(default / max(peer, 1e-3), 1),
        },
        "runs": runs,
    }
    write_summary(summary, args.output)
    print(f"medians: {medians}; wrote {args.output}")


if __name__ == "__main__":
    main()
