"""Requests that a consumer group's coordinator answers (a group's committed offsets, its
description, a commit to it), made in a child process of their own.

librdkafka (2.16) crashes the process whose admin client asks a group's committed offsets when
the coordinator answers NOT_COORDINATOR, which it does while a broker restarts or the coordinator
moves: the answer's handler reaches for consumer-group state an admin client does not have
(librdkafka#5040, a segfault in rd_kafka_cgrp_op); and a coordinator connection that drops as
such a request goes out aborts the process (librdkafka#5397). Both happen when the mirror is
needed most, a cluster coming back. So one child process per process of ours makes these
requests, with one admin client per cluster connection: its crash fails the requests in flight,
as a cluster that did not answer would, and the next request starts a new child.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Callable
from concurrent.futures import Future
from functools import partial
from multiprocessing.connection import Connection
from typing import Any, NamedTuple

from confluent_kafka import (
    ConsumerGroupState,
    ConsumerGroupTopicPartitions,
    KafkaError,
    KafkaException,
    TopicPartition,
)
from confluent_kafka.admin import AdminClient

from kafka_mirror.kafka.client import (
    ADMIN_TIMEOUT,
    GROUP_REQUEST_LIMIT,
    ClusterUnavailable,
    Position,
)

log = logging.getLogger(__name__)


class CommittedOffset(NamedTuple):
    offset: int
    metadata: str
    leader_epoch: int | None


class GroupCoordinator:
    """The coordinators of one cluster's groups, asked from the child process. Each call raises
    KafkaException for an error (ClusterUnavailable when the child died) and TimeoutError when
    no answer came in `timeout` seconds; after a timeout the child's client of this cluster is
    replaced (librdkafka's can go on failing group requests after a broker restart, which a new
    one answers at once)."""

    def __init__(self, settings: dict[str, Any]) -> None:
        # The callbacks (error_cb) stay with the process's own clients.
        self.settings = {k: v for k, v in settings.items() if not callable(v)}

    def committed(
        self, group: str, timeout: float = ADMIN_TIMEOUT
    ) -> dict[Position, CommittedOffset]:
        """Every partition the group committed an offset to ({} for a group the cluster does
        not know)."""
        found: dict[Position, CommittedOffset] = _CHILD.call(
            "committed", self.settings, group, None, timeout
        )
        return found

    def describe(
        self, group: str, timeout: float = ADMIN_TIMEOUT
    ) -> tuple[ConsumerGroupState, set[str]]:
        """The group's state and its members' ids."""
        state, members = _CHILD.call("describe", self.settings, group, None, timeout)
        return state, set(members)

    def commit(
        self, group: str, offsets: dict[Position, int], timeout: float = ADMIN_TIMEOUT
    ) -> dict[Position, str]:
        """Commit `offsets` to the group (the coordinator refuses it while the group has
        members); the partitions the commit failed for, with why."""
        refused: dict[Position, str] = _CHILD.call("commit", self.settings, group, offsets, timeout)
        return refused


class _Child:
    """The child process, started on first use and again after it died."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._connection: Connection | None = None
        self._process: subprocess.Popen[bytes] | None = None
        self._pending: dict[int, tuple[Connection, Future[Any]]] = {}
        self._ids = itertools.count()

    def call(
        self, kind: str, settings: dict[str, Any], group: str, args: Any, timeout: float
    ) -> Any:
        future: Future[Any] = Future()
        with self._lock:
            connection = self._connection or self._start()
            request_id = next(self._ids)
            self._pending[request_id] = connection, future
            self._send(connection, (request_id, kind, settings, group, args))
        try:
            return future.result(timeout)
        except TimeoutError:
            with self._lock:
                self._send(connection, (request_id, "renew", settings, group, None))
            raise
        finally:
            with self._lock:
                self._pending.pop(request_id, None)

    def _send(self, connection: Connection, request: tuple[Any, ...]) -> None:
        """Under the lock. A child that died fails the request; its reader says so."""
        if self._connection is not connection:
            return
        try:
            connection.send(request)
        except OSError:
            self._connection = None
            raise _unanswered() from None

    def _start(self) -> Connection:
        # A new interpreter, not a fork (which would copy the clients' threads' locks in
        # whatever state they are in), importing only this module's.
        ours, theirs = socket.socketpair()
        with theirs:
            process = subprocess.Popen(
                [sys.executable, "-m", __name__, str(theirs.fileno())], pass_fds=[theirs.fileno()]
            )
        connection = Connection(ours.detach())
        self._connection, self._process = connection, process
        threading.Thread(
            target=self._read, args=(connection, process), name="coordinator-replies", daemon=True
        ).start()
        return connection

    def _read(self, connection: Connection, process: subprocess.Popen[bytes]) -> None:
        while True:
            try:
                request_id, result, error = connection.recv()
            except (EOFError, OSError):
                break
            with self._lock:
                _, future = self._pending.get(request_id, (None, None))
            if future is None:
                continue  # its caller gave up waiting
            if error is None:
                future.set_result(result)
            else:
                future.set_exception(KafkaException(KafkaError(*error)))
        log.warning(
            "the process asking Kafka's group coordinators ended (exit code %s; librdkafka#5040 "
            "crashes it when a coordinator moves): the next request starts a new one",
            process.wait(),
        )
        with self._lock:  # a send in flight on a connection being closed raises a TypeError
            if self._connection is connection:
                self._connection = None
            connection.close()
            failed = [future for sent, future in self._pending.values() if sent is connection]
        for future in failed:
            if not future.done():
                future.set_exception(_unanswered())


