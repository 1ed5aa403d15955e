"""The one small HTTP server every sandbox service runs on (stdlib ``http.server``, a thread per
request): JSON in, JSON or HTML out, the sandbox label on every answer (SPEC §Labelled),
``GET /healthz``, and the fault switch (``sandbox.faults``: ``/_sandbox/faults`` arms the next
answers to fail). A service is a ``route`` function from a ``Request`` to an ``Answer``."""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import TracebackType
from typing import Any, Generic, TypeVar
from urllib.parse import parse_qsl, urlsplit

from countersign.kernel.process import free_port

from .core import mark_sandbox
from .faults import FAULTS_PATH, Fault, Faults

__all__ = ["Answer", "JsonServer", "Request", "Route", "Served", "free_port", "page_or_admin"]


@dataclass(frozen=True)
class Request:
    """One request as a service sees it (JSON body parsed; ``{}`` when absent or not JSON)."""

    method: str
    path: str
    query: Mapping[str, str]
    body: Any
    headers: Mapping[str, str] = field(default_factory=dict)

    def header(self, name: str) -> str | None:
        """A header by case-insensitive name (empty counts as absent)."""
        low = name.lower()
        return next((v for k, v in self.headers.items() if k.lower() == low and v), None)


@dataclass(frozen=True)
class Answer:
    """What a service answers: JSON ``body`` (labelled), or a whole ``html`` page."""

    status: int
    body: Any = None
    html: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


Route = Callable[[Request], Answer]


def page_or_admin(
    req: Request,
    lock: AbstractContextManager[Any],
    page: Callable[[], str],
    admin: Callable[[Request], Answer],
) -> Answer | None:
    """What every sandbox service answers the same way, under its lock: ``GET /`` its page, and
    ``/_sandbox/…`` its admin routes; None for a request of the provider's own contract."""
    if req.method == "GET" and req.path == "/":
        with lock:
            return Answer(200, html=page())
    if req.path.startswith("/_sandbox/"):
        with lock:
            return admin(req)
    return None


class JsonServer:
    """``route`` served on ``host:port`` (0: a free port) in a daemon thread, or in the
    foreground with ``serve_forever`` (the sandbox processes)."""

    def __init__(
        self,
        route: Route,
        *,
        what: str,
        host: str = "127.0.0.1",
        port: int = 0,
        quiet: bool = True,
    ) -> None:
        self.what = what
        #: the fault switch (``sandbox.faults``): armed answers, and every request seen
        self.faults = Faults()
        self._server = ThreadingHTTPServer((host, port), _handler(route, what, quiet, self.faults))
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None
        self._closed = False

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self._server.server_address[1])

    @property
    def url(self) -> str:
        """``http://127.0.0.1:<port>``."""
        return f"http://{self._server.server_address[0]!s}:{self.port}"

    def start(self) -> JsonServer:
        """Serve in a daemon thread; returns self."""
        self._thread = threading.Thread(
            target=self._server.serve_forever, name=f"sandbox-{self.what}", daemon=True
        )
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in this thread until ``stop`` (or the process ends)."""
        self._server.serve_forever()

    def stop(self) -> None:
        """Stop serving and close the socket (again: nothing to do)."""
        if self._closed:
            return
        self._closed = True
        if self._thread is not None:
            self._server.shutdown()
        self._server.server_close()


T = TypeVar("T")


class Served(Generic[T]):
    """A service's state and the server running it: ``with serve_x() as state:`` or, in a
    fixture, ``served = serve_x(state)`` … ``served.shutdown()``."""

    def __init__(self, state: T, server: JsonServer, *, on_stop: Callable[[], None] | None = None):
        self.state = state
        self.server = server
        self._on_stop = on_stop

    @property
    def url(self) -> str:
        """Where it answers."""
        return self.server.url

    @property
    def faults(self) -> Faults:
        """Its fault switch (``sandbox.faults``)."""
        return self.server.faults

    def shutdown(self) -> None:
        """Stop serving and close the socket (idempotent)."""
        if self._on_stop is not None:
            self._on_stop()
        self.server.stop()

    def server_close(self) -> None:
        """Close the socket (done by ``shutdown`` already; kept for ``http.server`` habits)."""
        self.server.stop()

    def __enter__(self) -> T:
        return self.state

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.shutdown()


def _handler(route: Route, what: str, quiet: bool, faults: Faults) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _any(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            parts = urlsplit(self.path)
            try:
                body = json.loads(raw) if raw else {}
            except ValueError:
                body = {}
            if self.command == "GET" and parts.path == "/healthz":
                answer = Answer(200, {"ok": True, "service": what})
            elif parts.path == FAULTS_PATH:
                answer = Answer(*faults.admin(self.command, body))
            else:
                fault = faults.take(self.command, parts.path)
                if fault is None or fault.act:
                    answer = route(
                        Request(
                            method=self.command,
                            path=parts.path,
                            query=dict(parse_qsl(parts.query)),
                            body=body,
                            headers=dict(self.headers.items()),
                        )
                    )
                if fault is not None:
                    if fault.drop:  # the connection closes with no answer at all
                        self.close_connection = True
                        return
                    answer = _faulty(fault)
            self._send(answer)

        def _send(self, answer: Answer) -> None:
            if answer.html is not None:
                data, kind = answer.html.encode(), "text/html; charset=utf-8"
            else:
                data, kind = (
                    json.dumps(mark_sandbox(answer.body, what)).encode(),
                    "application/json",
                )
            self.send_response(answer.status)
            self.send_header("Content-Type", kind)
            self.send_header("Content-Length", str(len(data)))
            self.send_header("X-Countersign-Sandbox", "true")
            for name, value in answer.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = _any  # noqa: N815

        def log_message(self, format: str, *args: Any) -> None:
            if not quiet:  # the sandbox processes log each request to their log file
                super().log_message(format, *args)

    return Handler


def _faulty(fault: Fault) -> Answer:
    status, body, headers = fault.answer()
    return Answer(status, body, headers=headers)
