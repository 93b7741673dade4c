"""One converge per mirror at a time."""

from __future__ import annotations

import threading
from collections.abc import Callable


class OnePerKey:
    """Runs one call per key at a time; a call that arrives meanwhile is run by the caller
    already running, after its own (only the latest such call: it has the newest object).

    A mirror's create handler, its selection's handler and its timer all converge it, often at
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
                self._next.pop(key, None)  # the timer converges again
            raise
        return result
