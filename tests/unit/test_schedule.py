"""When a cron schedule fires (the audit CronJob's), as Kubernetes' cron does: every form its
validation accepts, counted by hand."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from pydantic import ValidationError

from kafka_mirror.api.workloads import AuditSettings
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
        # Every other form Kubernetes' cron (robfig/cron) accepts.
        ("0 3 * * MON-FRI", 24 * 7, 5),  # a range of day names
        ("0 3 * * mon,wed,FRI", 24 * 7, 3),  # names in any case, in a list
        ("0 3 ? * SUN", 24 * 7, 1),  # `?` for a day field: any
        ("0 0 1 JAN-MAR *", 24 * 366, 3),  # month names
        ("0 0 1 jun *", 24 * 366, 1),
        ("5/15 * * * *", 1, 4),  # from 5 to the end, every 15: :05, :20, :35, :50
        ("0 0 */2 * 1", 24 * 7, 4),  # both day fields restricted: odd days or Mondays
        ("0 0 31 2 *", 24 * 3 * 366, 0),  # a date that never comes
        ("@yearly", 24 * 366 * 2, 2),
        ("@annually", 24 * 366, 1),
        ("@monthly", 24 * 62, 2),
        ("@midnight", 48, 2),
    ],
)
def test_runs_between_counts_the_firings(schedule: str, hours: int, runs: int) -> None:
    assert runs_between(schedule, START, START + timedelta(hours=hours), 100) == runs


def test_counting_stops_at_enough() -> None:
    assert runs_between("* * * * *", START, START + timedelta(days=365), 3) == 3


@pytest.mark.parametrize("schedule", ["CRON_TZ=Europe/Paris 0 3 * * *", "TZ=UTC 0 3 * * *"])
def test_a_time_zone_in_the_schedule_is_refused_as_kubernetes_refuses_it(schedule: str) -> None:
    """Kubernetes refuses `TZ=` and `CRON_TZ=` in a CronJob's schedule (its `timeZone` field
    says where); the mirror's schema refuses them before a CronJob is made."""
    with pytest.raises(ValidationError):
        AuditSettings.model_validate({"schedule": schedule})
