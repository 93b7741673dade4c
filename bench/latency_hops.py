"""Where the latency tail at a steady rate comes from: our worker A -> B at a steady rate of
1 KB records (5,000/s unless `--rate`; 3 processes, as `make bench` runs it), with a second
consumer reading the same records straight from A (no mirror): the source's own delivery
latency, the control.

    .venv/bin/python bench/latency_hops.py                                  # 3 runs
    .venv/bin/python bench/latency_hops.py --worker '{"refreshTopicsIntervalSeconds": 300}'

Per run and side (A: the source alone; B: through the mirror): p50, p99, max, and the seconds
(from the start of producing) in which records took over 50 ms. Seconds slow on B but not on A
are the mirror's own.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import vs_mirrormaker
from common import create_topic, perf_rate, produce_perf, two_clusters
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from vs_mirrormaker import LATENCY_WARMUP_SECONDS, PARTITIONS, Bench, OurWorker, Setting

SECONDS = 45


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--rate", type=int, default=5000, help="records/s")
    parser.add_argument("--slow-ms", type=int, default=50, help="a slow second's threshold")
    parser.add_argument("--worker", type=json.loads, default={}, help="worker settings, JSON")
    args = parser.parse_args()
    base = vs_mirrormaker.worker_config

    def with_settings(*positional: Any, **named: Any) -> dict[str, Any]:
        return {**base(*positional, **named), **args.worker}

    vs_mirrormaker.worker_config = with_settings
    with two_clusters() as (workdir, a, b):
        ours, bench = OurWorker(a, b, workdir), Bench(a, b)
        try:
            for run in range(args.runs):
                alias = bench.next_alias()
                topic = f"steady-{alias}"
                remote = f"{alias}.{topic}"
                create_topic(a, topic, PARTITIONS)
                ours.start(alias, topic, Setting(3), draining=False)
                consumers = {
                    side: Consumer(
                        {
                            "bootstrap.servers": cluster.bootstrap_servers,
                            "group.id": f"latency-hops-{alias}-{side}",
                            "fetch.wait.max.ms": 10,
                        }
                    )
                    for side, cluster in (("A", a), ("B", b))
                }
                bench.wait_for_topic(ours, remote)
                for side, name in (("A", topic), ("B", remote)):
                    consumers[side].assign(
                        [TopicPartition(name, p, OFFSET_BEGINNING) for p in range(PARTITIONS)]
                    )
                started_ms = time.time() * 1000
                warmup_ms = started_ms + LATENCY_WARMUP_SECONDS * 1000
                producer = produce_perf(a, topic, args.rate * SECONDS, 1024, args.rate)
                samples: dict[str, list[tuple[float, float]]] = {"A": [], "B": []}
                received = dict.fromkeys(samples, 0)
                deadline = time.monotonic() + SECONDS + 60
                while min(received.values()) < args.rate * SECONDS and time.monotonic() < deadline:
                    for side, consumer in consumers.items():
                        for message in consumer.consume(500, 0.005):
                            if message.error():
                                continue
                            arrived_ms, produced_ms = time.time() * 1000, message.timestamp()[1]
                            received[side] += 1
                            if produced_ms >= warmup_ms:
                                samples[side].append(
                                    (produced_ms - started_ms, arrived_ms - produced_ms)
                                )
                perf_rate(producer)
                for consumer in consumers.values():
                    consumer.close()
                ours.stop()
                for side, series in samples.items():
                    latencies = [latency for _, latency in series]
                    q = statistics.quantiles(latencies, n=100)
                    slow = sorted(
                        {int(at // 1000) for at, latency in series if latency > args.slow_ms}
                    )
                    print(
                        f"run {run} {side}: p50 {q[49]:.0f} ms, p99 {q[98]:.0f} ms, "
                        f"max {max(latencies):.0f} ms; over {args.slow_ms} ms in seconds {slow}",
                        flush=True,
                    )
        finally:
            ours.stop()


if __name__ == "__main__":
    main()
