"""Concurrent reads of one kind merged into one request.

A thousand mirrors on one cluster each ask for the offsets of their own partitions every status
refresh; sent one by one that is a thousand requests. Here a caller that finds a request in
flight does not send its own: it adds its keys to the next one, which the caller already
sending runs as soon as its own returns. Nobody gets an answer older than their question: every
caller's keys are read by a request that starts after it asked.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Hashable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


@dataclass
class _Batch(Generic[K, V]):
    keys: set[K] = field(default_factory=set)
    done: threading.Event = field(default_factory=threading.Event)
    result: Mapping[K, V] | None = None
    error: Exception | None = None


class BatchedRead(Generic[K, V]):
    """`read(keys)` answered by `fetch(all keys asked meanwhile)`; fetch errors reach every
    caller of that batch."""

    def __init__(self, fetch: Callable[[frozenset[K]], Mapping[K, V]]) -> None:
        self._fetch = fetch
        self._lock = threading.Lock()
        self._open: _Batch[K, V] | None = None  # collecting keys, not started yet
        self._sending = False

    def read(self, keys: Iterable[K]) -> Mapping[K, V]:
        """The fetched values of the batch that read `keys` (it may hold more keys)."""
        with self._lock:
            if self._open is None:
                self._open = _Batch()
            batch = self._open
            batch.keys.update(keys)
            lead = not self._sending
            self._sending = True
        if lead:
            self._send_all()
        batch.done.wait()
        if batch.error is not None:
            raise batch.error
        assert batch.result is not None
        return batch.result

    def _send_all(self) -> None:
        while True:
            with self._lock:
                batch, self._open = self._open, None
                if batch is None:
                    self._sending = False
                    return
            try:
                batch.result = self._fetch(frozenset(batch.keys))
            except Exception as error:  # handed to every caller of the batch
                batch.error = error
            batch.done.set()
