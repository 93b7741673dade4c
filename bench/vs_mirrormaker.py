"""Our worker against Apache Kafka's MirrorMaker 2 (dedicated mode), side by side on one machine.

    .venv/bin/python bench/vs_mirrormaker.py           # the full run (about 80 minutes)
    .venv/bin/python bench/vs_mirrormaker.py --quick   # a small run to try the harness

Starts its own Kafka clusters A and B (with the brokers' default 3 s group delay, so that the
members of a group starting together form one generation), then, per record size (1 KB and
100 B; 8 topics x 8 partitions preloaded on A):

1. Ceiling: what the brokers themselves sustain here, each tool run once to warm up and then
   measured: Kafka's ConsumerPerformance reading the data set from A; and writing as many
   records of the size to B (64 partitions, the mirror's producer settings: idempotent,
   acks=all, 1 MB batches, 100 ms linger) with 1, 2 and 3 producers side by side (the
   `--candidates`), both as Kafka's ProducerPerformance processes and as processes with one
   librdkafka producer each (`common.librdkafka_produce_rate`), the best kept: on two cores the
   writers' own CPU limits them (the Java tools' more), so this is what the fastest writer here
   gets, not what B could take. A mirror can go no
   faster than the lower of reading A and writing B; its share of that is reported.
   `--ceiling-only` measures just this.
2. Best parallelism: one drain per candidate (`--candidates`: our worker's processes in one pod,
   MirrorMaker 2's tasks.max), each mirror's fastest kept for (3).
3. Drains, in two modes, `--rounds` each, alternating ours / MirrorMaker 2 and swapping who goes
   first each round: **best against best** (each at its best parallelism, the whole machine)
   and **equal CPU** (each at parallelism 1, pinned with taskset to the same one CPU). Each run
   mirrors the whole backlog with a fresh source alias (fresh remote topics, groups and internal
   topics, deleted afterwards). Throughput is timed from the first mirrored records seen on B to
   the last, and counts the records mirrored in that time (start-up excluded for both); CPU
   seconds are the mirror's processes' own (a worker pod's mirroring processes included) over
   the same window; memory is their peak resident set.
4. Latency: at each of the steady `--rates` (records/s of 1 KB produced on A, ProducerPerformance
   with Kafka's default 5 ms linger), `--latency-runs` runs per mirror, alternating and each
   at its best 1 KB parallelism (fresh, like a drain's); a consumer on B takes arrival time
   minus the record's timestamp (set by the producer, kept by both mirrors) for every record
   produced from 10 s after the mirror delivered its first record (so that neither mirror's
   start-up nor the backlog it found on starting counts; the time to that first record is
   reported apart), and a consumer straight on A the same for the source alone.
   Reported: the median run's p50 and p99. The source's own tail moves between runs here
   (its p99 at 5,000/s from 9 to 650 ms), and at 5,000/s the two brokers, the producer and a
   mirror keep the two cores about 80 % busy, so the lower rate shows the mirrors themselves.
   (Both mirrors at once, to share the source's hiccups, saturated the machine.)

5. Exactly once, the same records and sizes: each mirror's best parallelism searched again
   with ours at `delivery: exactlyOnce` (a transaction a second) and MirrorMaker 2 at
   `exactly.once.source.support=enabled` (KIP-618, its internal REST on, the source read
   `read_committed`, a transaction per poll); `--rounds` drains best against best, and latency
   at the `--exactly-once-rates`. Its drains read B's end where a `read_committed` reader
   stops, and end once every record is there and no transaction has committed for 2 s
   (transaction markers move the end too); their clock stops at the last move. The latency
   runs read B `read_committed` in both modes: a copy counts when its transaction commits.

Both get the same batching where comparable (MirrorMaker 2's producer lingers 100 ms in the
drains and 5 ms in the latency runs, as ours does by the backlog it sees), offset syncs,
checkpoints and heartbeats on, and MirrorMaker 2 its launch script's JVM settings. Prints a
table with the ratios ours / MM2 and writes bench/results/vs_mirrormaker.{json,png}
(`vs_mm2_report.py`).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import statistics
import subprocess
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from common import (
    RESULTS,
    cpu_seconds,
    create_topic,
    end_offsets,
    librdkafka_produce_rate,
    peak_rss_bytes,
    perf_rate,
    preload,
    produce_perf,
    start_worker,
    stop,
    two_clusters,
    worker_config,
    write_summary,
)
from confluent_kafka import OFFSET_BEGINNING, Consumer, TopicPartition
from confluent_kafka.admin import AdminClient
from vs_mm2_report import BEST_EOS, MM2, OURS, SOURCE, exactly_once, plot, summarize, table

from kafka_mirror.worker.linger import CAUGHT_UP_LINGER_MS, DRAINING_LINGER_MS
from kafka_mirror_dev.builds import kafka_libs
from kafka_mirror_dev.kafka import LocalKafka, java_command
from kafka_mirror_dev.processes import free_port

TOPICS, PARTITIONS = 8, 8
LATENCY_WARMUP_SECONDS = 10
MEASURED_CPU = "0"  # the CPU both mirrors are pinned to in the equal-CPU mode
BEST, EQUAL_CPU = "best against best", "equal CPU"
# How often a drain read as committed must stay put to count as done (exactly once: each
# transaction's markers move the end too, so the record count alone does not say when).
SETTLED_SECONDS = 2.0
# A drain that has not ended by then is stuck: MirrorMaker 2 in exactly-once mode took minutes
# to copy its first record on a busy machine, so this is no tighter.
DRAIN_LIMIT_SECONDS = 1200

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


@dataclass(frozen=True)
class Setting:
    """How a mirror runs: its parallelism (our worker's processes in one pod, MirrorMaker 2's
    `tasks.max`) and the CPUs it is pinned to (`taskset`), or the whole machine."""

    parallelism: int
    cpus: str | None = None
    exactly_once: bool = False  # ours `delivery: exactlyOnce`, MM2's exactly.once.source.support

    def prefix(self) -> list[str]:
        return ["taskset", "-c", self.cpus] if self.cpus else []

    def describe(self, mirror: str) -> str:
        one, more = ("process", "processes") if mirror == OURS else ("task", "tasks")
        unit = one if self.parallelism == 1 else more
        where = f", pinned to CPU {self.cpus}" if self.cpus else ""
        return f"{self.parallelism} {unit}{where}{', exactly once' if self.exactly_once else ''}"

    def label(self, mirror: str) -> str:
        """The mirror's name in a latency run's figures."""
        return exactly_once(mirror) if self.exactly_once else mirror


class Mirror:
    """One mirror (ours or MirrorMaker 2) under test: started per run with a source alias."""

    name: str

    def __init__(self, a: LocalKafka, b: LocalKafka, workdir: Path) -> None:
        self.a, self.b, self.workdir = a, b, workdir
        self.processes: list[subprocess.Popen[Any]] = []

    def start(self, alias: str, includes: str, setting: Setting, draining: bool) -> None:
        """`draining`: a backlog to mirror (the drains), else a steady rate (latency)."""
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
    """One worker pod, run as its pod runs it, with `parallelism` mirroring processes."""

    name = OURS

    def start(self, alias: str, includes: str, setting: Setting, draining: bool) -> None:
        # Its producer lingers as `worker/linger.py` decides, by the backlog it sees.
        config = worker_config(self.a, self.b, f"bench/{alias}", [includes], alias=alias)
        # MirrorMaker 2's naming, so both write the same remote topics.
        config["topicNaming"] = {"policy": "prefix"}
        config["processes"] = setting.parallelism
        if setting.exactly_once:
            config["delivery"] = "exactlyOnce"  # a transaction each second (commitInterval)
        self.processes.append(
            start_worker(config, self.workdir, f"{alias}-worker", prefix=setting.prefix())
        )


class MirrorMaker2(Mirror):
    """Apache Kafka's MirrorMaker 2 in dedicated mode, from Maven Central's connect-mirror."""

    name = MM2

    def start(self, alias: str, includes: str, setting: Setting, draining: bool) -> None:
        linger = DRAINING_LINGER_MS if draining else CAUGHT_UP_LINGER_MS
        settings = {
            "clusters": f"{alias}, B",
            f"{alias}.bootstrap.servers": self.a.bootstrap_servers,
            "B.bootstrap.servers": self.b.bootstrap_servers,
            f"{alias}->B.enabled": "true",
            f"{alias}->B.topics": includes,
            f"B->{alias}.enabled": "false",
            "tasks.max": str(setting.parallelism),
            "refresh.topics.interval.seconds": "5",
            "emit.checkpoints.enabled": "true",
            "emit.heartbeats.enabled": "true",
            # Our worker's batching: up to 5,000 records a poll, 1 MB batches, its linger (100 ms
            # draining a backlog, 5 ms at a steady rate; a fixed 5 ms drained no faster).
            f"{alias}.consumer.max.poll.records": "5000",
            f"{alias}.consumer.fetch.max.bytes": str(64 * 1024 * 1024),
            f"{alias}.consumer.max.partition.fetch.bytes": str(8 * 1024 * 1024),
            "B.producer.linger.ms": str(linger),
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
        if setting.exactly_once:  # KIP-618, as Kafka's geo-replication docs set it up
            settings |= {
                "B.exactly.once.source.support": "enabled",
                "dedicated.mode.enable.internal.rest": "true",
                "listeners": f"http://127.0.0.1:{free_port()}",
                f"{alias}.consumer.isolation.level": "read_committed",
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
        self.processes.append(
            subprocess.Popen([*setting.prefix(), *command], stdout=log, stderr=subprocess.STDOUT)
        )


@dataclass
class Drain:
    mirror: str
    mode: str
    setting: Setting
    size: int
    records: int
    seconds: float
    cpu_seconds: float
    peak_rss_bytes: int

    @property
    def megabytes(self) -> float:
        return self.records * self.size / 1e6

    @property
    def rate(self) -> float:
        return self.records / self.seconds


@dataclass
class Latency:
    mirror: str
    rate: int
    setting: str  # how the mirror ran (`Setting.describe`), or how the source was read
    samples: list[float] = field(default_factory=list)  # ms from produce to arrival
    produced_s: list[float] = field(default_factory=list)  # each sample's, s after the warm-up
    first_record_s: float = 0.0  # from the producer's start to the first record's arrival

    def percentile(self, q: int) -> float:
        return statistics.quantiles(self.samples, n=100)[q - 1]


class Bench:
    def __init__(self, a: LocalKafka, b: LocalKafka) -> None:
        self.a, self.b = a, b
        self.target_admin = AdminClient({"bootstrap.servers": b.bootstrap_servers})
        self.runs = 0

    def next_alias(self) -> str:
        self.runs += 1
        return f"A{self.runs}"

    def drain(self, mirror: Mirror, size: int, records: int, setting: Setting, mode: str) -> Drain:
        alias = self.next_alias()
        remote = [
            (f"{alias}.bench-{size}-{t}", p) for t in range(TOPICS) for p in range(PARTITIONS)
        ]
        print(
            f"  {mirror.name} ({alias}, {setting.describe(mirror.name)}), {records:,} x {size} B:",
            end="",
            flush=True,
        )
        mirror.start(alias, f"bench-{size}-.*", setting, draining=True)
        try:
            started, first = time.monotonic(), None
            mirrored, cpu_at_first, mirrored_at_first = 0, 0.0, 0
            last = (started, 0.0, 0)  # when the end last moved, the CPU then, where it was
            while not self._done(mirrored, records, last, setting.exactly_once):
                time.sleep(0.25)
                mirror.check_alive()
                mirrored = end_offsets(self.target_admin, remote, setting.exactly_once)
                if mirrored and first is None:
                    first, cpu_at_first = time.monotonic(), mirror.cpu_seconds()
                    mirrored_at_first = mirrored  # before the clock started: not counted
                if mirrored != last[2]:
                    last = (time.monotonic(), mirror.cpu_seconds(), mirrored)
                if time.monotonic() - started > DRAIN_LIMIT_SECONDS:
                    raise SystemExit(
                        f"{mirror.name} mirrored {mirrored:,} in {DRAIN_LIMIT_SECONDS} s"
                    )
            ended, cpu_at_end, _ = last
            result = Drain(
                mirror.name,
                mode,
                setting,
                size,
                records - mirrored_at_first,
                ended - (first or started),
                cpu_at_end - cpu_at_first,
                mirror.peak_rss_bytes(),
            )
        finally:
            mirror.stop()
        self.delete_remote_topics(alias)
        print(
            f" {result.rate:,.0f} records/s, {result.megabytes / result.seconds:.1f} MB/s, "
            f"{result.cpu_seconds / result.megabytes * 1000:.1f} CPU ms/MB, "
            f"{result.peak_rss_bytes / 2**20:.0f} MiB peak",
            flush=True,
        )
        return result

    @staticmethod
    def _done(
        mirrored: int, records: int, last: tuple[float, float, int], exactly_once: bool
    ) -> bool:
        """Every record mirrored; exactly once, also no transaction committed for a while
        (the end counts their markers as well as the records)."""
        if mirrored < records:
            return False
        return not exactly_once or time.monotonic() - last[0] >= SETTLED_SECONDS

    def latency(self, mirror: Mirror, setting: Setting, rate: int, seconds: int) -> list[Latency]:
        """One run at a steady rate: the mirror's records and, from a consumer straight on A,
        the source alone (its own hiccups, which the mirror cannot hide)."""
        alias = self.next_alias()
        topic = f"steady-{alias}"
        create_topic(self.a, topic, PARTITIONS)
        remote = f"{alias}.{topic}"
        label = setting.label(mirror.name)
        print(f"  {label} ({alias}), {rate:,} records/s for {seconds}s:", end="", flush=True)
        mirror.start(alias, topic, setting, draining=False)
        consumers = [
            Consumer(
                {
                    "bootstrap.servers": cluster.bootstrap_servers,
                    "group.id": f"bench-latency-{alias}",
                    "fetch.wait.max.ms": 10,
                    # Exactly once, a record arrives when its transaction commits.
                    "isolation.level": "read_committed",
                }
            )
            for cluster in (self.a, self.b)
        ]
        names = {topic: SOURCE, remote: label}
        results = {
            SOURCE: Latency(SOURCE, rate, "a consumer on A"),
            label: Latency(label, rate, setting.describe(mirror.name)),
        }
        try:
            self.wait_for_topic(mirror, remote)
            for consumer, topic_read in zip(consumers, names, strict=True):
                consumer.assign(
                    [TopicPartition(topic_read, p, OFFSET_BEGINNING) for p in range(PARTITIONS)]
                )
            # The producer runs LATENCY_WARMUP_SECONDS longer than the counted window; which
            # records count is decided once the mirror's first record has arrived (below).
            produced = rate * (seconds + LATENCY_WARMUP_SECONDS)
            started_ms = time.time() * 1000
            producer = produce_perf(self.a, topic, produced, 1024, rate)
            arrivals: dict[str, list[tuple[float, float]]] = {n: [] for n in names.values()}
            deadline = time.monotonic() + seconds + LATENCY_WARMUP_SECONDS + 60
            while min(len(a) for a in arrivals.values()) < produced and time.monotonic() < deadline:
                for consumer in consumers:
                    for message in consumer.consume(500, 0.002):
                        if not message.error():
                            arrivals[names[message.topic() or ""]].append(
                                (message.timestamp()[1], time.time() * 1000)
                            )
            perf_rate(producer)
            mirror.check_alive()
        finally:
            for consumer in consumers:
                consumer.close()
            mirror.stop()
        delivered = len(arrivals[label])
        if delivered < produced:
            raise SystemExit(f"{label} delivered {delivered:,} of {produced:,} records")
        # A steady rate: records count from LATENCY_WARMUP_SECONDS after the mirror delivered
        # its first, so that neither mirror's start-up (our processes' group join, MirrorMaker
        # 2's JVM warming up) nor the backlog it found falls in the window.
        first_ms = min(arrived for _, arrived in arrivals[label])
        steady_ms = first_ms + LATENCY_WARMUP_SECONDS * 1000
        for name, pairs in arrivals.items():
            result = results[name]
            result.first_record_s = (min(a for _, a in pairs) - started_ms) / 1000
            for produced_ms, arrived_ms in pairs:
                if produced_ms >= steady_ms:
                    result.samples.append(arrived_ms - produced_ms)
                    result.produced_s.append((produced_ms - steady_ms) / 1000)
        print(
            ";".join(
                f" {r.mirror} p50 {r.percentile(50):.0f} ms, p99 {r.percentile(99):.0f} ms"
                f" (first record after {r.first_record_s:.1f} s)"
                for r in results.values()
            ),
            flush=True,
        )
        return list(results.values())

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

    def ceiling(self, size: int, records: int, parallelism: list[int]) -> dict[str, float]:
        """Records/s the brokers sustain here: reading the data set from A, writing as many
        records to B with each count of producers side by side, by Kafka's Java tool and by
        librdkafka; each tool's second run (the first warms it up)."""
        consume = [self.consumer_rate(size, records, run) for run in range(2)][-1]
        self.producer_rate(size, records, 0, 1)  # warm-up
        java = max(self.producer_rate(size, records, n, n) for n in parallelism)
        self.librdkafka_rate(size, records // 4, 1)  # warm-up
        librdkafka = max(self.librdkafka_rate(size, records, n) for n in parallelism)
        return {
            "consume_a": round(consume),
            "produce_b": round(max(java, librdkafka)),
            "produce_b_java": round(java),
            "produce_b_librdkafka": round(librdkafka),
        }

    def librdkafka_rate(self, size: int, records: int, processes: int) -> float:
        """Records/s of `processes` processes, one librdkafka producer each, writing `records`
        together to one topic (as the mirror's processes do): their rates summed."""
        topic = f"ceiling-{size}-librdkafka-{processes}"
        partitions = TOPICS * PARTITIONS
        create_topic(self.b, topic, partitions)
        spawn = multiprocessing.get_context("spawn")  # no fork of a process with client threads
        with ProcessPoolExecutor(processes, mp_context=spawn) as pool:
            shares = [
                pool.submit(
                    librdkafka_produce_rate,
                    self.b.bootstrap_servers,
                    topic,
                    partitions,
                    records // processes,
                    size,
                    first=k * partitions // processes,
                )
                for k in range(processes)
            ]
            rate = sum(share.result()[0] for share in shares)
        self.target_admin.delete_topics([topic])[topic].result()
        return rate

    def consumer_rate(self, size: int, records: int, run: int) -> float:
        output = subprocess.run(
            java_command(
                kafka_libs(),
                "org.apache.kafka.tools.ConsumerPerformance",
                *("--bootstrap-server", self.a.bootstrap_servers),
                *("--include", f"bench-{size}-.*", "--num-records", str(records)),
                *("--group", f"bench-ceiling-{size}-{run}", "--hide-header", "--timeout", "60000"),
            ),
            check=True,
            capture_output=True,
            text=True,
        ).stdout
        # Columns: start, end, MB, MB/s, records, records/s, rebalance ms, fetch ms, fetch MB/s,
        # fetch records/s.
        return float(output.strip().splitlines()[-1].split(",")[9])

    def producer_rate(self, size: int, records: int, run: int, producers: int) -> float:
        """Records/s of `producers` ProducerPerformance processes writing `records` together to
        one topic: their rates summed (they start together and write equal shares)."""
        topic = f"ceiling-{size}-{run}"
        create_topic(self.b, topic, TOPICS * PARTITIONS)
        processes = [self._producer(topic, records // producers, size) for _ in range(producers)]
        rate = sum(perf_rate(process) for process in processes)
        self.target_admin.delete_topics([topic])[topic].result()
        return rate

    def _producer(self, topic: str, records: int, size: int) -> subprocess.Popen[str]:
        return subprocess.Popen(
            java_command(
                kafka_libs(),
                "org.apache.kafka.tools.ProducerPerformance",
                *("--topic", topic, "--num-records", str(records), "--record-size", str(size)),
                *("--throughput", "-1", "--producer-props"),
                f"bootstrap.servers={self.b.bootstrap_servers}",
                # The mirrors' producer settings.
                *("acks=all", "enable.idempotence=true", f"linger.ms={DRAINING_LINGER_MS}"),
                "batch.size=1048576",
                "buffer.memory=268435456",
                # The 256 MB buffer does not fit the tools' default 512 MB heap with 1 MB
                # batches on 64 partitions; MirrorMaker 2 gets 2 GB too.
                heap="2g",
            ),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small data sets, one round")
    parser.add_argument("--rounds", type=int, default=3, help="drain runs per mirror, mode, size")
    parser.add_argument(
        "--candidates",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[1, 2, 3],
        help="parallelism tried for the best-against-best mode (processes / tasks.max)",
    )
    parser.add_argument(
        "--rates",
        type=lambda text: [int(n) for n in text.split(",") if n],  # "": no latency runs
        default=[2000, 5000],
        help="the latency phase's steady rates, records/s",
    )
    parser.add_argument(
        "--exactly-once-rates",
        type=lambda text: [int(n) for n in text.split(",") if n],
        default=[5000],
        help="the steady rates at which both mirrors' exactly-once latency is measured too",
    )
    parser.add_argument("--latency-seconds", type=int, default=45)
    parser.add_argument("--latency-runs", type=int, default=5)
    parser.add_argument("--output", type=Path, default=RESULTS / "vs_mirrormaker.json")
    parser.add_argument(
        "--ceiling-only", action="store_true", help="measure the brokers' ceiling, then stop"
    )
    parser.add_argument(
        "--sizes",
        type=lambda text: [int(n) for n in text.split(",")],
        default=[1024, 100],
        help="record sizes, bytes (the latency runs use 1 KB whatever this says)",
    )
    args = parser.parse_args()
    args.records = {1024: 2_000_000, 100: 4_000_000}
    if args.quick:
        args.records, args.rounds = {1024: 200_000, 100: 400_000}, 1
        args.latency_seconds, args.latency_runs = 20, 1

    with two_clusters() as (workdir, a, b):
        mirrors: list[Mirror] = [OurWorker(a, b, workdir), MirrorMaker2(a, b, workdir)]
        bench = Bench(a, b)
        try:
            ceilings: dict[int, dict[str, float]] = {}
            for size in args.sizes:
                total = args.records[size]
                print(
                    f"preloading {TOPICS} topics x {total // TOPICS:,} records of {size} B on A…",
                    flush=True,
                )
                for t in range(TOPICS):
                    preload(a, f"bench-{size}-{t}", total // TOPICS, size, PARTITIONS)
                ceilings[size] = bench.ceiling(size, total, args.candidates)
                print(f"  the brokers' ceiling (records/s): {ceilings[size]}", flush=True)
            if args.ceiling_only:
                return
            drains: list[Drain] = []
            # Each mirror's fastest parallelism per size and delivery, by its label.
            best: dict[tuple[str, int], Setting] = {}
            for size in args.sizes:
                for eos in (False, True):
                    search = f"search{', exactly once' if eos else ''}"
                    print(f"best parallelism at {size} B, {search}…", flush=True)
                    for mirror in mirrors:
                        tried = [
                            bench.drain(
                                mirror, size, args.records[size], Setting(n, None, eos), search
                            )
                            for n in args.candidates
                        ]
                        drains += tried
                        fastest = max(tried, key=lambda d: d.rate).setting
                        best[(fastest.label(mirror.name), size)] = fastest
                for mode in (BEST, EQUAL_CPU, BEST_EOS):
                    print(f"draining {size} B, {mode}, {args.rounds} rounds…", flush=True)
                    for round_ in range(args.rounds):
                        for mirror in mirrors if round_ % 2 == 0 else mirrors[::-1]:
                            setting = {
                                BEST: best[(mirror.name, size)],
                                EQUAL_CPU: Setting(1, MEASURED_CPU),
                                BEST_EOS: best[(exactly_once(mirror.name), size)],
                            }[mode]
                            drains.append(
                                bench.drain(mirror, size, args.records[size], setting, mode)
                            )
            os.sync()  # the drains' gigabytes written out now, not during the first latency run
            latencies = []
            steady = [(rate, False) for rate in args.rates]
            steady += [(rate, True) for rate in args.exactly_once_rates]
            for rate, eos in steady:
                how = ", exactly once" if eos else ""
                print(f"latency at a steady {rate:,} records/s of 1 KB{how}…", flush=True)
                for run in range(args.latency_runs):
                    for m in mirrors if run % 2 == 0 else mirrors[::-1]:
                        label = exactly_once(m.name) if eos else m.name
                        latencies += bench.latency(
                            m, best[(label, 1024)], rate, args.latency_seconds
                        )
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
