"""Our worker against Apache Kafka's MirrorMaker 2 (dedicated mode), side by side on one machine.

    .venv/bin/python bench/vs_mirrormaker.py           # the full run (about 15 minutes)
    .venv/bin/python bench/vs_mirrormaker.py --quick   # a small run to try the harness

Starts its own Kafka clusters A and B, then:

1. Ceiling: Kafka's own ProducerPerformance (the preload) and ConsumerPerformance on A, for
   context: a mirror consumes from one broker and produces to another on the same cores.
2. Drain: per record size (1 KB and 100 B), 8 topics x 8 partitions are preloaded on A; each run
   mirrors the whole backlog to B. Runs alternate ours / MirrorMaker 2 and swap who goes first
   each round. Every run uses a fresh source alias, so it starts with fresh remote topics, groups
   and internal topics; its remote topics are deleted afterwards. Throughput is timed from the
   first mirrored record seen on B to the last (start-up excluded for both); CPU seconds are the
   mirror processes' own over the same window; memory is their peak resident set.
3. Latency: a steady produce rate on A; a consumer on B takes arrival time minus the record's
   timestamp (set by the producer on A, kept by both mirrors) for every record produced after
   the first 10 s. Runs alternate as in (2); the percentiles are over all runs' records.

Both mirrors get the same parallelism (`--parallelism`: worker replicas / MirrorMaker 2's
tasks.max), the same batching where comparable, offset syncs, checkpoints and heartbeats on, and
MirrorMaker 2 its launch script's JVM settings. Prints a table with the ratios ours / MM2 and
writes bench/results/vs_mirrormaker.{json,png}.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import (
    RESULTS,
    cpu_seconds,
    create_topic,
    end_offsets,
    peak_rss_bytes,
    perf_rate,
    preload,
    produce_perf,
    start_worker,
    stop,
    summary_header,
    two_clusters,
    worker_config,
    write_summary,
)
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient

from kafka_mirror.devstack.builds import kafka_libs
from kafka_mirror.devstack.kafka import KafkaCluster, java_command
from kafka_mirror.devstack.processes import free_port

TOPICS, PARTITIONS = 8, 8
LATENCY_WARMUP_SECONDS = 10
OURS, MM2 = "kafka-mirror", "MirrorMaker 2"

# MirrorMaker 2's launch script (connect-mirror-maker.sh via kafka-run-class.sh) runs it with these.
MM2_JVM = ("-Xms256M", "-XX:MaxGCPauseMillis=20", "-XX:InitiatingHeapOccupancyPercent=35")
MM2_LOG4J = """\
rootLogger.level = WARN
rootLogger.appenderRef.stdout.ref = STDOUT
appender.stdout.type = Console
appender.stdout.name = STDOUT
appender.stdout.layout.type = PatternLayout
appender.stdout.layout.pattern = [%d] %p %m (%c)%n
"""


class Mirror:
    """One mirror (ours or MirrorMaker 2) under test: started per run with a source alias."""

    name: str

    def __init__(self, a: KafkaCluster, b: KafkaCluster, workdir: Path, parallelism: int) -> None:
        self.a, self.b, self.workdir, self.parallelism = a, b, workdir, parallelism
        self.processes: list[subprocess.Popen[Any]] = []

    def start(self, alias: str, includes: str) -> None:
        raise NotImplementedError

    def check_alive(self) -> None:
        for process in self.processes:
            if process.poll() is not None:
                raise SystemExit(f"{self.name} exited; see its log in {self.workdir}")

    def cpu_seconds(self) -> float:
        return sum(cpu_seconds(p.pid) for p in self.processes)

    def peak_rss_bytes(self) -> int:
        return sum(peak_rss_bytes(p.pid) for p in self.processes)

    def stop(self) -> None:
        for process in self.processes:
            stop(process)
        self.processes = []


class OurWorker(Mirror):
    """`parallelism` worker replicas, each run as its pod runs it, sharing one consumer group."""

    name = OURS

    def start(self, alias: str, includes: str) -> None:
        config = worker_config(self.a, self.b, f"bench/{alias}", [includes], alias=alias)
        # MirrorMaker 2's naming, so both write the same remote topics.
        config["topicNaming"] = {"policy": "prefix"}
        for replica in range(self.parallelism):
            config["metricsPort"] = free_port()
            self.processes.append(start_worker(config, self.workdir, f"{alias}-worker-{replica}"))


class MirrorMaker2(Mirror):
    """Apache Kafka's MirrorMaker 2 in dedicated mode, from Maven Central's connect-mirror."""

    name = MM2

    def start(self, alias: str, includes: str) -> None:
        settings = {
            "clusters": f"{alias}, B",
            f"{alias}.bootstrap.servers": self.a.bootstrap_servers,
            "B.bootstrap.servers": self.b.bootstrap_servers,
            f"{alias}->B.enabled": "true",
            f"{alias}->B.topics": includes,
            f"B->{alias}.enabled": "false",
            "tasks.max": str(self.parallelism),
            "refresh.topics.interval.seconds": "5",
            "emit.checkpoints.enabled": "true",
            "emit.heartbeats.enabled": "true",
            # Our worker's batching: up to 5,000 records a poll, 1 MB batches, 5 ms linger.
            f"{alias}.consumer.max.poll.records": "5000",
            f"{alias}.consumer.fetch.max.bytes": str(64 * 1024 * 1024),
            f"{alias}.consumer.max.partition.fetch.bytes": str(8 * 1024 * 1024),
            "B.producer.linger.ms": "5",
            "B.producer.batch.size": str(1024 * 1024),
            "B.producer.buffer.memory": str(256 * 1024 * 1024),
            # Single-broker clusters.
            **{
                f"{name}.replication.factor": "1"
                for name in ("checkpoints.topic", "heartbeats.topic", "offset-syncs.topic")
            },
            **{
                f"{name}.storage.replication.factor": "1" for name in ("offset", "status", "config")
            },
            "replication.factor": "1",
        }
        properties = self.workdir / f"{alias}-mm2.properties"
        properties.write_text("".join(f"{k} = {v}\n" for k, v in settings.items()))
        log4j = self.workdir / "mm2-log4j2.properties"
        log4j.write_text(MM2_LOG4J)
        command = java_command(
            kafka_libs(),
            "org.apache.kafka.connect.mirror.MirrorMaker",
            str(properties),
            heap="2G",
            jvm_options=(*MM2_JVM, f"-Dlog4j2.configurationFile={log4j}"),
        )
        log = (self.workdir / f"{alias}-mm2.log").open("wb")
        self.processes.append(subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT))


@dataclass
class Drain:
    mirror: str
    size: int
    records: int
    seconds: float
    cpu_seconds: float
    peak_rss_bytes: int

    @property
    def megabytes(self) -> float:
        return self.records * self.size / 1e6


@dataclass
class Latency:
    mirror: str
    rate: int
    samples: list[float] = field(default_factory=list)

    def percentile(self, q: int) -> float:
        return statistics.quantiles(self.samples, n=100)[q - 1]


class Bench:
    def __init__(self, a: KafkaCluster, b: KafkaCluster) -> None:
        self.a, self.b = a, b
        self.target_admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        self.runs = 0

    def next_alias(self) -> str:
        self.runs += 1
        return f"A{self.runs}"

    def drain(self, mirror: Mirror, size: int, records: int) -> Drain:
        alias = self.next_alias()
        remote = [
            (f"{alias}.bench-{size}-{t}", p) for t in range(TOPICS) for p in range(PARTITIONS)
        ]
        print(f"  {mirror.name} ({alias}), {records:,} x {size} B:", end="", flush=True)
        mirror.start(alias, f"bench-{size}-.*")
        try:
            started, first = time.monotonic(), None
            mirrored, cpu_at_first = 0, 0.0
            while mirrored < records:
                time.sleep(0.25)
                mirror.check_alive()
                mirrored = end_offsets(self.target_admin, remote)
                if mirrored and first is None:
                    first, cpu_at_first = time.monotonic(), mirror.cpu_seconds()
                if time.monotonic() - started > 600:
                    raise SystemExit(f"{mirror.name} mirrored {mirrored:,} in 10 minutes")
            seconds = time.monotonic() - (first or started)
            result = Drain(
                mirror.name,
                size,
                records,
                seconds,
                mirror.cpu_seconds() - cpu_at_first,
                mirror.peak_rss_bytes(),
            )
        finally:
            mirror.stop()
        self.delete_remote_topics(alias)
        print(
            f" {records / seconds:,.0f} records/s, {result.megabytes / seconds:.1f} MB/s, "
            f"{result.cpu_seconds / result.megabytes * 1000:.1f} CPU ms/MB, "
            f"{result.peak_rss_bytes / 2**20:.0f} MiB peak",
            flush=True,
        )
        return result

    def latency(self, mirror: Mirror, rate: int, seconds: int, size: int) -> Latency:
        alias = self.next_alias()
        topic = f"steady-{alias}"
        create_topic(self.a, topic, PARTITIONS)
        remote = f"{alias}.{topic}"
        print(f"  {mirror.name} ({alias}), {rate:,} records/s for {seconds}s:", end="", flush=True)
        mirror.start(alias, topic)
        consumer = Consumer(
            {
                "bootstrap.servers": self.b.bootstrap_servers,
                "group.id": f"bench-latency-{alias}",
                "fetch.wait.max.ms": 10,
            }
        )
        try:
            self.wait_for_topic(mirror, remote)
            consumer.assign(
                [TopicPartition(remote, p, OFFSET_BEGINNING) for p in range(PARTITIONS)]
            )
            # Records produced in the first seconds (the producer's JVM warming up) do not count.
            warmup_ms = (time.time() + LATENCY_WARMUP_SECONDS) * 1000
            result = Latency(mirror.name, rate)
            producer = produce_perf(self.a, topic, rate * seconds, size, rate)
            received, deadline = 0, time.monotonic() + seconds + 60
            while received < rate * seconds and time.monotonic() < deadline:
                message = consumer.poll(0.1)
                if message is None or message.error():
                    continue
                arrived_ms = time.time() * 1000
                received += 1
                produced_ms = message.timestamp()[1]
                if produced_ms >= warmup_ms:
                    result.samples.append(arrived_ms - produced_ms)
            perf_rate(producer)
            mirror.check_alive()
        finally:
            consumer.close()
            mirror.stop()
        if received < rate * seconds:
            raise SystemExit(f"{mirror.name} delivered {received:,} of {rate * seconds:,} records")
        print(
            f" p50 {result.percentile(50):.0f} ms, p99 {result.percentile(99):.0f} ms",
            flush=True,
        )
        return result

    def wait_for_topic(self, mirror: Mirror, topic: str, timeout: float = 120) -> None:
        deadline = time.monotonic() + timeout
        while topic not in self.target_admin.list_topics(timeout=10).topics:
            mirror.check_alive()
            if time.monotonic() > deadline:
                raise SystemExit(f"{mirror.name} did not create {topic} in {timeout:.0f}s")
            time.sleep(0.5)
        time.sleep(3)  # let it assign the partitions and fetch before the clock starts

    def delete_remote_topics(self, alias: str) -> None:
        admin = self.target_admin
        topics = [t for t in admin.list_topics(timeout=10).topics if t.startswith(f"{alias}.")]
        for future in admin.delete_topics(topics).values():
            future.result()

    def consumer_ceiling(self, size: int, records: int) -> float:
        """Records/s Kafka's ConsumerPerformance reads the data set from A."""
        output = subprocess.run(
            java_command(
                kafka_libs(),
                "org.apache.kafka.tools.ConsumerPerformance",
                *("--bootstrap-server", self.a.bootstrap_servers),
                *("--include", f"bench-{size}-.*", "--num-records", str(records)),
                *("--group", f"bench-ceiling-{size}", "--hide-header", "--timeout", "60000"),
            ),
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        # Columns: start, end, MB, MB/s, records, records/s, rebalance ms, fetch ms, fetch MB/s,
        # fetch records/s.
        return float(output.strip().splitlines()[-1].split(",")[9])


def ratio(ours: float, theirs: float) -> float:
    return round(ours / theirs, 2) if theirs else float("nan")


def summarize(
    drains: list[Drain],
    latencies: list[Latency],
    ceilings: dict[int, dict[str, float]],
    args: argparse.Namespace,
) -> dict[str, Any]:
    by_size: dict[str, Any] = {}
    for size in args.sizes:
        figures: dict[str, dict[str, float]] = {}
        for name in (OURS, MM2):
            runs = [d for d in drains if d.mirror == name and d.size == size]
            figures[name] = {
                # Medians over the rounds; every run is kept in "runs".
                "records_per_second": statistics.median(d.records / d.seconds for d in runs),
                "megabytes_per_second": statistics.median(d.megabytes / d.seconds for d in runs),
                "cpu_seconds_per_megabyte": statistics.median(
                    d.cpu_seconds / d.megabytes for d in runs
                ),
                "peak_rss_mebibytes": max(d.peak_rss_bytes for d in runs) / 2**20,
            }
        by_size[str(size)] = {
            "records": args.records[size],
            **{name: {k: round(v, 4) for k, v in f.items()} for name, f in figures.items()},
            "ratio_ours_over_mm2": {
                key: ratio(figures[OURS][key], figures[MM2][key]) for key in figures[OURS]
            },
            "ceiling_records_per_second": ceilings[size],
        }
    latency: dict[str, Any] = {}
    for name in (OURS, MM2):
        merged = Latency(
            name, args.rate, [x for r in latencies if r.mirror == name for x in r.samples]
        )
        latency[name] = {
            "rate_records_per_second": args.rate,
            "samples": len(merged.samples),
            "p50_ms": round(merged.percentile(50), 1),
            "p99_ms": round(merged.percentile(99), 1),
        }
    latency["ratio_ours_over_mm2"] = {
        key: ratio(latency[OURS][key], latency[MM2][key]) for key in ("p50_ms", "p99_ms")
    }
    return {
        **summary_header(
            "kafka-mirror worker vs MirrorMaker 2 (dedicated mode), A -> B on loopback",
            "vs_mirrormaker.py",
        ),
        "parallelism": args.parallelism,
        "topics": TOPICS,
        "partitions_per_topic": PARTITIONS,
        "rounds": args.rounds,
        "drain": by_size,
        "latency": latency,
        "runs": [d.__dict__ for d in drains],
    }


def number(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def table(summary: dict[str, Any]) -> str:
    rows = [("", OURS, MM2, "ours / MM2")]
    for size, drain in summary["drain"].items():
        for key, label in (
            ("records_per_second", "records/s"),
            ("megabytes_per_second", "MB/s"),
            ("cpu_seconds_per_megabyte", "CPU seconds per MB"),
            ("peak_rss_mebibytes", "peak memory MiB"),
        ):
            ours, theirs = (number(drain[name][key]) for name in (OURS, MM2))
            rows.append(
                (
                    f"{size} B: {label}",
                    ours,
                    theirs,
                    f"{drain['ratio_ours_over_mm2'][key]:.2f}",
                )
            )
        ceiling = drain["ceiling_records_per_second"]
        rows.append(
            (
                f"{size} B: Kafka perf tools on A (records/s)",
                f"produce {ceiling['produce']:,.0f}",
                f"consume {ceiling['consume']:,.0f}",
                "",
            )
        )
    latency = summary["latency"]
    for q in ("p50_ms", "p99_ms"):
        rows.append(
            (
                f"latency {q[:3]} ms at {latency[OURS]['rate_records_per_second']:,}/s",
                f"{latency[OURS][q]:.1f}",
                f"{latency[MM2][q]:.1f}",
                f"{latency['ratio_ours_over_mm2'][q]:.2f}",
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    lines = [
        "| " + " | ".join(c.ljust(w) for c, w in zip(row, widths, strict=True)) + " |"
        for row in rows
    ]
    lines.insert(1, "|" + "|".join("-" * (w + 2) for w in widths) + "|")
    return "\n".join(lines)


def plot(summary: dict[str, Any], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    sizes = list(summary["drain"])
    figure, axes = plt.subplots(1, 4, figsize=(16, 4))
    panels: list[tuple[str, Callable[[str, str], float]]] = [
        (
            "throughput (MB/s, higher is better)",
            lambda s, m: summary["drain"][s][m]["megabytes_per_second"],
        ),
        (
            "CPU ms per MB (lower is better)",
            lambda s, m: 1000 * summary["drain"][s][m]["cpu_seconds_per_megabyte"],
        ),
        (
            "peak memory MiB (lower is better)",
            lambda s, m: summary["drain"][s][m]["peak_rss_mebibytes"],
        ),
    ]
    width = 0.38
    for axis, (title, value) in zip(axes, panels, strict=False):
        for i, name in enumerate((OURS, MM2)):
            positions = [x + (i - 0.5) * width for x in range(len(sizes))]
            axis.bar(positions, [value(s, name) for s in sizes], width, label=name)
        axis.set_xticks(range(len(sizes)), [f"{s} B records" for s in sizes])
        axis.set_title(title, fontsize=10)
    latency = summary["latency"]
    for i, name in enumerate((OURS, MM2)):
        positions = [x + (i - 0.5) * width for x in range(2)]
        axes[3].bar(
            positions, [latency[name]["p50_ms"], latency[name]["p99_ms"]], width, label=name
        )
    axes[3].set_xticks(range(2), ["p50", "p99"])
    axes[3].set_title(
        f"latency ms at {latency[OURS]['rate_records_per_second']:,} records/s (lower is better)",
        fontsize=10,
    )
    axes[0].legend()
    figure.suptitle(f"{summary['what']}\n{summary['date']}, {summary['machine']}", fontsize=10)
    figure.tight_layout()
    figure.savefig(path, dpi=110)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small data sets, one round")
    parser.add_argument("--rounds", type=int, default=2, help="drain runs per mirror and size")
    parser.add_argument("--parallelism", type=int, default=1, help="worker replicas / tasks.max")
    parser.add_argument("--rate", type=int, default=5000, help="records/s in the latency phase")
    parser.add_argument("--latency-seconds", type=int, default=45)
    parser.add_argument("--output", type=Path, default=RESULTS / "vs_mirrormaker.json")
    args = parser.parse_args()
    args.sizes = [1024, 100]
    args.records = {1024: 2_000_000, 100: 4_000_000}
    if args.quick:
        args.records, args.rounds, args.latency_seconds = {1024: 200_000, 100: 400_000}, 1, 20

    with two_clusters() as (workdir, a, b):
        mirrors: list[Mirror] = [
            OurWorker(a, b, workdir, args.parallelism),
            MirrorMaker2(a, b, workdir, args.parallelism),
        ]
        bench = Bench(a, b)
        try:
            ceilings: dict[int, dict[str, float]] = {}
            for size in args.sizes:
                total = args.records[size]
                print(
                    f"preloading {TOPICS} topics x {total // TOPICS:,} records of {size} B on A…",
                    flush=True,
                )
                rates = [
                    preload(a, f"bench-{size}-{t}", total // TOPICS, size, PARTITIONS)
                    for t in range(TOPICS)
                ]
                ceilings[size] = {
                    "produce": round(statistics.mean(rates)),
                    "consume": round(bench.consumer_ceiling(size, total)),
                }
                print(f"  Kafka's perf tools on A: {ceilings[size]}", flush=True)
            drains = []
            for size in args.sizes:
                print(
                    f"draining {args.records[size]:,} records of {size} B, {args.rounds} rounds…",
                    flush=True,
                )
                for round_ in range(args.rounds):
                    order = mirrors if round_ % 2 == 0 else mirrors[::-1]
                    drains += [bench.drain(m, size, args.records[size]) for m in order]
            print(f"latency at a steady {args.rate:,} records/s of 1 KB…", flush=True)
            os.sync()  # the drains' gigabytes written out now, not during the first latency run
            latencies = [
                bench.latency(m, args.rate, args.latency_seconds, 1024)
                for round_ in range(args.rounds)
                for m in (mirrors if round_ % 2 else mirrors[::-1])
            ]
        finally:
            for mirror in mirrors:
                mirror.stop()
    summary = summarize(drains, latencies, ceilings, args)
    summary["table"] = table(summary)
    write_summary(summary, args.output)
    print(summary["table"])
    plot(summary, args.output.with_suffix(".png"))
    print(f"wrote {args.output} and {args.output.with_suffix('.png')}")


if __name__ == "__main__":
    main()
