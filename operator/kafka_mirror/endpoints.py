"""The HTTP server of the metrics and health endpoints, the operator's and the workers'.

Any pod may connect to these ports, so no client may hold another up: each connection has its
own thread (prometheus-client's `ThreadingWSGIServer`, what its `start_http_server` uses), a
connection that sends nothing for `IDLE_SECONDS` is closed, one whose request has not been
answered within `REQUEST_SECONDS` is cut (a client trickling a byte at a time resets the idle
timeout at each read), and at most `MAX_CONNECTIONS` are served at once, those beyond closed at
once, so that threads cannot pile up. The kubelet's probes and Prometheus' scrapes send their
request at once; the NetworkPolicies (docs/install.md) keep other pods off these ports.
"""

from __future__ import annotations

import contextlib
import socket
import threading
import time
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client.exposition import ThreadingWSGIServer

IDLE_SECONDS = 10.0
REQUEST_SECONDS = 20.0
MAX_CONNECTIONS = 128


class _Handler(WSGIRequestHandler):
    timeout = IDLE_SECONDS  # a socket timeout on every read of the request
    server: _BoundedServer

    def handle(self) -> None:
        self.server.started(self.connection)
        try:
            super().handle()
        finally:
            self.server.ended(self.connection)

    def log_message(self, format: str, *args: Any) -> None:
        return  # a line per probe and scrape says nothing


class _BoundedServer(ThreadingWSGIServer):
    """At most `slots` connections served at once (one beyond is closed unanswered), each cut
    `deadline` seconds after it started by one reaper thread."""

    slots = MAX_CONNECTIONS
    deadline = REQUEST_SECONDS

    def server_activate(self) -> None:
        super().server_activate()
        self._free = threading.BoundedSemaphore(self.slots)
        self._lock = threading.Lock()
        self._serving: dict[socket.socket, float] = {}
        threading.Thread(target=self._reap, name="endpoints-reaper", daemon=True).start()

    def started(self, connection: socket.socket) -> None:
        with self._lock:
            self._serving[connection] = time.monotonic() + self.deadline

    def ended(self, connection: socket.socket) -> None:
        with self._lock:
            self._serving.pop(connection, None)

    def _reap(self) -> None:
        while self.socket.fileno() != -1:  # until server_close
            time.sleep(min(1.0, self.deadline / 4))
            now = time.monotonic()
            with self._lock:
                late = [c for c, deadline in self._serving.items() if deadline < now]
            for connection in late:
                with contextlib.suppress(OSError):
                    connection.shutdown(socket.SHUT_RDWR)

    def process_request(self, request: Any, client_address: Any) -> None:
        if not self._free.acquire(blocking=False):
            self.shutdown_request(request)
            return
        try:
            super().process_request(request, client_address)
        except Exception:
            self._free.release()  # no thread took it
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            self._free.release()


def serve(app: Any, port: int, name: str) -> ThreadingWSGIServer:
    """Serve the WSGI `app` on every address at `port`, from a daemon thread named `name`."""
    server = make_server("0.0.0.0", port, app, _BoundedServer, handler_class=_Handler)
    threading.Thread(target=server.serve_forever, name=name, daemon=True).start()
    return server
