"""Reconcile latency: from applying a KafkaMirror to its worker Deployment existing, over N mirrors.

Starts its own Kafka clusters A and B and a real kube-apiserver (no controllers), installs the
CRDs, and runs the operator exactly as in a cluster (`python -m kafka_mirror operator`, status
every 10 s, so the status loop does its real Kafka reads while mirrors are being created). A
watch on Deployments records when each worker Deployment first appears; KafkaMirrors (A -> B,
each with one MirrorTopicSelection) are applied at a steady pace. The goal: p95 under 2 s.

    .venv/bin/python bench/reconcile_latency.py   # 50 mirrors, one every 0.2 s
    .venv/bin/python bench/reconcile_latency.py --mirrors 20 --interval 0.5

Also reported, not part of the goal: once every Deployment exists, how long until every mirror's
status has `observedGeneration` (its first status refresh). Prints progress while it runs and a
JSON summary at the end, written to bench/results/reconcile_latency.json (see --output), with a
plot of latency per mirror next to it.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import matplotlib
from common import RESULTS
from confluent_kafka import Producer
from confluent_kafka.admin import AdminClient, NewTopic
from kubernetes import client, watch
from matplotlib import pyplot

from kafka_mirror.api.models import API_VERSION, GROUP, VERSION
from kafka_mirror.kube import api_client, apply, install_crds
from kafka_mirror.render import worker_name
from kafka_mirror_dev.apiserver import KubeApiServer
from kafka_mirror_dev.kafka import KAFKA_SCRIPTS_JVM, LocalKafka
from kafka_mirror_dev.operator import OperatorProcess

GOAL_SECONDS = 2.0
TOPICS, PARTITIONS, RECORDS = 4, 3, 100  # on A, matched by every selection: real lag to read


def percentile(values: list[float], share: float) -> float:
    """Nearest-rank percentile: the smallest value with at least `share` of them at or below."""
    ordered = sorted(values)
    return ordered[max(math.ceil(share * len(ordered)) - 1, 0)]


def figures(values: list[float]) -> dict[str, float | None]:
    if not values:
        return {"p50": None, "p95": None, "max": None}
    return {
        "p50": round(percentile(values, 0.50), 3),
        "p95": round(percentile(values, 0.95), 3),
        "max": round(max(values), 3),
    }


def mirror(name: str, namespace: str, source: str, target: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "KafkaMirror",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "source": {"alias": "A", "bootstrapServers": source},
            "target": {"alias": "B", "bootstrapServers": target},
        },
    }


def selection(name: str, namespace: str, mirror_name: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "MirrorTopicSelection",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"mirror": mirror_name, "includes": ["bench\\..*"]},
    }


def preload(bootstrap: str) -> None:
    """A few topics with records on A, so each status refresh reads offsets, groups and lag."""
    names = [f"bench.t{i}" for i in range(TOPICS)]
    admin = AdminClient({"bootstrap.servers": bootstrap})
    for future in admin.create_topics([NewTopic(n, PARTITIONS, 1) for n in names]).values():
        future.result()
    producer = Producer({"bootstrap.servers": bootstrap})
    for topic in names:
        for i in range(RECORDS):
            producer.produce(topic, value=b"x" * 100, partition=i % PARTITIONS)
    producer.flush(30)


class DeploymentWatch(threading.Thread):
    """First-seen monotonic time of each Deployment in the namespace, from a watch."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        super().__init__(name="deployment-watch", daemon=True)
        self.apps, self.namespace = client.AppsV1Api(api), namespace
        self.first_seen: dict[str, float] = {}
        self.stopping = threading.Event()
        # Watch from the list's version: nothing created after this point can be missed.
        listed = self.apps.list_namespaced_deployment(namespace)
        self.version: str | None = listed.metadata.resource_version if listed.metadata else None

    def run(self) -> None:
        while not self.stopping.is_set():
            extra = {"resource_version": self.version} if self.version else {}
            try:
                for event in watch.Watch().stream(
                    self.apps.list_namespaced_deployment,
                    self.namespace,
                    timeout_seconds=60,
                    **extra,
                ):
                    seen = time.monotonic()
                    metadata = event["object"].metadata
                    self.first_seen.setdefault(metadata.name, seen)
                    self.version = metadata.resource_version
                    if self.stopping.is_set():
                        return
            except Exception:
                self.version = None  # e.g. 410 Gone: start over; a re-list only adds late times
                self.stopping.wait(0.5)


