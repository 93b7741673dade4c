"""The worker's scheduler: tasks run from the mirroring loop when due (MirrorMaker 2 runs them
on Connect's threads; one thread keeps the worker's state free of locks)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from confluent_kafka import KafkaException

log = logging.getLogger(__name__)

SLOW_TASK_SECONDS = 2.0
MAX_BACKOFF_SECONDS = 60.0  # between retries of a failing periodic task


class Periodic:
    """A task run every `interval` seconds from the loop; failures are logged, not raised.
    Slow failures (timeouts) back off, doubling up to MAX_BACKOFF_SECONDS, so that a task stuck
    in timeouts cannot take the loop's time from mirroring. A full producer queue
    (`BufferError`) skips the round: the records it would add wait for the next one."""

    def __init__(self, name: str, interval: float, task: Callable[[], None]) -> None:
        self.name, self.interval, self.task = name, interval, task
        self.due = 0.0
        self.failures = 0

    def run_if_due(self, now: float, on_error: Callable[[str, Exception], None]) -> None:
        if now < self.due:
            return
        self.due = now + self.interval
        started = time.monotonic()
        failed = False
        try:
            self.task()
        except BufferError:
            return  # the producer's queue is full: this round's records wait for the next
        except (KafkaException, OSError, TimeoutError, ValueError) as error:
            on_error(self.name, error)
            failed = True
        ended = time.monotonic()
        took = ended - started
        if not failed:
            self.failures = 0
        elif took > SLOW_TASK_SECONDS:
            self.failures += 1
            self.due = ended + min(self.interval * 2**self.failures, MAX_BACKOFF_SECONDS)
        if took > SLOW_TASK_SECONDS:
            log.warning("%s took %.1fs (mirroring waits meanwhile)", self.name, took)
