"""What an idle mirror costs its clusters: the CPU of Kafka A's and B's brokers over a minute
with no worker, then with one worker mirroring a topic nobody writes to (after half a minute to
settle), and the worker's own. Kafka's own JVM settings on the brokers, as in production.

    .venv/bin/python bench/idle_worker.py                 # about 3 minutes
    .venv/bin/python bench/idle_worker.py --seconds 120

Writes bench/results/idle_worker.json (CPU as % of one core).
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from common import (
    RESULTS,
    cpu_seconds,
    create_topic,
    start_worker,
    stop,
    summary_header,
    two_clusters,
    worker_config,
    write_summary,
)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--output", type=Path, default=RESULTS / "idle_worker.json")
    args = parser.parse_args()
    with two_clusters() as (workdir, a, b):
        pids = {name: c.nodes[0].process.pid for name, c in (("A", a), ("B", b))}
        create_topic(a, "idle", 4)

        def percent(pid: int, since: float) -> float:
            return round(100 * (cpu_seconds(pid) - since) / args.seconds, 2)

        def measure(extra: dict[str, int]) -> dict[str, float]:
            watched = {**pids, **extra}
            before = {name: cpu_seconds(pid) for name, pid in watched.items()}
            time.sleep(args.seconds)
            return {name: percent(pid, before[name]) for name, pid in watched.items()}

        time.sleep(10)
        without = measure({})
        worker = start_worker(worker_config(a, b, "idle", ["idle"]), workdir)
        try:
            time.sleep(30)
            with_worker = measure({"worker": worker.pid})
        finally:
            stop(worker)
    summary = {
        **summary_header(
            "CPU (% of a core): an idle worker, its clusters' brokers", "idle_worker.py"
        ),
        "seconds": args.seconds,
        "brokers_without_worker": without,
        "with_idle_worker": with_worker,
    }
    write_summary(summary, args.output)


if __name__ == "__main__":
    main()
