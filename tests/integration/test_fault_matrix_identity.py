"""The fault matrix under identity naming: A ↔ B both ways (`t` is `t` on both sides) while
records stream in, with an application deriving records from mirrored ones, headers copied.
Every record reaches the other side once, the derived ones included, and nothing goes back
where it came from (the independent content check, straight from Kafka)."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from tests.helpers.content import check_content
from tests.helpers.derive import DerivingApp
from tests.helpers.faults import Outcome, producers_replaced
from tests.helpers.kafka import end_offsets
from tests.helpers.matrix import RATE, traffic
from tests.helpers.stack import MirrorStack
from tests.helpers.worker import start_identity_pair

pytestmark = [pytest.mark.kafka]


@pytest.mark.long  # 200,000 records streamed both ways
def test_identity_both_ways_with_records_derived_from_mirrored_ones(
    stack: MirrorStack,
    outcomes: list[Outcome],
    tmp_path: Path,
) -> None:
    """A ↔ B under identity naming (`t` is `t` on both sides; two mirrors, so two workers) while
    each side writes 5,000 records/s to its `t` and an application on A derives a record from
    each of B's records mirrored into A's `t`, headers copied (as Kafka Streams copies them),
    into A's `u`. Every record reaches the other side once, the derived ones included, and
    nothing goes back where it came from. (Our audit is not run: it counts the copies a worker
    skips on purpose as missing.)"""
    pair = start_identity_pair(stack.kafka_a, stack.kafka_b, stack.start_worker, partitions=4)
    t, u = pair.topic, pair.derived
    count = RATE * 10
    generators = [
        traffic(side, t, tmp_path, f"traffic-{side.alias}", rate=RATE // 2, count=count)
        for side in (stack.kafka_a, stack.kafka_b)
    ]
    app = DerivingApp(stack.kafka_a.bootstrap_servers, t, u, expected=count)
    app.start()
    for generator in generators:
        stats = generator.finish()
        assert stats.failed == 0, stats.errors
    derived = app.finish()
    ended = time.monotonic()
    pair.wait_until_settled()
    recovery = time.monotonic() - ended

    a, b = stack.kafka_a.bootstrap_servers, stack.kafka_b.bootstrap_servers
    checks = {  # a record mirrored back into its own topic counts as unexpected
        "A's records on B": check_content(a, b, {t: t}, local_only=True),
        "B's records on A": check_content(b, a, {t: t}, local_only=True),
        "derived records on B": check_content(a, b, {u: u}),
    }
    for what, report in checks.items():
        print(f"identity A ↔ B, {what}: {report}")
        assert report.lossless and report.duplicates == 0, (what, report)
    assert [report.source_records for report in checks.values()] == [count, count, derived]
    # B's copies of the derived records are copies of A's `u`: none came back.
    assert sum(end_offsets(a, u).values()) == derived
    for worker in pair.workers:
        assert worker.running(), f"{worker.name} exited:\n{worker.log()[-3000:]}"
        assert producers_replaced(worker) == 0
    fault = "identity A ↔ B, 5,000 records/s each way, records derived on A from B's copies"
    missing = sum(report.missing for report in checks.values())
    duplicates = sum(report.duplicates for report in checks.values())
    outcomes.append(Outcome(fault, 2 * count + derived, missing, duplicates, 0, recovery))
