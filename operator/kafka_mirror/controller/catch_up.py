"""A promote or return's drain to lag 0, told as it goes: the records left and their pace,
and what the hand-over leaves on the source in open transactions."""

from __future__ import annotations

from datetime import datetime, timedelta

from kafka_mirror.api.operations import CatchUpProgress
from kafka_mirror.controller.operation_kafka import Cluster

PACE_KEPT = timedelta(seconds=30)  # a catch-up's pace shown while its lag reads the same
MAX_SHOWN = 3


def left_open(source: Cluster, topics: list[str], now: datetime) -> str:
    """What the hand-over leaves on the source in open transactions, said (lag counts what a
    read_committed reader reaches, so they are not waited for: they may stay open for good)."""
    pending = source.in_open_transactions(topics)
    if not pending:
        return ""
    shown = ", ".join(
        f"{t}[{p}] {open_.records}{_open_for(open_.since, now)}"
        for (t, p), open_ in sorted(pending.items())[:MAX_SHOWN]
    )
    return (
        f"; not mirrored: {sum(o.records for o in pending.values())} records in or after open "
        f"transactions on the source ({shown}), copied only if they commit and this mirror "
        "runs again"
    )


def _open_for(since: datetime | None, now: datetime) -> str:
    if since is None:
        return ""
    seconds = max((now - since).total_seconds(), 0)
    return (
        f", open for {seconds:,.0f} s" if seconds < 120 else f", open for {seconds / 60:,.0f} min"
    )


def progress(previous: CatchUpProgress | None, lag: int, now: datetime) -> CatchUpProgress:
    """The records left now, and the pace at which they went since the lag last changed: kept
    while the lag reads the same (it is read less often than the status refreshes) for up to
    PACE_KEPT; none while it grows or stands still longer (no estimate then)."""
    if previous is not None and lag == previous.records_left and now - previous.at < PACE_KEPT:
        return previous
    progress = CatchUpProgress(records_left=lag, at=now)
    if previous is None or now <= previous.at or lag >= previous.records_left:
        return progress
    rate = (previous.records_left - lag) / (now - previous.at).total_seconds()
    progress.records_per_second = round(rate, 1)
    progress.estimated_seconds = round(lag / rate, 1)
    return progress


def pace(progress: CatchUpProgress) -> str:
    if progress.records_per_second is None or progress.estimated_seconds is None:
        return ""
    return (
        f" ({progress.records_per_second:,.0f} records/s: "
        f"about {progress.estimated_seconds:,.0f} s left)"
    )
