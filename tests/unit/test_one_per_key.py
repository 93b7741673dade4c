"""OnePerKey: one converge per mirror at a time; what arrives meanwhile runs after, latest only."""

from __future__ import annotations

import threading

import pytest

from kafka_mirror.controller.serial import OnePerKey


def test_calls_arriving_while_one_runs_are_run_after_it_by_the_same_caller_latest_only() -> None:
    runs: list[str] = []
    started, release = threading.Event(), threading.Event()
    one = OnePerKey()

    def first() -> list[str]:
        runs.append("first")
        started.set()
        release.wait(5)
        return ["a"]

    result: list[list[str]] = []
    runner = threading.Thread(target=lambda: result.append(one.run("ns/m", first)))
    runner.start()
    started.wait(5)
    assert one.run("ns/m", lambda: runs.append("stale") or []) == []
    assert one.run("ns/m", lambda: runs.append("latest") or ["b"]) == []
    assert one.run("ns/other", lambda: runs.append("other") or []) == []  # other keys run
    release.set()
    runner.join(5)
    assert runs == ["first", "other", "latest"]
    assert result == [["b"]]
    assert one.run("ns/m", lambda: ["c"]) == ["c"]  # free again


def test_a_failing_call_frees_the_key() -> None:
    one = OnePerKey()

    def fail() -> list[str]:
        raise RuntimeError("API server unavailable")

    with pytest.raises(RuntimeError):
        one.run("ns/m", fail)
    assert one.run("ns/m", lambda: ["ok"]) == ["ok"]
