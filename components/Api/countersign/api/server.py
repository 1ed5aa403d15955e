"""The HTTP server's edge: how ``countersign api`` — and so ``countersign up``, which runs it —
serves the app (uvicorn on h11), and what it refuses before the app sees a request.

Invariant (Api SPEC, the edge): one request has one framing, and a request cannot hold a
connection open forever.

- **Framing** (RFC 9112 §6.1, §6.3). A request with both ``Content-Length`` and
  ``Transfer-Encoding``, or with ``Transfer-Encoding`` in HTTP/1.0, is answered 400
  (``http_framing``) and its connection closed: behind a proxy that frames it the other way, the
  rest of the bytes would be read as a second, smuggled request. h11 already refuses a
  ``Transfer-Encoding`` other than exactly ``chunked`` (``chunked, identity``, two headers),
  ``Content-Length`` headers that disagree or are not digits, and whitespace before a colon; all
  of these get the same 400 and close (``send_400_response`` below).
- **Stalls.** Once a client has started a request (connected, or sent its first byte on a kept-
  alive connection), the whole request — headers and body — must arrive within
  ``read_timeout_s`` (``Settings.http_read_timeout_s``, default 30 s); otherwise 408
  (``request_timeout``) and close. A deadline for the whole request, not per read, so a
  byte-at-a-time sender is cut off too. Handlers that take long (a preview, an event stream) are
  not affected: the deadline ends when the request has been read.

Both answers are problem documents built by ``problems.problem``, written straight to the
socket (the app never runs).
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import h11
import uvicorn
from uvicorn.protocols.http.h11_impl import H11Protocol

from .problems import problem

__all__ = ["DEFAULT_READ_TIMEOUT_S", "edge_protocol", "serve", "server_config"]

DEFAULT_READ_TIMEOUT_S = 30.0
_PHRASES = {400: b"Bad Request", 408: b"Request Timeout"}
#: h11's own bound on a request head (uvicorn's default too)
_MAX_HEAD = 16 * 1024


def framing_refusal(request: h11.Request) -> str | None:
    """Why a request's framing is ambiguous (RFC 9112 §6.1), or None. h11 has already refused
    every other malformed framing (module docstring)."""
    names = {name for name, _ in request.headers}
    if b"transfer-encoding" not in names:
        return None
    if b"content-length" in names:
        return "Content-Length and Transfer-Encoding together (RFC 9112 §6.1); send one"
    if request.http_version == b"1.0":
        return "Transfer-Encoding in an HTTP/1.0 request (RFC 9112 §6.1)"
    return None


class _FramingGuard(h11.Connection):
    """h11, refusing the framings it would otherwise accept; remembers why it refused."""

    refusal = ""

    def next_event(self) -> Any:
        try:
            event = super().next_event()
        except h11.RemoteProtocolError as e:
            self.refusal = str(e)
            raise
        if isinstance(event, h11.Request) and (reason := framing_refusal(event)):
            self.refusal = reason
            raise h11.RemoteProtocolError(reason, error_status_hint=400)
        return event


class EdgeH11Protocol(H11Protocol):
    """uvicorn's h11 protocol with the framing guard and the whole-request read deadline."""

    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        size = self.config.h11_max_incomplete_event_size
        self.conn = _FramingGuard(h11.SERVER, _MAX_HEAD if size is None else size)
        self._deadline: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)  # type: ignore[arg-type]
        self._arm()

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        super().data_received(data)
        self._track(starting=True)

    def on_response_complete(self) -> None:
        super().on_response_complete()
        # a pipelined request already under way keeps its deadline; an idle connection is the
        # keep-alive timer's (the next request's first byte arms a fresh deadline)
        self._track(starting=False)

    def send_400_response(self, msg: str) -> None:
        self._answer_and_close(400, "http_framing", self.conn.refusal or msg)  # type: ignore[attr-defined]

    # ---- the read deadline ---------------------------------------------------------------------
    def _track(self, *, starting: bool) -> None:
        state = self.conn.their_state
        reading = state is h11.SEND_BODY or (starting and state is h11.IDLE)
        if not reading or self.transport.is_closing():
            self._disarm()
        elif self._deadline is None:
            self._arm()

    def _arm(self) -> None:
        self._disarm()
        self._deadline = self.loop.call_later(self.read_timeout_s, self._expired)

    def _disarm(self) -> None:
        if self._deadline is not None:
            self._deadline.cancel()
            self._deadline = None

    def _expired(self) -> None:
        self._deadline = None
        if self.transport.is_closing():
            return
        cycle = self.cycle if self.conn.their_state is h11.SEND_BODY else None
        if cycle is not None and cycle.response_started:
            self.transport.close()  # answered without reading the body; nothing more to say
            return
        if cycle is not None:
            cycle.disconnected = True  # the handler's receive() ends; its answer is dropped
            cycle.message_event.set()
        detail = f"the request was not complete within {self.read_timeout_s:g} s"
        self._answer_and_close(408, "request_timeout", detail)

    def _answer_and_close(self, status: int, code: str, detail: str) -> None:
        phrase = _PHRASES[status]
        body = json.dumps(problem(status, code, phrase.decode(), detail)).encode()
        head = (
            b"HTTP/1.1 %d %s\r\ncontent-type: application/problem+json\r\n"
            b"connection: close\r\ncontent-length: %d\r\n\r\n" % (status, phrase, len(body))
        )
        self._disarm()
        self.transport.write(head + body)
        self.transport.close()


def edge_protocol(read_timeout_s: float = DEFAULT_READ_TIMEOUT_S) -> type[EdgeH11Protocol]:
    """The protocol class with this read deadline (uvicorn builds one per connection)."""
    return type("EdgeH11Protocol", (EdgeH11Protocol,), {"read_timeout_s": read_timeout_s})


def server_config(
    app: Any,
    *,
    host: str,
    port: int,
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
    log_level: str = "warning",
) -> uvicorn.Config:
    """The one server configuration: ``countersign api`` / ``up`` and the tests' servers."""
    return uvicorn.Config(
        app,
        host=host,
        port=port,
        log_level=log_level,
        lifespan="on",
        http=edge_protocol(read_timeout_s),
    )


def serve(app: Any, *, host: str, port: int, read_timeout_s: float) -> None:
    """Serve ``app`` until interrupted (``countersign api``)."""
    uvicorn.Server(server_config(app, host=host, port=port, read_timeout_s=read_timeout_s)).run()
