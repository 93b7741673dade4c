"""BatchedRead: reads arriving while one is in flight go out together, in the next request."""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping

import pytest

from kafka_mirror.kafka.batching import BatchedRead


def test_reads_arriving_during_a_request_share_the_next_one_and_each_gets_its_answer() -> None:
    requests: list[frozenset[int]] = []
    in_flight, release = threading.Event(), threading.Event()

    def fetch(keys: frozenset[int]) -> Mapping[int, int]:
        requests.append(keys)
        in_flight.set()
        release.wait(5)
        return {key: key * 10 for key in keys}

    batched = BatchedRead(fetch)
    answers: dict[int, int] = {}

    def read(key: int) -> None:
        answers[key] = batched.read([key])[key]

    first = threading.Thread(target=read, args=(1,))
    first.start()
    in_flight.wait(5)
    in_flight.clear()
    later = [threading.Thread(target=read, args=(key,)) for key in (2, 3, 4)]
    for thread in later:
        thread.start()
    time.sleep(0.2)  # all three wait for the first request to return
    release.set()
    for thread in (first, *later):
        thread.join(5)
    assert requests == [frozenset({1}), frozenset({2, 3, 4})]
    assert answers == {1: 10, 2: 20, 3: 30, 4: 40}


def test_a_failed_request_fails_every_read_in_it_and_the_next_read_asks_again() -> None:
    calls = 0

    def fetch(keys: frozenset[str]) -> Mapping[str, str]:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise ConnectionError("cluster gone")
        return dict.fromkeys(keys, "ok")

    batched = BatchedRead(fetch)
    with pytest.raises(ConnectionError, match="cluster gone"):
        batched.read(["a"])
    assert batched.read(["a"]) == {"a": "ok"}
