"""Where the latency tail at a steady rate comes from: our worker A -> B at a steady rate of
1 KB records (5,000/s unless `--rate`; 3 processes, as `make bench` runs it), with a second
consumer reading the same records straight from A (no mirror): the source's own delivery
latency, the control.

    .venv/bin/python bench/latency_hops.py                                  # 3 runs
    .venv/bin/python bench/latency_hops.py --worker '{"refreshTopicsIntervalSeconds": 300}'

Per run and side (A: the source alone; B: through the mirror): p50, p99, max, and the seconds
(after the first 10 s of producing, which do not count) in which records took over 50 ms
(`--slow-ms`). Seconds slow on B but not on A are the mirror's own.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

import vs_mirrormaker
from common import two_clusters
from vs_mirrormaker import Bench, OurWorker, Setting

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
                # `make bench`'s latency run: the source alone, then through the mirror.
                results = bench.latency(ours, Setting(3), args.rate, SECONDS)
                for side, result in zip("AB", results, strict=True):
                    slow = sorted(
                        {
                            int(at)
                            for at, latency in zip(result.produced_s, result.samples, strict=True)
                            if latency > args.slow_ms
                        }
                    )
                    print(
                        f"run {run} {side}: p50 {result.percentile(50):.0f} ms, "
                        f"p99 {result.percentile(99):.0f} ms, max {max(result.samples):.0f} ms; "
                        f"over {args.slow_ms} ms in seconds {slow}",
                        flush=True,
                    )
        finally:
            ours.stop()


if __name__ == "__main__":
    main()
