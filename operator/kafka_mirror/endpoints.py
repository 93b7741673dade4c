"""The HTTP server of the metrics and health endpoints, the operator's and the workers'.

Any pod may connect to these ports, so no client may hold another up: each connection has its
own thread (prometheus-client's `ThreadingWSGIServer`, what its `start_http_server` uses), and a
connection that sends nothing for `IDLE_SECONDS` is closed, so idle ones cannot pile up threads.
The kubelet's probes and Prometheus' scrapes send their request at once.
"""

from __future__ import annotations

import threading
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, make_server

from prometheus_client.exposition import ThreadingWSGIServer

IDLE_SECONDS = 10.0


class _Handler(WSGIRequestHandler):
    timeout = IDLE_SECONDS  # a socket timeout on every read of the request

    def log_message(self, format: str, *args: Any) -> None:
        return  # a line per probe and scrape says nothing


def serve(app: Any, port: int, name: str) -> ThreadingWSGIServer:
    """Serve the WSGI `app` on every address at `port`, from a daemon thread named `name`."""
    server = make_server("0.0.0.0", port, app, ThreadingWSGIServer, handler_class=_Handler)
    threading.Thread(target=server.serve_forever, name=name, daemon=True).start()
    return server
