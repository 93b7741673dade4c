"""OnePerKey: one converge per mirror at a time; calls arriving meanwhile wait, the latest of
them runs after, and its outcome (result or exception) goes to every caller that waited."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

import pytest

from kafka_mirror.controller.serial import OnePerKey

Call = Callable[[], list[str]]


class Held:
    """A call that records its run, then holds the key until released."""

    def __init__(self, runs: list[str], name: str, result: list[str]) -> None:
        self.runs, self.name, self.result = runs, name, result
        self.started, self.release = threading.Event(), threading.Event()

    def __call__(self) -> list[str]:
        self.runs.append(self.name)
        self.started.set()
        assert self.release.wait(5)
        return self.result


def recorded(runs: list[str], name: str, result: list[str]) -> Call:
    def call() -> list[str]:
        runs.append(name)
        return result

    return call


def waiting(one: OnePerKey, pool: ThreadPoolExecutor, key: str, call: Call) -> Future[list[str]]:
    """Submits a call while another holds the key; returns once it waits its turn."""
    future = pool.submit(one.run, key, call)
    while one._next.get(key, (None, None))[0] is not call:
        assert not future.done(), "ran at once instead of waiting"
        time.sleep(0.001)
    return future


def test_calls_arriving_while_one_runs_wait_and_get_the_latest_calls_result() -> None:
    runs: list[str] = []
    one = OnePerKey()
    first = Held(runs, "first", ["a"])
    with ThreadPoolExecutor(4) as pool:
        running = pool.submit(one.run, "ns/m", first)
        assert first.started.wait(5)
        stale = waiting(one, pool, "ns/m", recorded(runs, "stale", ["s"]))
        latest = waiting(one, pool, "ns/m", recorded(runs, "latest", ["b"]))
        assert one.run("ns/other", recorded(runs, "other", ["o"])) == ["o"]  # not held
        assert not stale.done() and not latest.done()
        first.release.set()
        assert running.result(5) == ["a"]
        assert stale.result(5) == latest.result(5) == ["b"]  # the stale call never ran
    assert runs == ["first", "other", "latest"]
    assert one.run("ns/m", lambda: ["c"]) == ["c"]  # free again


def test_a_refusal_reaches_the_caller_that_waited_for_it_and_frees_the_key() -> None:
    """The status loop joining a handler's converge gets the handler's refusal of the spec at
    once; the handler gets its own outcome."""
    runs: list[str] = []
    one = OnePerKey()
    first = Held(runs, "first", ["a"])

    def refused() -> list[str]:
        raise RuntimeError("ChildNameTaken")

    with ThreadPoolExecutor(2) as pool:
        running = pool.submit(one.run, "ns/m", first)
        assert first.started.wait(5)
        tick = waiting(one, pool, "ns/m", refused)
        first.release.set()
        assert running.result(5) == ["a"]
        with pytest.raises(RuntimeError, match="ChildNameTaken"):
            tick.result(5)
    assert one.run("ns/m", lambda: ["ok"]) == ["ok"]


def test_a_failing_call_still_runs_the_waiting_one_and_frees_the_key() -> None:
    one = OnePerKey()
    started, release = threading.Event(), threading.Event()

    def fail() -> list[str]:
        started.set()
        assert release.wait(5)
        raise RuntimeError("API server unavailable")

    with ThreadPoolExecutor(2) as pool:
        running = pool.submit(one.run, "ns/m", fail)
        assert started.wait(5)
        after = waiting(one, pool, "ns/m", lambda: ["fixed"])
        release.set()
        with pytest.raises(RuntimeError, match="unavailable"):
            running.result(5)
        assert after.result(5) == ["fixed"]
    assert one.run("ns/m", lambda: ["ok"]) == ["ok"]
