"""What the benchmarks share: Kafka's own perf tools, a worker run exactly as a pod runs it, the
mirror processes' CPU and memory, and the summary every benchmark writes."""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil
import yaml
from confluent_kafka import IsolationLevel, KafkaException, Producer, TopicPartition
from confluent_kafka.admin import AdminClient, NewTopic, OffsetSpec

from kafka_mirror.api.worker_config import WorkerConfig
from kafka_mirror.kafka.observe import ClusterReader
from kafka_mirror.worker.clients import mirror_producer_settings
from kafka_mirror.worker.linger import DRAINING_LINGER_MS
from kafka_mirror_dev.builds import kafka_libs
from kafka_mirror_dev.kafka import KAFKA_SCRIPTS_JVM, LocalKafka, java_command
from kafka_mirror_dev.prerequisites import worker_env
from kafka_mirror_dev.processes import free_port

RESULTS = Path(__file__).parent / "results"


def create_topic(cluster: LocalKafka, topic: str, partitions: int) -> None:
    admin = AdminClient({"bootstrap.servers": cluster.bootstrap_servers})
    admin.create_topics([NewTopic(topic, partitions, 1)])[topic].result()


def produce_perf(
    cluster: LocalKafka, topic: str, records: int, size: int, rate: int = -1
) -> subprocess.Popen[str]:
    """Kafka's ProducerPerformance writing `records` records of `size` bytes (at `rate`/s, or as
    fast as it can); its output is read by `perf_rate`."""
    return subprocess.Popen(
        java_command(
            kafka_libs(),
            "org.apache.kafka.tools.ProducerPerformance",
            *("--topic", topic, "--num-records", str(records), "--record-size", str(size)),
            *("--throughput", str(rate), "--producer-props"),
            f"bootstrap.servers={cluster.bootstrap_servers}",
            "acks=1",
            # At a steady rate, Kafka's default linger (5 ms since 4.0), as producers run.
            *(("linger.ms=10", "batch.size=262144") if rate < 0 else ("linger.ms=5",)),
        ),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def librdkafka_produce_rate(
    bootstrap_servers: str,
    topic: str,
    partitions: int,
    records: int,
    size: int,
    producers: int = 1,
    run: int = 1000,
    first: int = 0,
) -> tuple[float, float]:
    """Records/s, and cores, of this process writing `records` of `size` bytes to `topic` (of
    `partitions` partitions) through `producers` producers with the mirroring producer's
    settings at its draining linger (partition p through producer p mod n), in runs of `run`
    records per partition from partition `first` on, as a mirroring process writes what its
    consumer fetched."""
    settings = mirror_producer_settings(
        {"bootstrap.servers": bootstrap_servers, "linger.ms": DRAINING_LINGER_MS}
    )
    clients = [Producer(settings) for _ in range(producers)]
    for client in clients:
        client.list_topics(topic, timeout=10)
    value = os.urandom(size)
    cpu, started = own_cpu_seconds(), time.monotonic()
    for i in range(records):
        partition = (first + i // run) % partitions
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
    elapsed = time.monotonic() - started
    return records / elapsed, (own_cpu_seconds() - cpu) / elapsed


def own_cpu_seconds() -> float:
    """This process's CPU seconds, all its threads (librdkafka's included); not `cpu_seconds`,
    which counts its children too (a broker it started)."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def perf_rate(process: subprocess.Popen[str]) -> float:
    """Records/s from the last summary line of Kafka's ProducerPerformance."""
    output, errors = process.communicate()
    if process.returncode:
        raise RuntimeError(f"ProducerPerformance failed:\n{output}\n{errors[-3000:]}")
    rates = re.findall(r"([\d.]+) records/sec", output)
    return float(rates[-1])


def preload(cluster: LocalKafka, topic: str, records: int, size: int, partitions: int) -> float:
    """`records` records of `size` bytes on a new topic; returns ProducerPerformance's rate."""
    create_topic(cluster, topic, partitions)
    return perf_rate(produce_perf(cluster, topic, records, size))


def end_offsets(
    admin: AdminClient, partitions: Iterable[tuple[str, int]], committed: bool = False
) -> int:
    """The sum of the partitions' end offsets (0 for partitions that do not exist yet); with
    `committed`, where a `read_committed` reader stops (before any open transaction)."""
    # A fresh metadata read: the admin client's cache would not learn of new topics for minutes.
    existing = admin.list_topics(timeout=10).topics
    request = {
        TopicPartition(t, p): OffsetSpec.latest()  # type: ignore[no-untyped-call]
        for t, p in partitions
        if t in existing
    }
    if not request:
        return 0
    total = 0
    isolation = IsolationLevel.READ_COMMITTED if committed else IsolationLevel.READ_UNCOMMITTED
    answers = admin.list_offsets(request, isolation_level=isolation, request_timeout=10)
    for future in answers.values():
        with suppress(KafkaException):  # a partition just created may have no leader yet
            total += future.result().offset
    return total


def worker_config(
    a: LocalKafka, b: LocalKafka, mirror: str, includes: list[str], alias: str = "A"
) -> dict[str, Any]:
    return {
        "mirror": mirror,
        "source": {"alias": alias, "bootstrapServers": a.bootstrap_servers},
        "target": {"alias": "B", "bootstrapServers": b.bootstrap_servers},
        "selections": [{"name": "bench", "includes": includes}],
        "metricsPort": free_port(),
    }


def start_worker(
    config: dict[str, Any],
    workdir: Path,
    name: str = "worker",
    prefix: list[str] | None = None,
    env: dict[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """`python -m kafka_mirror worker --config FILE` (after `prefix`, e.g. `taskset -c 0`), with
    the environment its pod adds (the allocator, installed where missing) and `env` added to
    ours, logging to workdir/<name>.log."""
    config_path = workdir / f"{name}.yaml"
    config_path.write_text(yaml.safe_dump(config))
    return subprocess.Popen(
        [
            *(prefix or []),
            *(sys.executable, "-m", "kafka_mirror", "worker", "--config", str(config_path)),
        ],
        stdout=(workdir / f"{name}.log").open("wb"),
        stderr=subprocess.STDOUT,
        env={**os.environ, **worker_env(install=True), **(env or {})},
    )


def stop(process: subprocess.Popen[Any] | None, timeout: float = 30) -> None:
    """SIGTERM, then SIGKILL if it has not exited within `timeout` seconds."""
    if process is None or process.poll() is not None:
        return
    process.terminate()
    try:
        process.wait(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def mirror_until_committed(
    raw: dict[str, Any], workdir: Path, topic: str, partitions: int, records: int
) -> None:
    """Run one worker (as a pod runs it) until its group has committed `records` records of
    `topic`, printing progress; then stop it."""
    config = WorkerConfig.model_validate(raw)
    print("mirroring with one worker until it has committed every record…", flush=True)
    started = time.monotonic()
    worker = start_worker(raw, workdir)
    reader = ClusterReader(config.source.alias, config.source.client_config())
    try:
        committed = 0
        while committed < records:
            time.sleep(2)
            progress = reader.progress(config.consumer_group, {topic: partitions})
            committed = sum(p.committed or 0 for p in progress)
            print(f"  {time.monotonic() - started:6.1f}s  {committed:>10,} committed", flush=True)
            if worker.poll() is not None:
                raise SystemExit(f"the worker exited; see {workdir / 'worker.log'}")
    finally:
        reader.close()
        stop(worker, 60)


def mirrored_preload(
    a: LocalKafka, b: LocalKafka, workdir: Path, mirror: str, args: argparse.Namespace
) -> tuple[str, dict[str, Any]]:
    """`audited` on A with the records `audit_arguments` asked for, mirrored to B until the
    worker's group committed them all: the topic and the worker's configuration."""
    topic = "audited"
    preload(a, topic, args.records, args.size, args.partitions)
    raw = worker_config(a, b, mirror, [topic])
    mirror_until_committed(raw, workdir, topic, args.partitions, args.records)
    return topic, raw


def process_tree(pid: int) -> list[psutil.Process]:
    """A process and its live descendants (a worker pod's mirroring processes)."""
    root = psutil.Process(pid)
    return [root, *root.children(recursive=True)]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process and its descendants (all their threads) so far."""
    total = 0.0
    for process in process_tree(pid):
        with suppress(psutil.NoSuchProcess):
            times = process.cpu_times()
            total += times.user + times.system
    return total


def peak_rss_bytes(pid: int) -> int:
    """The resident set high-water marks (VmHWM) of a process and its descendants, added."""
    total = 0
    for process in process_tree(pid):
        with suppress(OSError, AttributeError):
            status = Path(f"/proc/{process.pid}/status").read_text()
            total += int(re.search(r"VmHWM:\s+(\d+) kB", status).group(1)) * 1024  # type: ignore[union-attr]
    return total


def machine() -> str:
    cpuinfo = Path("/proc/cpuinfo").read_text()
    model = re.search(r"model name\s*:\s*(.+)", cpuinfo)
    memory = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    return (
        f"{model.group(1) if model else platform.machine()}, {os.cpu_count()} cores, "
        f"{memory:.0f} GiB, {platform.system()} {platform.release()}"
    )


def audit_arguments(description: str, records: int, output: str) -> argparse.ArgumentParser:
    """The audit benchmarks' options: how many records, how large, over how many partitions,
    Spark's master and where the summary goes."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--records", type=int, default=records)
    parser.add_argument("--size", type=int, default=100, help="record value size in bytes")
    parser.add_argument("--partitions", type=int, default=8)
    parser.add_argument("--master", default="local[*]")
    parser.add_argument("--output", type=Path, default=RESULTS / output)
    return parser


def summary_header(what: str, script: str) -> dict[str, Any]:
    return {
        "what": what,
        "date": datetime.now(UTC).isoformat(timespec="seconds"),
        "machine": machine(),
        "command": f"python bench/{script} " + " ".join(sys.argv[1:]),
    }


def write_summary(summary: dict[str, Any], output: Path | None) -> None:
    """Print the summary as JSON and write it to `output` when given."""
    text = json.dumps(summary, indent=2) + "\n"
    print(text, end="")
    if output is not None:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text(text)


@contextmanager
def two_clusters() -> Iterator[tuple[Path, LocalKafka, LocalKafka]]:
    """A work directory and Kafka A and B started in it; removed afterwards."""
    workdir = Path(tempfile.mkdtemp(prefix="kafka-mirror-bench-"))
    # The brokers' default group delay and Kafka's own JVM settings, as in production: a worker
    # pod's processes (and MirrorMaker 2's Connect workers) starting together form one generation.
    a, b = (
        LocalKafka(
            n, workdir / n, initial_rebalance_delay_ms=3000, jvm=KAFKA_SCRIPTS_JVM, threads={}
        )
        for n in ("A", "B")
    )
    try:
        print("starting Kafka A and B…", flush=True)
        a.start()
        b.start()
        yield workdir, a, b
    except BaseException:
        print(f"the logs stay in {workdir}", flush=True)
        raise
    finally:
        a.remove()
        b.remove()
    shutil.rmtree(workdir)
