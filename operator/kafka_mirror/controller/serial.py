"""Converging mirrors: one converge per mirror at a time, and what each applied last."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

# Unchanged children are applied again after this long (by the status loop), repairing what
# was changed or deleted by hand; a change of the mirror, its selections or Secrets applies at once.
REAPPLY_AFTER = 300.0


class OnePerKey:
    """Runs one call per key at a time; a call that arrives meanwhile is run by the caller
    already running, after its own (only the latest such call: it has the newest object).

    A mirror's create handler, its selection's handler and the status loop all converge it, often at
    once; side by side they would only repeat the same idempotent applies.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._running: set[str] = set()
        self._next: dict[str, Callable[[], list[str]]] = {}

    def run(self, key: str, call: Callable[[], list[str]]) -> list[str]:
        with self._lock:
            if key in self._running:
                self._next[key] = call
                return []
            self._running.add(key)
        result: list[str] = []
        following: Callable[[], list[str]] | None = call
        try:
            while following is not None:
                result = following() or result
                with self._lock:  # checked and released together: no call slips between
                    following = self._next.pop(key, None)
                    if following is None:
                        self._running.discard(key)
        except BaseException:
            with self._lock:
                self._running.discard(key)
                self._next.pop(key, None)  # the status loop converges again
            raise
        return result


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
