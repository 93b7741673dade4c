"""The worker's periodic tasks: a task failing slowly (timeouts) backs off, so the loop keeps
its time for mirroring; a fast failure retries at the interval; success resets the back-off."""

from __future__ import annotations

import itertools
import time

import pytest

from kafka_mirror.worker.periodic import MAX_BACKOFF_SECONDS, Periodic


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def run_for(task: Periodic, clock: Clock, seconds: float) -> list[str]:
    errors: list[str] = []
    while clock.now < seconds:
        task.run_if_due(clock.now, lambda name, _error: errors.append(name))
        clock.now += 0.5
    return errors


def test_a_task_timing_out_backs_off_up_to_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(time, "monotonic", clock)
    runs: list[float] = []

    def timing_out() -> None:
        runs.append(clock.now)
        clock.now += 15  # a request that times out
        raise TimeoutError

    errors = run_for(Periodic("checkpoints", 1.0, timing_out), clock, 600)
    gaps = [later - earlier - 15 for earlier, later in itertools.pairwise(runs)]
    assert gaps[:5] == pytest.approx([2, 4, 8, 16, 32], abs=0.5)
    assert max(gaps) == pytest.approx(MAX_BACKOFF_SECONDS, abs=0.5)
    assert len(errors) == len(runs) < 20  # 600 s at 1 s would have been 38 runs of 15 s


def test_a_fast_failure_retries_at_the_interval_and_success_resets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = Clock()
    monkeypatch.setattr(time, "monotonic", clock)
    outcomes = iter([TimeoutError, TimeoutError, None, ConnectionRefusedError, None])
    runs: list[float] = []

    def task() -> None:
        runs.append(clock.now)
        outcome = next(outcomes, None)
        if outcome is TimeoutError:
            clock.now += 15
        if outcome is not None:
            raise outcome

    run_for(Periodic("topics", 1.0, task), clock, 60)
    gaps = [later - earlier for earlier, later in itertools.pairwise(runs)]
    assert gaps[:4] == pytest.approx([17, 19, 1, 1], abs=0.5)
