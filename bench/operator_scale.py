"""Operator at scale: N mirrors on the same two clusters, the operator's memory, threads, Kafka
connections, API request rate, and how old the mirrors' status gets.

Starts Kafka A and B and a real kube-apiserver (no controllers: the workers never run, so every
mirror's lag is real and grows), applies N KafkaMirrors (A -> B) each with one
MirrorTopicSelection naming one of the bench topics, then runs the operator exactly as in a
cluster (`python -m kafka_mirror operator`, status every 10 s). Once every mirror has a status,
records are produced to every topic every --produce-every seconds; a watch on the mirrors
records when each mirror's `totalLag` first shows each batch: that delay is the status age.
The goal (issue 67): operator peak RSS under 256 MiB, every status age under 30 s; under
`--tenant-load`, under the chart's 512 MiB limit.

    .venv/bin/python bench/operator_scale.py                 # 1,000 mirrors
    .venv/bin/python bench/operator_scale.py --mirrors 200
    .venv/bin/python bench/operator_scale.py --tenant-load   # issue 63's tenant load

`--tenant-load` is what one team could do to the shared operator: every mirror's client settings
differ (its own `client.rack`, and 2 GiB of `queued.max.messages.kbytes`), every other mirror is
paused (no pods bound it), and the first mirror has 100 more selections of 256 patterns each.

Writes bench/results/operator_scale_<N>.json (see --output) and a plot next to it.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import threading
import time
from collections import defaultdict
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import matplotlib
import psutil
from common import RESULTS, peak_rss_bytes, summary_header, two_clusters, write_summary
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kubernetes import client, watch
from matplotlib import pyplot
from prometheus_client.parser import text_string_to_metric_families
from reconcile_latency import figures, mirror, operator_counts

from kafka_mirror.api.models import API_VERSION, GROUP, VERSION
from kafka_mirror.kube import api_client, apply, install_crds
from kafka_mirror_dev.apiserver import KubeApiServer
from kafka_mirror_dev.kafka import LocalKafka
from kafka_mirror_dev.operator import OperatorProcess

MEMORY_GOAL, TENANT_MEMORY_GOAL, AGE_GOAL = 256 * 2**20, 512 * 2**20, 30.0
TOPICS, PARTITIONS, RECORDS = 10, 3, 30  # records per topic per batch
NAMESPACE = "bench"


def topic_of(index: int) -> str:
    return f"bench.t{index % TOPICS}"


def selection(index: int, mirror_name: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "MirrorTopicSelection",
        "metadata": {"name": f"{mirror_name}-topics", "namespace": NAMESPACE},
        "spec": {"mirror": mirror_name, "includes": [topic_of(index).replace(".", "\\.")]},
    }


def produce(producer: Producer, records: int) -> None:
    for t in range(TOPICS):
        for i in range(records):
            producer.produce(topic_of(t), value=b"x" * 100, partition=i % PARTITIONS)
    producer.flush(30)


class OperatorSampler(threading.Thread):
    """The operator process's RSS, threads and TCP connections to Kafka, once a second."""

    def __init__(self, pid: int, kafka_ports: set[int]) -> None:
        super().__init__(name="sampler", daemon=True)
        self.process, self.kafka_ports = psutil.Process(pid), kafka_ports
        self.samples: list[tuple[float, int, int, int]] = []  # time, rss, threads, kafka conns
        self.stopping = threading.Event()

    def run(self) -> None:
        started = time.monotonic()
        while not self.stopping.wait(1.0):
            try:
                connections = self.process.net_connections(kind="tcp")
                kafka = sum(1 for c in connections if c.raddr and c.raddr.port in self.kafka_ports)
                rss, threads = self.process.memory_info().rss, self.process.num_threads()
            except psutil.NoSuchProcess:
                return
            self.samples.append((time.monotonic() - started, rss, threads, kafka))


class LagWatch(threading.Thread):
    """For each mirror, when its status's totalLag first reached each batch's expected lag."""

    def __init__(self, api: client.ApiClient) -> None:
        super().__init__(name="lag-watch", daemon=True)
        self.custom = client.CustomObjectsApi(api)
        self.lock = threading.Lock()
        self.batches: list[tuple[float, int]] = []  # (produced at, expected lag per mirror)
        self.next_batch: dict[str, int] = defaultdict(int)
        self.ages: list[float] = []
        self.stopping = threading.Event()

    def expect(self, produced_at: float, lag: int) -> None:
        with self.lock:
            self.batches.append((produced_at, lag))

    def seen(self, name: str, lag: int, at: float) -> None:
        with self.lock:
            while self.next_batch[name] < len(self.batches):
                produced_at, expected = self.batches[self.next_batch[name]]
                if lag < expected:
                    return
                self.ages.append(at - produced_at)
                self.next_batch[name] += 1

    def run(self) -> None:
        version = None
        while not self.stopping.is_set():
            extra: dict[str, Any] = {"resource_version": version} if version else {}
            try:
                for event in watch.Watch().stream(
                    self.custom.list_namespaced_custom_object,
                    GROUP,
                    VERSION,
                    NAMESPACE,
                    "kafkamirrors",
                    timeout_seconds=60,
                    **extra,
                ):
                    body = event["object"]
                    version = body["metadata"]["resourceVersion"]
                    lag = (body.get("status") or {}).get("totalLag")
                    if lag is not None:
                        self.seen(body["metadata"]["name"], lag, time.monotonic())
                    if self.stopping.is_set():
                        return
            except Exception:
                version = None  # e.g. 410 Gone: start over from a fresh list
                self.stopping.wait(0.5)


