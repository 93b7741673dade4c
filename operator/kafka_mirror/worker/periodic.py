"""The worker's scheduler: tasks run from the mirroring loop when due (one thread keeps the
worker's state free of locks). A task that waits on the network (listing and creating topics,
copying configs) does that part on a thread of its own (MirrorMaker 2 runs them on Connect's
threads) and hands its result to the loop, so that no record waits for it."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

from confluent_kafka import KafkaException

log = logging.getLogger(__name__)

SLOW_TASK_SECONDS = 2.0
MAX_BACKOFF_SECONDS = 60.0  # between retries of a failing periodic task
FAILURES = (KafkaException, OSError, TimeoutError, ValueError)
T = TypeVar("T")


class Periodic:
    """A task run every `interval` seconds from the loop; failures are logged, not raised.
    Slow failures (timeouts) back off, doubling up to MAX_BACKOFF_SECONDS, so that a task stuck
    in timeouts cannot take the loop's time from mirroring. A full producer queue
    (`BufferError`) skips the round: the records it would add wait for the next one."""

    def __init__(self, name: str, interval: float, task: Callable[[], None]) -> None:
        self.name, self.interval, self.task = name, interval, task
        self.due = 0.0
        self.failures = 0

    def run_if_due(self, now: float, on_error: Callable[[str, Exception], None]) -> float | None:
        """Run the task if it is due; returns how long it held the loop (None: not due)."""
        if now < self.due:
            return None
        self.due = now + self.interval
        started = time.monotonic()
        try:
            self.task()
        except BufferError:
            return None  # the producer's queue is full: this round's records wait for the next
        except FAILURES as error:
            on_error(self.name, error)
            return self._ran(started, failed=True)
        return self._ran(started, failed=False)

    def _ran(self, started: float, failed: bool) -> float:
        """Back off after a slow failure; returns how long the task took."""
        ended = time.monotonic()
        took = ended - started
        if not failed:
            self.failures = 0
        elif took > SLOW_TASK_SECONDS:
            self.failures += 1
            self.due = ended + min(self.interval * 2**self.failures, MAX_BACKOFF_SECONDS)
        if took > SLOW_TASK_SECONDS:
            log.warning("%s took %.1fs", self.name, took)
        return took


class OffLoop(Periodic, Generic[T]):
    """A periodic task in two parts: `gather` (the admin calls) on `pool`'s thread, then
    `apply` on the loop, at its first turn after `gather` returned. Returns from
    `run_if_due` only the time `apply` held the loop."""

    def __init__(
        self,
        name: str,
        interval: float,
        gather: Callable[[], T],
        apply: Callable[[T], None],
        pool: ThreadPoolExecutor,
    ) -> None:
        super().__init__(name, interval, lambda: None)
        self.gather, self.apply, self.pool = gather, apply, pool
        self.running: Future[T] | None = None
        self.started = 0.0

    def run_if_due(self, now: float, on_error: Callable[[str, Exception], None]) -> float | None:
        if self.running is None:
            if now >= self.due:
                self.due = now + self.interval
                self.started = time.monotonic()
                self.running = self.pool.submit(self.gather)
            return None
        if not self.running.done():
            return None
        running, self.running = self.running, None
        applied, failed = time.monotonic(), False
        try:
            self.apply(running.result())
        except BufferError:
            pass  # a full producer queue: the next round sends what this one could not
        except FAILURES as error:
            on_error(self.name, error)
            failed = True
        self._ran(self.started, failed)
        return time.monotonic() - applied
