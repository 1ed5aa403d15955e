"""The sandbox mailbox: an aiosmtpd SMTP server that keeps every message it receives (in memory,
and as ``.eml`` files when given a folder, so a restart keeps them), and an HTTP page listing
them (``GET /`` HTML with the sandbox banner, ``GET /messages`` JSON, ``GET /messages/{n}`` one
message with its body). Nothing is relayed: mail sent here reaches no one."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from email import message_from_bytes, policy
from email.message import EmailMessage, Message
from pathlib import Path
from typing import Any

from aiosmtpd.controller import Controller

from countersign.kernel import ascii_digits

from .core import render_page
from .http import Answer, JsonServer, Request, free_port

__all__ = ["SmtpSink", "mailbox_route", "message_view", "serve_mailbox", "serve_smtp"]

WHAT = "mail server"


@dataclass
class SmtpSink:
    """An aiosmtpd handler that keeps every message it received (``messages``, in order)."""

    host: str
    port: int
    messages: list[Message] = field(default_factory=list)
    #: when set, each message is also written there as ``000001.eml`` … and read back at start
    folder: Path | None = None
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _written: int = field(default=0, repr=False)

    def __post_init__(self) -> None:
        if self.folder is not None:
            self.folder.mkdir(parents=True, exist_ok=True)
            for path in sorted(self.folder.glob("*.eml")):
                self.messages.append(message_from_bytes(path.read_bytes(), policy=policy.default))
                self._written += 1

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802 - aiosmtpd API
        """Keep the message; answer 250."""
        raw: bytes = envelope.content
        with self._lock:
            self.messages.append(message_from_bytes(raw, policy=policy.default))
            if self.folder is not None:  # numbered on disk even if a test clears ``messages``
                self._written += 1
                (self.folder / f"{self._written:06d}.eml").write_bytes(raw)
        return "250 OK"

    def to(self, address: str) -> list[Message]:
        """Messages addressed to ``address``."""
        return [m for m in self.messages if address in str(m.get("To", ""))]


def _body(msg: Message) -> str:
    if isinstance(msg, EmailMessage):
        part = msg.get_body(preferencelist=("plain", "html"))
        if part is not None:
            return str(part.get_content())
    payload = msg.get_payload(decode=True)
    return payload.decode(errors="replace") if isinstance(payload, bytes) else str(payload)


def message_view(n: int, msg: Message, *, with_body: bool = True) -> dict[str, Any]:
    """One message as JSON: its number, the headers people read, and the text body."""
    out: dict[str, Any] = {
        "n": n,
        "from": str(msg.get("From", "")),
        "to": str(msg.get("To", "")),
        "subject": str(msg.get("Subject", "")),
        "date": str(msg.get("Date", "")),
    }
    if with_body:
        out["body"] = _body(msg)
    return out


def mailbox_route(sink: SmtpSink) -> Any:
    """The mailbox page's ``route`` over ``sink`` (newest first)."""

    def route(req: Request) -> Answer:
        if req.method != "GET":
            return Answer(405, {"error": f"{req.method} {req.path}: the mailbox is read-only"})
        msgs = list(enumerate(sink.messages, start=1))
        if req.path == "/":
            rows = [{k: str(v) for k, v in message_view(n, m).items()} for n, m in reversed(msgs)]
            page = render_page(
                "Sandbox mailbox", WHAT, rows, ["n", "date", "from", "to", "subject", "body"]
            )
            return Answer(200, html=page)
        if req.path == "/messages":
            to = req.query.get("to")
            views = [
                message_view(n, m)
                for n, m in reversed(msgs)
                if to is None or to in str(m.get("To", ""))
            ]
            return Answer(200, {"count": len(views), "messages": views})
        if req.path.startswith("/messages/"):
            tail = req.path.rsplit("/", 1)[1]
            if ascii_digits(tail) and 1 <= int(tail) <= len(msgs):
                return Answer(200, message_view(int(tail), msgs[int(tail) - 1][1]))
            return Answer(404, {"error": f"no message {tail}"})
        return Answer(404, {"error": f"no route GET {req.path}"})

    return route


@contextmanager
def serve_smtp(
    sink: SmtpSink | None = None, *, host: str = "127.0.0.1", port: int = 0
) -> Iterator[SmtpSink]:
    """An SMTP server keeping what it receives until the block ends (port 0: a free port)."""
    if sink is None:
        sink = SmtpSink(host=host, port=port or free_port(host))
    controller = Controller(sink, hostname=sink.host, port=sink.port)
    controller.start()
    try:
        yield sink
    finally:
        controller.stop()


@contextmanager
def serve_mailbox(
    sink: SmtpSink, *, host: str = "127.0.0.1", port: int = 0, quiet: bool = True
) -> Iterator[str]:
    """The mailbox page over ``sink`` until the block ends; yields its URL."""
    server = JsonServer(mailbox_route(sink), what=WHAT, host=host, port=port, quiet=quiet).start()
    try:
        yield server.url
    finally:
        server.stop()
