"""When a CronJob schedule fires, so that the status can tell an audit that stopped running.

croniter reads the schedule as Kubernetes' cron (robfig/cron) does: five fields with numbers,
names (`MON-FRI`, `JAN`), `*` or `?`, ranges, lists and steps, or a macro (`@daily`); Sunday is
0 or 7; when both day fields are restricted, a day matching either fires. Times are UTC, the
CronJob's default. A schedule that never fires (`0 0 31 2 *`) fires no time; one croniter cannot
read raises `ValueError`, which the caller reports rather than fails on.
"""

from __future__ import annotations

from datetime import datetime

from croniter import CroniterBadDateError, croniter


def runs_between(schedule: str, after: datetime, until: datetime, enough: int) -> int:
    """How many times the schedule fires after `after` up to `until` (counting to `enough`)."""
    fires = croniter(schedule, after)
    count = 0
    try:
        while count < enough and fires.get_next(datetime) <= until:
            count += 1
    except CroniterBadDateError:  # no date ever matches
        pass
    return count
