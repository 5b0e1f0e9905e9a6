"""The HTTP endpoint: ``GET /metrics`` answered from an :class:`Exposition`, in a thread of its own.

The format follows the scraper's ``Accept`` header, decided by prometheus_client's own negotiation
(``choose_encoder``): OpenMetrics for ``application/openmetrics-text``, else the Prometheus text format.
A server per request thread (stdlib ``wsgiref``), so a slow scraper holds up neither another nor the run.
"""

from __future__ import annotations

import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from typing import Any
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client.exposition import choose_encoder

from cvs_tui.core.export.exposition import Exposition

PATH = "/metrics"


class _Server(ThreadingMixIn, WSGIServer):
    daemon_threads = True  # a scrape in flight does not keep the process alive


class _Quiet(WSGIRequestHandler):
    def log_message(self, format: str, *args: Any) -> None:  # every scrape would print a line
        pass


def app(expo: Exposition) -> Callable[..., Iterable[bytes]]:
    def serve(environ: dict[str, Any], start_response: Callable[..., Any]) -> Iterable[bytes]:
        if environ.get("PATH_INFO", "") not in (PATH, PATH + "/"):
            start_response("404 Not Found", [("Content-Type", "text/plain; charset=utf-8")])
            return [f"not found: the series are at {PATH}\n".encode()]
        _encoder, content_type = choose_encoder(environ.get("HTTP_ACCEPT", ""))
        try:
            body = expo.render(openmetrics=content_type.startswith("application/openmetrics-text"))
        except Exception as exc:  # the scraper records it (its target's last error); the screen stays clean
            start_response("500 Internal Server Error", [("Content-Type", "text/plain; charset=utf-8")])
            return [f"cvs-tui: the series could not be read: {type(exc).__name__}: {exc}\n".encode()]
        start_response("200 OK", [("Content-Type", content_type), ("Content-Length", str(len(body)))])
        return [body]

    return serve


def serve(expo: Exposition, bind: str, port: int) -> WSGIServer:
    """A server for ``expo`` listening on ``bind``:``port`` (0: any free port), already serving.
    Raises OSError (the port is in use, the address is not this machine's or does not resolve)."""
    family = socket.getaddrinfo(bind, port, type=socket.SOCK_STREAM)[0][0]
    server_class = type("_MetricsServer", (_Server,), {"address_family": family})
    server: WSGIServer = make_server(bind, port, app(expo), server_class, handler_class=_Quiet)
    threading.Thread(target=server.serve_forever, name="metrics-endpoint", daemon=True).start()
    return server
