"""The metrics and health endpoints answer while other clients hold connections open: the
kubelet's probe of a worker must not wait behind an idle connection from any pod."""

from __future__ import annotations

import socket
import urllib.request
from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry

from kafka_mirror import endpoints
from kafka_mirror.worker.metrics import serve
from kafka_mirror_dev.processes import free_port

IDLE = 50


@pytest.fixture
def worker_port() -> Iterator[int]:
    port = free_port()
    server = serve(CollectorRegistry(), port, live=lambda: True, ready=lambda: True)
    yield port
    server.shutdown()
    server.server_close()


def idle_connections(port: int, count: int) -> list[socket.socket]:
    return [socket.create_connection(("127.0.0.1", port), timeout=5) for _ in range(count)]


def test_healthz_answers_while_50_idle_connections_are_held(
    worker_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Idle connections are never timed out here: a server that served one connection at a time
    # would never answer, so the generous deadline below tells the two apart on a busy machine.
    monkeypatch.setattr(endpoints._Handler, "timeout", 3600)
    held = idle_connections(worker_port, IDLE)
    try:
        for path in ("/healthz", "/readyz", "/metrics"):
            with urllib.request.urlopen(f"http://127.0.0.1:{worker_port}{path}", timeout=30) as r:
                assert r.status == 200, path
    finally:
        for connection in held:
            connection.close()


def test_an_idle_connection_is_closed_after_the_idle_timeout(
    worker_port: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(endpoints._Handler, "timeout", 0.5)
    (held,) = idle_connections(worker_port, 1)
    with held:
        held.settimeout(60)  # far beyond the idle timeout: recv returns only if the server closed
        assert held.recv(1) == b""


def test_a_client_trickling_its_request_is_cut_at_the_whole_request_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Each byte arrives well within the idle timeout; only the request's deadline ends it.
    monkeypatch.setattr(endpoints._BoundedServer, "deadline", 1.0)
    port = free_port()
    server = serve(CollectorRegistry(), port, live=lambda: True, ready=lambda: True)
    (held,) = idle_connections(port, 1)
    with held:
        held.settimeout(0.2)
        for byte in b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Slow: " + b"a" * 10_000:
            try:
                held.send(bytes([byte]))
                if held.recv(1) == b"":
                    break  # closed by the server
            except TimeoutError:
                continue  # nothing yet: the server is still reading
            except OSError:
                break  # reset by the server
        else:
            raise AssertionError("the server read a trickled request for 2,000 s")
    server.shutdown()
    server.server_close()


def test_connections_beyond_the_cap_are_closed_and_the_server_answers_after(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(endpoints._Handler, "timeout", 3600)
    monkeypatch.setattr(endpoints._BoundedServer, "slots", 8)  # MAX_CONNECTIONS' behaviour
    worker_port = free_port()
    server = serve(CollectorRegistry(), worker_port, live=lambda: True, ready=lambda: True)
    held = idle_connections(worker_port, 8)
    try:
        (extra,) = idle_connections(worker_port, 1)
        with extra:
            extra.settimeout(60)
            assert extra.recv(1) == b"", "a connection beyond the cap was served"
    finally:
        for connection in held:
            connection.close()

    # The slots come back as the held connections close.
    def answers() -> bool:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{worker_port}/healthz", timeout=5) as r:
                return r.status == 200
        except OSError:
            return False

    assert any(answers() for _ in range(100))
    server.shutdown()
    server.server_close()
