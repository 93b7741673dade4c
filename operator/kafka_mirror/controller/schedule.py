"""When a CronJob schedule fires, so that the status can tell an audit that stopped running.

Kubernetes' cron: five fields (minute, hour, day of month, month, day of week; numbers, `*`,
ranges, lists, steps) or a macro; when both day fields are restricted, a day matching either
fires (cron's rule), which is two recurrence rules in one set. Times are UTC, the CronJob's
default.
"""

from __future__ import annotations

from datetime import datetime

from dateutil.rrule import MINUTELY, rrule, rruleset

MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}
RANGES = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 7))


def _field(text: str, low: int, high: int) -> list[int] | None:
    """The values a field allows; None for every value (`*`)."""
    if text == "*":
        return None
    values: set[int] = set()
    for part in text.split(","):
        spread, _, step = part.partition("/")
        if spread == "*":
            first, last = low, high
        elif "-" in spread:
            first, last = (int(v) for v in spread.split("-", 1))
        else:
            first = int(spread)
            last = high if step else first
        values.update(range(first, last + 1, int(step or 1)))
    return sorted(values)


def _rules(schedule: str, start: datetime) -> rruleset:
    fields = MACROS.get(schedule.strip(), schedule).split()
    minute, hour, day, month, weekday = (
        _field(text, low, high) for text, (low, high) in zip(fields, RANGES, strict=True)
    )
    # Cron counts Sunday as 0 (or 7) and Monday as 1; dateutil Monday as 0.
    weekdays = None if weekday is None else sorted({(d - 1) % 7 for d in weekday})
    common = {
        "dtstart": start,
        "bysecond": 0,
        "byminute": minute,
        "byhour": hour,
        "bymonth": month,
        "cache": False,
    }
    rules = rruleset()
    if day is not None and weekdays is not None:  # either day field matches
        rules.rrule(rrule(MINUTELY, bymonthday=day, **common))
        rules.rrule(rrule(MINUTELY, byweekday=weekdays, **common))
    else:
        rules.rrule(rrule(MINUTELY, bymonthday=day, byweekday=weekdays, **common))
    return rules


def runs_between(schedule: str, after: datetime, until: datetime, enough: int) -> int:
    """How many times the schedule fires after `after` up to `until` (counting to `enough`)."""
    count = 0
    for fire in _rules(schedule, after.replace(second=0, microsecond=0)):
        if fire <= after:
            continue
        if fire > until or count >= enough:
            break
        count += 1
    return count
