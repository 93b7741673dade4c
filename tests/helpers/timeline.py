"""How long tests are: the `long` tier, the order that keeps the suite short, and when each
test ran on which of the suite's parallel workers, at the end of a run. A pytest plugin (the
root conftest loads it).

pytest-xdist hands its workers the groups with the most tests first (the real node's, then the
three-broker and the ACL clusters'), then single tests in collection order. A test that waits
for minutes by design (an outage, a backlog of millions) collected late ends the run long after
the others: those declaring the longest timeouts are therefore collected first. The real node's
tests, one process's line, go the other way round: its long tests (Spark on executor pods, the
chart end to end, an autoscaled backlog) are mostly work for the cores, and took three times as
long beside the other lines as alone (the audit on executor pods: 293 s against 91 s, quiet run
42), while its short ones mostly wait for pods and controllers. So the node's line runs its long
tests last, when the other lines have ended and left it the cores. The summary at
the end says when each worker went idle; the per-test lines go to
`.pytest_cache/d/timeline/timeline.tsv`.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

import pytest

# The whole line of a long test: setup (its stack), call and teardown.
PHASES = ("setup", "call", "teardown")
NODE_FIXTURE = "kube_node"  # its tests share one process (tests/conftest.py: ONE_WORKER)


def declared_timeout(item: pytest.Item) -> float:
    marker = item.get_closest_marker("timeout")
    return float(marker.args[0]) if marker and marker.args else 0.0


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects, and xdist reads the order after it
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A test that declares a timeout above the suite's waits minutes by design (an outage, a
    backlog of millions): marked `long` (which `make check` leaves out), and collected first."""
    usual = float(config.getini("timeout"))
    for item in items:
        if declared_timeout(item) > usual:
            item.add_marker("long")

    def order(item: pytest.Item) -> float:
        on_the_node = NODE_FIXTURE in getattr(item, "fixturenames", ())
        return declared_timeout(item) if on_the_node else -declared_timeout(item)

    items.sort(key=order)  # stable: the others keep their order


@dataclass
class Span:
    worker: str
    start: float
    stop: float


class Timeline:
    def __init__(self) -> None:
        self.spans: dict[str, Span] = {}

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.when not in PHASES:
            return
        node = getattr(report, "node", None)  # set by xdist on the controller
        worker = node.gateway.id if node is not None else "main"
        span = self.spans.setdefault(report.nodeid, Span(worker, report.start, report.stop))
        span.start, span.stop = min(span.start, report.start), max(span.stop, report.stop)

    @pytest.hookimpl
    def pytest_terminal_summary(
        self, terminalreporter: pytest.TerminalReporter, config: pytest.Config
    ) -> None:
        if not self.spans:
            return
        began = min(s.start for s in self.spans.values())
        ordered = sorted(self.spans.items(), key=lambda kv: kv[1].start)
        per_worker: dict[str, list[tuple[str, Span]]] = defaultdict(list)
        for nodeid, span in ordered:
            per_worker[span.worker].append((nodeid, span))
        cache = getattr(config, "cache", None)  # None under `-p no:cacheprovider`
        path = cache.mkdir("timeline") / "timeline.tsv" if cache is not None else None
        if path is not None:
            lines = [
                f"{nodeid}\t{s.worker}\t{s.start - began:.1f}\t{s.stop - s.start:.1f}\n"
                for nodeid, s in ordered
            ]
            path.write_text("test\tworker\tstarted_s\tseconds\n" + "".join(lines))
        terminalreporter.section("when each worker went idle")
        for worker, spans in sorted(per_worker.items()):
            busy = sum(s.stop - s.start for _, s in spans)
            last_id, last = max(spans, key=lambda pair: pair[1].stop)
            terminalreporter.write_line(
                f"{worker}: {len(spans)} tests, busy {busy / 60:.1f} min, idle from "
                f"{(last.stop - began) / 60:.1f} min (last: {last_id})"
            )
        if path is not None:
            terminalreporter.write_line(f"each test's start and length: {path}")


def pytest_configure(config: pytest.Config) -> None:
    if not hasattr(config, "workerinput"):  # the controller (or a run without xdist)
        config.pluginmanager.register(Timeline(), "timeline")
