"""The worker's periodic tasks: a task failing slowly (timeouts) backs off, so the loop keeps
its time for mirroring; a fast failure retries at the interval; success resets the back-off."""

from __future__ import annotations

import itertools
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from kafka_mirror.worker.periodic import MAX_BACKOFF_SECONDS, OffLoop, Periodic


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


def test_an_off_loop_task_waits_on_its_own_thread_and_applies_on_the_loop() -> None:
    """The loop never waits for the admin calls: while `gather` is blocked the loop goes on
    turning; its result is applied on the loop's thread, at the first turn after it is done."""
    release = threading.Event()
    threads: dict[str, str] = {}
    applied: list[int] = []

    def gather() -> int:
        threads["gather"] = threading.current_thread().name
        release.wait(5)
        return 7

    def apply(result: int) -> None:
        threads["apply"] = threading.current_thread().name
        applied.append(result)

    with ThreadPoolExecutor(1, thread_name_prefix="admin") as pool:
        task = OffLoop("topics", 10.0, gather, apply, pool)
        errors: list[str] = []
        on_error = lambda name, _error: errors.append(name)  # noqa: E731
        # gather is blocked until `release`: a turn that waited for it would wait out its 5 s
        # and apply 7, so turns that each return at once with nothing applied show the loop
        # never waits (counted in turns, not in time: a busy machine slows the turns too).
        for _ in range(200):
            assert task.run_if_due(time.monotonic(), on_error) is None
        assert not applied
        release.set()
        while not applied:
            task.run_if_due(time.monotonic(), on_error)
    assert applied == [7] and not errors
    assert threads == {"gather": threads["gather"], "apply": threading.current_thread().name}
    assert threads["gather"].startswith("admin")
    # Not due again until its interval has passed.
    assert task.run_if_due(time.monotonic(), on_error) is None and task.running is None


def test_an_off_loop_task_failing_is_reported_on_the_loop_and_retried() -> None:
    outcomes = iter([TimeoutError("no answer"), 3])

    def gather() -> int:
        outcome = next(outcomes)
        if isinstance(outcome, Exception):
            raise outcome
        return outcome

    applied: list[int] = []
    errors: list[str] = []
    with ThreadPoolExecutor(1) as pool:
        task = OffLoop("configs", 0.0, gather, applied.append, pool)
        while not applied:
            task.run_if_due(time.monotonic(), lambda name, _error: errors.append(name))
    assert errors == ["configs"] and applied == [3]