def request_counts(api: client.ApiClient) -> dict[str, float]:
    """apiserver_request_total by verb, from the API server's own metrics."""
    method, url, headers, _, _ = api.param_serialize(
        "GET", "/metrics", auth_settings=["BearerToken"]
    )
    response = api.call_api(method, url, header_params=headers)
    response.read()
    counts: dict[str, float] = defaultdict(float)
    for family in text_string_to_metric_families(response.data.decode()):
        for sample in family.samples:
            if sample.name == "apiserver_request_total":
                counts[sample.labels["verb"]] += sample.value
    return counts


def statuses_with_lag(api: client.ApiClient) -> int:
    listed: Any = client.CustomObjectsApi(api).list_namespaced_custom_object(
        GROUP, VERSION, NAMESPACE, "kafkamirrors"
    )
    return sum((i.get("status") or {}).get("totalLag") is not None for i in listed["items"])


def plot(sampler: OperatorSampler, marks: dict[str, float], path: Path, goal: int) -> str:
    matplotlib.use("Agg")
    figure, memory = pyplot.subplots(figsize=(9, 4))
    times = [s[0] for s in sampler.samples]
    memory.plot(times, [s[1] / 2**20 for s in sampler.samples], label="RSS (MiB)")
    memory.plot(times, [s[2] for s in sampler.samples], label="threads")
    memory.plot(times, [s[3] for s in sampler.samples], label="Kafka connections")
    memory.axhline(goal / 2**20, color="red", linestyle="--", label=f"{goal // 2**20} MiB")
    for label, at in marks.items():
        memory.axvline(at, color="grey", linestyle=":")
        memory.annotate(label, (at, goal / 2**20), rotation=90, fontsize=8)
    memory.set_xlabel("seconds since the operator started")
    memory.set_title("kafka-mirror operator at scale")
    memory.legend(loc="center right")
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    pyplot.close(figure)
    return str(path)


EXTRA_SELECTIONS, PATTERNS = 100, 256  # on the first mirror, with --tenant-load


def tenant_mirror(index: int, body: dict[str, Any]) -> dict[str, Any]:
    """The mirror with settings of its own (tuning the operator's clients must not take) and,
    every other one, paused."""
    tuning = {"client.rack": f"rack-{index}", "queued.max.messages.kbytes": "2097151"}
    body["spec"]["source"]["config"] = tuning
    body["spec"]["target"]["config"] = tuning
    body["spec"]["paused"] = index % 2 == 1
    return body


def extra_selection(index: int, mirror_name: str) -> dict[str, Any]:
    """One of the first mirror's many selections: patterns that match none of the topics."""
    patterns = [f"team{index}\\.p{p:03d}\\..*" for p in range(PATTERNS)]
    return {
        "apiVersion": API_VERSION,
        "kind": "MirrorTopicSelection",
        "metadata": {"name": f"{mirror_name}-extra-{index:03d}", "namespace": NAMESPACE},
        "spec": {"mirror": mirror_name, "includes": patterns},
    }