_CHILD = _Child()


def _unanswered() -> ClusterUnavailable:
    return ClusterUnavailable(
        "KafkaError", "the process asking the group's coordinator ended before it answered"
    )


def serve(connection: Connection) -> None:
    """The child: one admin client per cluster connection; answers as the requests finish.
    It ends when this process's parent has gone, without destroying its clients (a destroy can
    hang after a broker restart: librdkafka#4519)."""
    clients: dict[str, AdminClient] = {}
    send_lock = threading.Lock()

    def reply(request_id: int, result: Any, error: KafkaError | None) -> None:
        answer = (request_id, result, None if error is None else (error.code(), error.str()))
        with send_lock:
            connection.send(answer)

    while True:
        try:
            request_id, kind, settings, group, args = connection.recv()
        except EOFError:
            os._exit(0)
        key = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()
        if kind == "renew":
            old = [clients.pop(key, None)]
            # Its destroy can hang after a broker restart (librdkafka#4519).
            threading.Thread(target=old.clear, name="destroy-admin", daemon=True).start()
            continue
        try:
            if key not in clients:
                clients[key] = AdminClient(settings)
            future, convert = _request(clients[key], kind, group, args)
        except KafkaException as raised:
            reply(request_id, None, raised.args[0])
            continue
        future.add_done_callback(partial(_answer, reply, request_id, convert))


Reply = Callable[[int, Any, KafkaError | None], None]


def _answer(
    reply: Reply, request_id: int, convert: Callable[[Any], Any], done: Future[Any]
) -> None:
    try:
        result = convert(done.result())
    except KafkaException as raised:
        reply(request_id, None, raised.args[0])
    else:
        reply(request_id, result, None)


def _request(
    admin: AdminClient, kind: str, group: str, args: Any
) -> tuple[Future[Any], Callable[[Any], Any]]:
    """The request's future, and what turns its answer into plain data for the parent."""
    if kind == "committed":
        future = admin.list_consumer_group_offsets(
            [ConsumerGroupTopicPartitions(group)], request_timeout=GROUP_REQUEST_LIMIT
        )[group]
        return future, lambda answer: {
            (tp.topic, tp.partition): CommittedOffset(tp.offset, tp.metadata or "", tp.leader_epoch)
            for tp in answer.topic_partitions or []
            if tp.error is None and tp.offset >= 0
        }
    if kind == "describe":
        future = admin.describe_consumer_groups([group], request_timeout=GROUP_REQUEST_LIMIT)[group]
        return future, lambda answer: (answer.state, [m.member_id for m in answer.members])
    request = [TopicPartition(t, p, o) for (t, p), o in sorted(args.items())]
    future = admin.alter_consumer_group_offsets(
        [ConsumerGroupTopicPartitions(group, request)], request_timeout=GROUP_REQUEST_LIMIT
    )[group]
    return future, lambda answer: {
        (tp.topic, tp.partition): str(tp.error)
        for tp in answer.topic_partitions or []
        if tp.error is not None
    }


if __name__ == "__main__":
    # From the module proper, so that what it sends unpickles as the parent's own classes.
    from kafka_mirror.kafka.coordinator import serve as serve_parent

    serve_parent(Connection(int(sys.argv[1])))
