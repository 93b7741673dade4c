"""The process that asks Kafka's group coordinators (`kafka/coordinator.py`): its answers, its
waits, and its death (librdkafka#5040 segfaults it when a coordinator moves), which fails the
requests in flight at once and not the next ones. No cluster: nothing listens where it asks."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest
from confluent_kafka import KafkaException

from kafka_mirror.kafka import coordinator
from kafka_mirror.kafka.client import ClusterUnavailable
from kafka_mirror.kafka.coordinator import GroupCoordinator

NOWHERE = {"bootstrap.servers": "127.0.0.1:1", "log_level": "0"}


def test_an_error_comes_back_as_the_clients_own() -> None:
    refused = GroupCoordinator({**NOWHERE, "no.such.property": "1"})
    with pytest.raises(KafkaException, match=r"no\.such\.property"):
        refused.committed("g", 30)


def test_a_request_nobody_answers_ends_at_its_wait() -> None:
    groups = GroupCoordinator({**NOWHERE, "error_cb": print})  # callbacks stay behind
    started = time.monotonic()
    with pytest.raises(TimeoutError):
        groups.describe("g", 0.5)
    assert time.monotonic() - started < 0.5 + 30  # the child's start, at most, besides the wait


def test_a_crashed_child_fails_the_requests_in_flight_and_a_new_one_answers_the_next() -> None:
    groups = GroupCoordinator(NOWHERE)
    with pytest.raises(TimeoutError):
        groups.committed("g", 0.1)  # the child runs
    crashed = coordinator._CHILD._process
    failed: list[BaseException] = []

    def waiting() -> None:
        try:
            groups.committed("g", 120)
        except BaseException as error:  # what it raised is the subject
            failed.append(error)

    thread = threading.Thread(target=waiting)
    thread.start()
    while not coordinator._CHILD._pending:  # in flight: nothing listens, so it never ends
        time.sleep(0.01)
    started = time.monotonic()
    os.kill(crashed.pid, signal.SIGSEGV)
    thread.join(60)
    assert not thread.is_alive() and time.monotonic() - started < 60
    assert isinstance(failed[0], ClusterUnavailable), failed
    assert "ended before it answered" in str(failed[0])
    refused = GroupCoordinator({**NOWHERE, "no.such.property": "1"})
    with pytest.raises(KafkaException, match=r"no\.such\.property"):
        refused.committed("g", 30)
    assert coordinator._CHILD._process is not crashed and crashed.wait() == -signal.SIGSEGV
