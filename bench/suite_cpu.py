"""Where a command's CPU goes, by kind of process: run for the test suite, which is bound by the
machine's two cores (docs/dev-stack.md, "The test suite"). Samples every process's CPU time and
the machine's idle time every few seconds while the command runs, then prints the CPU-seconds
of each kind (Kafka brokers, Spark JVMs, test processes, workers, ...) and the idle share.
Processes living less than one sample are not seen.

    .venv/bin/python bench/suite_cpu.py -- .ci/run        # on a clean clone: about 50 minutes
    .venv/bin/python bench/suite_cpu.py -- make check

Writes bench/results/suite_cpu.json.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

import psutil

RESULTS = Path(__file__).parent / "results"
SAMPLE_SECONDS = 3.0
# The first pattern found in a process's command line names its kind.
KINDS = [
    ("kafka.Kafka ", "Kafka brokers"),
    ("/opt/python/lib/python3.11/site-packages/pyspark", "Spark JVMs in the node's pods"),
    ("pyspark", "Spark JVMs (local sessions, audit processes, standalone)"),
    ("tests.helpers.traffic", "traffic generators"),
    ("exec(eval(sys.stdin", "pytest processes (content checks, clients)"),
    ("pytest", "pytest processes (content checks, clients)"),
    ("kafka-mirror worker", "mirror workers"),
    ("kafka_mirror worker", "mirror workers"),
    ("kafka_mirror operator", "operators"),
    ("kafka-mirror", "other kafka-mirror processes"),
    ("kafka_mirror", "other kafka-mirror processes"),
    ("kube-apiserver", "API servers, etcd and the node's parts"),
    ("etcd", "API servers, etcd and the node's parts"),
    ("kubelet", "API servers, etcd and the node's parts"),
    ("kube-", "API servers, etcd and the node's parts"),
    ("containerd", "API servers, etcd and the node's parts"),
    ("java", "other JVMs (Kafka's tools, builds)"),
]


def kind(command: str) -> str:
    return next((name for pattern, name in KINDS if pattern in command), "other")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("command", nargs="+")
    args = parser.parse_args()
    first: dict[int, float] = {}  # CPU time of processes already running at the start
    last: dict[int, tuple[str, float]] = {}
    for process in psutil.process_iter(["cpu_times"]):
        times = process.info["cpu_times"]
        if times is not None:
            first[process.pid] = times.user + times.system
    idle_before = psutil.cpu_times().idle
    started = time.monotonic()
    command = subprocess.Popen(args.command)
    while command.poll() is None:
        for process in psutil.process_iter(["cmdline", "cpu_times"]):
            times, line = process.info["cpu_times"], process.info["cmdline"]
            if times is None or not line:
                continue
            name = last[process.pid][0] if process.pid in last else kind(" ".join(line))
            used = times.user + times.system - first.get(process.pid, 0.0)
            last[process.pid] = (name, max(used, last.get(process.pid, ("", 0.0))[1]))
        time.sleep(SAMPLE_SECONDS)
    elapsed = time.monotonic() - started
    idle = psutil.cpu_times().idle - idle_before
    by_kind: dict[str, float] = {}
    for name, used in last.values():
        by_kind[name] = by_kind.get(name, 0.0) + used
    seen = sum(by_kind.values())
    print(f"\n{args.command} exited {command.returncode} after {elapsed / 60:.1f} min")
    print(f"idle: {100 * idle / (elapsed * psutil.cpu_count()):.1f} % of the cores' time")
    for name, used in sorted(by_kind.items(), key=lambda item: -item[1]):
        print(f"{used:8.0f} CPU-s {100 * used / seen:5.1f} %  {name}")
    RESULTS.mkdir(exist_ok=True)
    summary = {"command": args.command, "seconds": elapsed, "idle_seconds": idle, **by_kind}
    (RESULTS / "suite_cpu.json").write_text(json.dumps(summary, indent=2))
    raise SystemExit(command.returncode)


if __name__ == "__main__":
    main()
