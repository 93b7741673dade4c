"""A tenant's heaviest selections against a source's topic list, as each refresh of the
operator and the workers matches them (a micro-benchmark).

One mirror with 100 selections of 256 patterns each (issue 63.3's figure), against 1,000 topics
of which 256 match. Timed, the best of 5 runs each, taking turns:

- `one_by_one`: each topic against each pattern in turn (what NameFilter did before);
- `alternation`: each topic once against one RE2 alternation per list (`patterns.compile_any`,
  what NameFilter does now);
- `compile`: building the 100 NameFilters (the patterns compiled, once alone to check them and
  once as the alternation).

    .venv/bin/python bench/selection_matching.py

Prints seconds per refresh and the ratio, and writes them to bench/results/selection_matching.json.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from common import RESULTS, summary_header, write_summary

from kafka_mirror.patterns import compile_pattern
from kafka_mirror.topics import NameFilter

SELECTIONS, PATTERNS, RUNS = 100, 256, 5
TOPICS = [f"team-{i % 50}.events.{i}" for i in range(744)] + [
    f"team-{i}.orders.abc-{i}" for i in range(256)
]


def patterns() -> tuple[str, ...]:
    return tuple(f"team-{i}\\.orders\\.[a-z]+-{i}" for i in range(PATTERNS))


def best(run: Callable[[], object]) -> float:
    times = []
    for _ in range(RUNS):
        started = time.perf_counter()
        run()
        times.append(time.perf_counter() - started)
    return min(times)


def main() -> None:
    lists = [patterns() for _ in range(SELECTIONS)]
    compiled = [[compile_pattern(p) for p in each] for each in lists]
    filters = [NameFilter(each) for each in lists]

    def one_by_one() -> int:
        return sum(any(p.fullmatch(t) for p in each) for each in compiled for t in TOPICS)

    def alternation() -> int:
        return sum(f.matches(t) for f in filters for t in TOPICS)

    assert one_by_one() == alternation() == SELECTIONS * PATTERNS
    figures = {
        "one_by_one_seconds": best(one_by_one),
        "alternation_seconds": best(alternation),
        "compile_seconds": best(lambda: [NameFilter(each) for each in lists]),
    }
    figures["speedup"] = figures["one_by_one_seconds"] / figures["alternation_seconds"]
    summary = summary_header("a tenant's heaviest selections matched", "selection_matching.py")
    summary.update({"selections": SELECTIONS, "patterns": PATTERNS, "topics": len(TOPICS)})
    summary.update({k: round(v, 4) for k, v in figures.items()})
    write_summary(summary, RESULTS / "selection_matching.json")


if __name__ == "__main__":
    main()
