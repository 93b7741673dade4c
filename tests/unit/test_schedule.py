"""When a cron schedule fires (the audit CronJob's), as Kubernetes' cron does."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from kafka_mirror.controller.schedule import runs_between

START = datetime(2026, 11, 23, 12, 0, tzinfo=UTC)  # a Monday


@pytest.mark.parametrize(
    ("schedule", "hours", "runs"),
    [
        ("0 */6 * * *", 24, 4),  # 18:00, 00:00, 06:00, 12:00 (the start itself is not after it)
        ("*/15 * * * *", 1, 4),
        ("30 9-17/4 * * *", 24, 3),  # 09:30, 13:30, 17:30
        ("0 0 * * 0", 24 * 7, 1),  # Sundays
        ("0 0 * * 7", 24 * 7, 1),  # Sunday spelled 7
        ("0 0 1,15 * *", 24 * 31, 2),
        ("0 0 1 * 1", 24 * 14, 3),  # the 1st or a Monday (cron's either-day rule): 30th, 1st, 7th
        ("@hourly", 5, 5),
        ("@daily", 72, 3),
        ("@weekly", 24 * 14, 2),
    ],
)
def test_runs_between_counts_the_firings(schedule: str, hours: int, runs: int) -> None:
    assert runs_between(schedule, START, START + timedelta(hours=hours), 100) == runs


def test_counting_stops_at_enough() -> None:
    assert runs_between("* * * * *", START, START + timedelta(days=365), 3) == 3