def operator_counts(log: str) -> dict[str, int]:
    """What the operator did during the run, from its log."""
    lines = log.splitlines()
    return {
        "create_or_update_handlers": sum("_changed' succeeded" in line for line in lines),
        "connection_pool_full_warnings": sum("Connection pool is full" in line for line in lines),
        "errors": sum(line.startswith("ERROR") for line in lines),
    }


def wait_all(names: list[str], done: dict[str, float], timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while any(n not in done for n in names) and time.monotonic() < deadline:
        time.sleep(0.05)


def wait_observed(api: client.ApiClient, namespace: str, names: list[str], timeout: float) -> int:
    """Wait until every mirror's status has observedGeneration; returns how many have it."""
    custom = client.CustomObjectsApi(api)
    deadline = time.monotonic() + timeout
    while True:
        listed: Any = custom.list_namespaced_custom_object(
            GROUP, VERSION, namespace, "kafkamirrors"
        )
        observed = {
            item["metadata"]["name"]
            for item in listed["items"]
            if (item.get("status") or {}).get("observedGeneration") is not None
        }
        count = len(observed & set(names))
        if count == len(names) or time.monotonic() > deadline:
            return count
        time.sleep(0.25)


def plot(latencies: list[float | None], goal: float, path: Path) -> str:
    """Latency per mirror in apply order."""
    matplotlib.use("Agg")
    figure, axes = pyplot.subplots(figsize=(8, 4))
    shown = [(i + 1, v) for i, v in enumerate(latencies) if v is not None]
    axes.plot([i for i, _ in shown], [v for _, v in shown], marker="o", linestyle="-")
    axes.axhline(goal, color="red", linestyle="--", label=f"goal: p95 < {goal:g} s")
    axes.set_xlabel("mirror, in apply order")
    axes.set_ylabel("apply -> Deployment seen (s)")
    axes.set_title("kafka-mirror operator: reconcile latency per mirror")
    axes.legend()
    figure.tight_layout()
    figure.savefig(path, dpi=100)
    pyplot.close(figure)
    return str(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mirrors", type=int, default=50)
    parser.add_argument("--interval", type=float, default=0.2, help="seconds between mirrors")
    parser.add_argument("--status-interval", type=float, default=10.0, help="operator's option")
    parser.add_argument(
        "--output",
        type=Path,
        default=RESULTS / "reconcile_latency.json",
        help="where to write the JSON summary (the plot goes next to it as .png)",
    )
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="kafka-mirror-bench-"))
    a, b = (
        LocalKafka("A", workdir / "A", jvm=KAFKA_SCRIPTS_JVM, threads={}),
        LocalKafka("B", workdir / "B", jvm=KAFKA_SCRIPTS_JVM, threads={}),
    )
    kube = KubeApiServer(workdir / "kube")
    operator: OperatorProcess | None = None
    watcher: DeploymentWatch | None = None
    try:
        print("starting Kafka A and B and the kube-apiserver…", flush=True)
        a.start()
        b.start()
        kube.start()
        preload(a.bootstrap_servers)
        api = api_client(kube.kubeconfig)
        install_crds(api)
        namespace, warmup = "bench", "bench-warmup"
        for name in (namespace, warmup):
            apply(api, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name}})
        # The client's API discovery runs on the first apply of a kind: do it outside the
        # timing, in a namespace the operator does not watch.
        apply(api, mirror("warmup", warmup, a.bootstrap_servers, b.bootstrap_servers))
        apply(api, selection("warmup", warmup, "warmup"))

        print(f"starting the operator (status every {args.status_interval:g} s)…", flush=True)
        operator = OperatorProcess(
            kube.kubeconfig, namespace, workdir, status_interval=args.status_interval
        ).start()
        watcher = DeploymentWatch(api, namespace)
        watcher.start()
        time.sleep(1)  # let the watch connect

        names = [f"m{i:03d}" for i in range(args.mirrors)]
        applied: dict[str, float] = {}
        apply_seconds: list[float] = []
        print(f"applying {args.mirrors} mirrors, one every {args.interval:g} s…", flush=True)
        load_before = os.getloadavg()[0]
        started = time.monotonic()
        for i, name in enumerate(names):
            time.sleep(max(started + i * args.interval - time.monotonic(), 0))
            applied[name] = time.monotonic()
            apply(api, mirror(name, namespace, a.bootstrap_servers, b.bootstrap_servers))
            apply_seconds.append(time.monotonic() - applied[name])
            apply(api, selection(f"{name}-topics", namespace, name))
            if (i + 1) % 10 == 0 or i + 1 == len(names):
                seen = dict(watcher.first_seen)
                done = [
                    seen[worker_name(n)] - applied[n]
                    for n in names[: i + 1]
                    if worker_name(n) in seen
                ]
                latest = f", latest {done[-1]:.2f} s" if done else ""
                print(
                    f"  {time.monotonic() - started:6.1f}s  {i + 1:>3} / {len(names)} applied, "
                    f"{len(done)} Deployments seen{latest}",
                    flush=True,
                )

        wait_all([worker_name(n) for n in names], watcher.first_seen, timeout=120)
        all_exist = time.monotonic()
        seen = dict(watcher.first_seen)
        latencies = [
            seen[worker_name(n)] - applied[n] if worker_name(n) in seen else None for n in names
        ]
        measured = [v for v in latencies if v is not None]
        missing = len(names) - len(measured)
        print(f"  {all_exist - started:6.1f}s  {len(measured)} / {len(names)} Deployments exist")

        print("waiting for every mirror's first status (observedGeneration)…", flush=True)
        observed = wait_observed(api, namespace, names, timeout=max(120, 6 * args.status_interval))
        status_seconds = time.monotonic() - all_exist

        stats = figures(measured)
        p95 = stats["p95"]
        summary = {
            "what": "kafka-mirror operator: apply of a KafkaMirror -> its worker Deployment exists",
            "date": datetime.now(UTC).isoformat(timespec="seconds"),
            "machine": f"{platform.machine()}, {os.cpu_count()} cores",
            "cpu_count": os.cpu_count(),
            "python": platform.python_version(),
            # Anything else busy on the machine shows up in the figures: note how busy it was.
            "load_average_1m": {
                "before": round(load_before, 2),
                "after": round(os.getloadavg()[0], 2),
            },
            "mirrors": args.mirrors,
            "interval_seconds": args.interval,
            "status_interval_seconds": args.status_interval,
            "latency_seconds": {"count": len(measured), "missing": missing, **stats},
            "goal": f"p95 < {GOAL_SECONDS:g} s with every Deployment created",
            "goal_met": missing == 0 and p95 is not None and p95 < GOAL_SECONDS,
            "apply_call_seconds": figures(apply_seconds),
            "operator_log": operator_counts(operator.log()),
            "first_status_after_all_exist": {
                "seconds": round(status_seconds, 2),
                "mirrors_with_observed_generation": observed,
            },
            "latencies_in_apply_order": [None if v is None else round(v, 3) for v in latencies],
            "command": " ".join(["python", "bench/reconcile_latency.py", *sys.argv[1:]]),
        }
        summary["plot"] = plot(latencies, GOAL_SECONDS, args.output.with_suffix(".png"))
        print(
            json.dumps(
                {k: v for k, v in summary.items() if k != "latencies_in_apply_order"}, indent=2
            )
        )
        args.output.parent.mkdir(parents=True, exist_ok=True)
        args.output.write_text(json.dumps(summary, indent=2) + "\n")
        print(f"wrote {args.output}; operator log: {operator.log_path}")
    finally:
        if watcher is not None:
            watcher.stopping.set()
        if operator is not None and operator.running():
            operator.stop()
        kube.remove()
        a.remove()
        b.remove()


if __name__ == "__main__":
    main()