def apply_mirrors(
    api: client.ApiClient, a: LocalKafka, b: LocalKafka, count: int, tenant_load: bool
) -> None:
    def one(index: int) -> None:
        name = f"m{index:04d}"
        body = mirror(name, NAMESPACE, a.bootstrap_servers, b.bootstrap_servers)
        apply(api, tenant_mirror(index, body) if tenant_load else body)
        apply(api, selection(index, name))

    one(0)  # the dynamic client's discovery of the kinds, once, before the threads
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(one, range(1, count)))
        if tenant_load:
            list(
                pool.map(lambda i: apply(api, extra_selection(i, "m0000")), range(EXTRA_SELECTIONS))
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirrors", type=int, default=1000)
    parser.add_argument("--status-interval", type=float, default=10.0, help="operator's option")
    parser.add_argument("--batches", type=int, default=6, help="record batches produced")
    parser.add_argument("--produce-every", type=float, default=20.0, help="seconds")
    parser.add_argument("--output", type=Path, help="default: results/operator_scale_<N>.json")
    parser.add_argument("--operator-log", type=Path, help="keep a copy of the operator's log")
    parser.add_argument("--tenant-load", action="store_true", help="issue 63's tenant load")
    args = parser.parse_args()
    suffix = "_tenant" if args.tenant_load else ""
    output = args.output or RESULTS / f"operator_scale_{args.mirrors}{suffix}.json"

    with two_clusters() as (workdir, a, b):
        kube = KubeApiServer(workdir / "kube")
        operator: OperatorProcess | None = None
        try:
            kube.start()
            admin = AdminClient({"bootstrap.servers": a.bootstrap_servers})  # kept: its futures
            topics = [NewTopic(topic_of(t), PARTITIONS, 1) for t in range(TOPICS)]
            for future in admin.create_topics(topics).values():
                future.result()
            producer = Producer({"bootstrap.servers": a.bootstrap_servers})
            produce(producer, RECORDS)
            api = api_client(kube.kubeconfig)
            install_crds(api)
            apply(api, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}})
            print(f"applying {args.mirrors} mirrors and their selections…", flush=True)
            apply_mirrors(api, a, b, args.mirrors, args.tenant_load)

            load = {"before": round(os.getloadavg()[0], 2)}
            print(f"starting the operator (status every {args.status_interval:g} s)…", flush=True)
            started = time.monotonic()
            operator = OperatorProcess(
                kube.kubeconfig, NAMESPACE, workdir, status_interval=args.status_interval
            ).start()
            assert operator.process is not None
            sampler = OperatorSampler(operator.process.pid, {a.port, b.port})
            sampler.start()
            watcher = LagWatch(api)
            watcher.start()
            while (have := statuses_with_lag(api)) < args.mirrors:
                print(f"  {time.monotonic() - started:6.1f}s  {have} statuses", flush=True)
                assert time.monotonic() - started < 1800, "not every mirror got a status"
                time.sleep(10)
            all_status = time.monotonic() - started
            print(f"every mirror has a status after {all_status:.0f} s; producing…", flush=True)

            # The start-up's applies (each mirror's resume converges it) end before the window.
            applies = request_counts(api)["APPLY"]
            while True:
                time.sleep(5)
                applies, before = request_counts(api)["APPLY"], applies
                if applies == before:
                    break
            settled = time.monotonic() - started
            print(f"start-up applies done after {settled:.0f} s", flush=True)
            requests_before, window_start = request_counts(api), time.monotonic()
            for batch in range(1, args.batches + 1):
                produce(producer, RECORDS)
                watcher.expect(time.monotonic(), RECORDS * (batch + 1))
                load[f"batch_{batch}"] = round(os.getloadavg()[0], 2)
                time.sleep(args.produce_every)
            deadline = time.monotonic() + 120
            while len(watcher.ages) < args.mirrors * args.batches and time.monotonic() < deadline:
                time.sleep(1)
            window = time.monotonic() - window_start
            requests_after = request_counts(api)
            load["after"] = round(os.getloadavg()[0], 2)
            watcher.stopping.set()
            sampler.stopping.set()
            peak = peak_rss_bytes(operator.process.pid)
            steady = [s for s in sampler.samples if s[0] >= all_status]
            per_verb = {
                verb: round((requests_after[verb] - requests_before.get(verb, 0)) / window, 1)
                for verb in sorted(requests_after)
                if requests_after[verb] > requests_before.get(verb, 0)
            }
            ages = figures(watcher.ages)
            summary = {
                **summary_header("kafka-mirror operator at scale", "operator_scale.py"),
                "load_average_1m": load,
                "mirrors": args.mirrors,
                "tenant_load": args.tenant_load,
                "status_interval_seconds": args.status_interval,
                "topics": f"{TOPICS} topics x {PARTITIONS} partitions on A, one per selection",
                "seconds_until_every_mirror_had_a_status": round(all_status, 1),
                "seconds_until_start_up_applies_ended": round(settled, 1),
                "operator": {
                    "peak_rss_mib": round(peak / 2**20, 1),
                    "max_threads": max(s[2] for s in sampler.samples),
                    "kafka_connections_max": max(s[3] for s in sampler.samples),
                    "kafka_connections_steady_max": max((s[3] for s in steady), default=None),
                },
                "status_age_seconds": {
                    "measured": len(watcher.ages),
                    "expected": args.mirrors * args.batches,
                    **ages,
                },
                "operator_log": operator_counts(operator.log()),
                "api_requests_per_second": {
                    "total": round(sum(per_verb.values()), 1),
                    "by_verb": per_verb,
                    "window_seconds": round(window, 1),
                },
            }
            p95, worst = ages["p95"], ages["max"]
            goal = TENANT_MEMORY_GOAL if args.tenant_load else MEMORY_GOAL
            summary["goal"] = f"peak RSS < {goal // 2**20} MiB, status age p95 and max < 30 s"
            summary["goal_met"] = (
                peak < goal
                and len(watcher.ages) == args.mirrors * args.batches
                and worst is not None
                and worst < AGE_GOAL
                and p95 is not None
            )
            marks = {"every status": all_status, "first batch": window_start - started}
            summary["plot"] = plot(sampler, marks, output.with_suffix(".png"), goal)
            write_summary(summary, output)
        finally:
            if operator is not None and operator.running():
                stopping = time.monotonic()
                try:
                    operator.stop(timeout=120)
                    print(f"the operator stopped in {time.monotonic() - stopping:.1f} s")
                except subprocess.TimeoutExpired:
                    operator.kill()
                    print("the operator did not stop within 120 s of SIGTERM: killed")
            if operator is not None and args.operator_log:
                shutil.copy(operator.log_path, args.operator_log)
            kube.remove()


if __name__ == "__main__":
    main()
