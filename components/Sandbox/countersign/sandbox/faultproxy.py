"""A fault switch in front of a provider this package does not serve itself (Radicale, for CalDAV):
a small HTTP proxy that forwards every request as it is (any method: PROPFIND, REPORT, PUT, …)
to ``upstream`` and answers what came back, unless an armed fault answers instead
(``sandbox.faults``: ``/_sandbox/faults`` on the proxy arms, lists and clears them, the same as on
the sandbox's own providers). A connector pointed at the proxy's URL sees real answers, and each
failure class can be produced from one. Sandbox SPEC "Faults"."""

from __future__ import annotations

import json
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

import httpx

from .faults import FAULTS_PATH, Faults
from .http import JsonServer, Served

__all__ = ["FaultProxy", "serve_fault_proxy"]

#: request headers not passed on (hop by hop, or set by the client again)
_HOP = {
    "connection",
    "keep-alive",
    "transfer-encoding",
    "host",
    "content-length",
    "accept-encoding",
}


class FaultProxy:
    """The proxy's state: where it forwards to, and its fault switch."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream.rstrip("/")
        self.faults = Faults()
        self.url = ""
        self.client = httpx.Client(timeout=30)

    def forward(
        self, method: str, target: str, headers: dict[str, str], body: bytes
    ) -> tuple[int, list[tuple[str, str]], bytes]:
        """Send the request upstream once; its status, headers and body."""
        kept = {k: v for k, v in headers.items() if k.lower() not in _HOP}
        kept["Accept-Encoding"] = "identity"  # the body is passed on as it came
        r = self.client.request(method, self.upstream + target, headers=kept, content=body)
        out = [(k, v) for k, v in r.headers.items() if k.lower() not in _HOP | {"content-encoding"}]
        return r.status_code, out, r.content


def _handler(proxy: FaultProxy) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _any(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            path = urlsplit(self.path).path
            if path == FAULTS_PATH:
                try:
                    body: Any = json.loads(raw) if raw else {}
                except ValueError:
                    body = {}
                status, doc = proxy.faults.admin(self.command, body)
                self._send(status, [("Content-Type", "application/json")], json.dumps(doc).encode())
                return
            fault = proxy.faults.take(self.command, path)
            answer = None
            if fault is None or fault.act:
                answer = proxy.forward(self.command, self.path, dict(self.headers.items()), raw)
            if fault is not None:
                if fault.drop:  # the connection closes with no answer at all
                    self.close_connection = True
                    return
                status, doc, extra = fault.answer()
                headers = [("Content-Type", "application/json"), *extra.items()]
                answer = (status, headers, json.dumps(doc).encode())
            if answer is not None:
                self._send(*answer)

        def _send(self, status: int, headers: list[tuple[str, str]], data: bytes) -> None:
            self.send_response(status)
            for k, v in headers:
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = do_HEAD = do_OPTIONS = _any  # noqa: N815
        do_PROPFIND = do_PROPPATCH = do_REPORT = do_MKCALENDAR = do_MKCOL = _any  # noqa: N815

        def log_message(self, format: str, *args: Any) -> None:
            return

    return Handler


class _ProxyServer(JsonServer):
    """A ``JsonServer`` whose socket serves the proxy's handler."""

    def __init__(self, proxy: FaultProxy, host: str, port: int) -> None:
        self.what = "fault proxy"
        self.faults = proxy.faults
        self._server = ThreadingHTTPServer((host, port), _handler(proxy))
        self._server.daemon_threads = True
        self._thread = None
        self._closed = False


def serve_fault_proxy(
    upstream: str, *, host: str = "127.0.0.1", port: int = 0
) -> Served[FaultProxy]:
    """A fault proxy in front of ``upstream`` on ``host:port`` (0: a free port), serving from a
    daemon thread until ``shutdown``; ``url`` is set on the state."""
    proxy = FaultProxy(upstream)
    server = _ProxyServer(proxy, host, port).start()
    proxy.url = server.url
    return Served(proxy, server, on_stop=proxy.client.close)
