"""Converging mirrors: one converge per mirror at a time, and what each applied last."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future

# Unchanged children are applied again after this long (by the status loop), repairing what
# was changed or deleted by hand; a change of the mirror, its selections or Secrets applies at once.
REAPPLY_AFTER = 300.0


class OnePerKey:
    """Runs one call per key at a time; calls that arrive meanwhile wait, and the caller already
    running runs the latest of them after its own (it has the newest object): each waiting
    caller then gets that call's result or exception.

    A mirror's create handler, its selection's handler and the status loop all converge it, often at
    once; side by side they would only repeat the same idempotent applies. Waiting, rather than
    going on as if converged, lets the status loop report the outcome of the converge it joined
    (a spec refused there) at once, not a tick later.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[str] = set()
        self._next: dict[str, tuple[Callable[[], list[str]], Future[list[str]]]] = {}

    def run(self, key: str, call: Callable[[], list[str]]) -> list[str]:
        with self._lock:
            waits = key in self._running
            if waits:
                pending = self._next.get(key)
                outcome: Future[list[str]] = pending[1] if pending else Future()
                self._next[key] = (call, outcome)  # replaces an older waiting call
            else:
                self._running.add(key)
        if waits:
            return outcome.result()
        own: Future[list[str]] = Future()
        _settle(own, call)
        return self._run_waiting(key, own)

    def _run_waiting(self, key: str, own: Future[list[str]]) -> list[str]:
        while True:
            with self._lock:  # checked and released together: no call slips between
                pending = self._next.pop(key, None)
                if pending is None:
                    self._running.discard(key)
                    return own.result()
            _settle(pending[1], pending[0])


def _settle(outcome: Future[list[str]], call: Callable[[], list[str]]) -> None:
    try:
        outcome.set_result(call())
    except BaseException as error:  # handed to the caller it belongs to
        outcome.set_exception(error)


class AppliedChildren:
    """What was last applied per mirror (a digest) and when, so that a converge that renders
    the same children skips the eight applies: the status loop's every interval, and a selection's
    or the mirror's handler with nothing new (a thousand mirrors would otherwise send eight
    thousand requests every interval)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._last: dict[str, tuple[str, float]] = {}

    def is_recent(self, mirror: str, digest: str) -> bool:
        with self._lock:
            last = self._last.get(mirror)
        return last is not None and last[0] == digest and time.monotonic() - last[1] < REAPPLY_AFTER

    def record(self, mirror: str, digest: str) -> None:
        with self._lock:
            self._last[mirror] = (digest, time.monotonic())

    def forget(self, mirror: str) -> None:
        with self._lock:
            self._last.pop(mirror, None)
