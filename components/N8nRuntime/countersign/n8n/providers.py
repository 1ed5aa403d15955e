"""Pytest plugin: real protocol peers on loopback standing in for SaaS that cannot be reached.

- ``radicale``: a Radicale CalDAV server (no auth) with helpers to create calendars and count
  events (``.ics`` files) per calendar.
- ``smtp_server``: an aiosmtpd SMTP server that keeps every message it received.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, quote, urlsplit

import httpx
import pytest
from aiosmtpd.controller import Controller

from .runtime import free_port

__all__ = [
    "Radicale",
    "ShopSandbox",
    "SmtpSink",
    "radicale",
    "shop_sandbox",
    "smtp_server",
    "start_radicale",
]

_MKCALENDAR = """<?xml version="1.0" encoding="utf-8"?>
<C:mkcalendar xmlns:D="DAV:" xmlns:C="urn:ietf:params:xml:ns:caldav">
  <D:set><D:prop><D:displayname>countersign test</D:displayname></D:prop></D:set>
</C:mkcalendar>"""


@dataclass
class Radicale:
    """A running Radicale."""

    base_url: str
    folder: Path

    def calendar_url(self, user: str) -> str:
        """The collection URL the caldav connector uses for ``user``."""
        return f"{self.base_url}/{quote(user, safe='@')}/calendar/"

    def make_calendar(self, user: str) -> None:
        """Create ``/<user>/`` and ``/<user>/calendar/`` (idempotent)."""
        httpx.request("MKCOL", f"{self.base_url}/{quote(user, safe='@')}/", timeout=10)
        r = httpx.request("MKCALENDAR", self.calendar_url(user), content=_MKCALENDAR, timeout=10)
        if r.status_code not in (201, 405, 409):
            raise AssertionError(f"MKCALENDAR {user}: {r.status_code} {r.text[:200]}")

    def add_event(self, user: str, uid: str, start: str, end: str, summary: str = "busy") -> None:
        """Put an event directly (a change of the world outside Countersign)."""
        ics = (
            "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//test//EN\r\nBEGIN:VEVENT\r\n"
            f"UID:{uid}\r\nDTSTAMP:{start}\r\nDTSTART:{start}\r\nDTEND:{end}\r\nSUMMARY:{summary}\r\n"
            "END:VEVENT\r\nEND:VCALENDAR\r\n"
        )
        r = httpx.put(
            f"{self.calendar_url(user)}{uid}.ics",
            content=ics,
            headers={"Content-Type": "text/calendar"},
            timeout=10,
        )
        if r.status_code not in (201, 204):
            raise AssertionError(f"PUT event: {r.status_code} {r.text[:200]}")

    def events(self, user: str) -> list[str]:
        """The ``.ics`` items in ``user``'s calendar (by file name)."""
        folder = self.folder / "collection-root" / user / "calendar"
        return sorted(p.name for p in folder.glob("*.ics")) if folder.exists() else []


def start_radicale(folder: Path) -> tuple[Radicale, subprocess.Popen[bytes]]:
    """Start Radicale on a free loopback port with storage in ``folder`` (no authentication)."""
    port = free_port()
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "radicale",
            "--server-hosts",
            f"127.0.0.1:{port}",
            "--storage-filesystem-folder",
            str(folder),
            "--auth-type",
            "none",
            "--rights-type",
            "authenticated",
            "--logging-level",
            "warning",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(base + "/", timeout=1).status_code < 500:
                return Radicale(base_url=base, folder=folder), proc
        time.sleep(0.1)
    proc.kill()
    raise RuntimeError("radicale did not start")


@pytest.fixture(scope="session")
def radicale(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Radicale]:
    """Radicale on a free loopback port, storage in a temp folder, no authentication."""
    server, proc = start_radicale(tmp_path_factory.mktemp("radicale"))
    try:
        yield server
    finally:
        proc.terminate()
        proc.wait(10)


@dataclass
class SmtpSink:
    """Messages received by the local SMTP server."""

    host: str
    port: int
    messages: list[Message] = field(default_factory=list)

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:  # noqa: N802 - aiosmtpd API
        self.messages.append(message_from_bytes(envelope.content))
        return "250 OK"

    def to(self, address: str) -> list[Message]:
        """Messages addressed to ``address``."""
        return [m for m in self.messages if address in str(m.get("To", ""))]


@pytest.fixture(scope="session")
def smtp_server() -> Iterator[SmtpSink]:
    """An aiosmtpd server on a free loopback port."""
    port = free_port()
    sink = SmtpSink(host="127.0.0.1", port=port)
    controller = Controller(sink, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield sink
    finally:
        controller.stop()


@dataclass
class ShopSandbox:
    """A sandbox shop for the ``shop.sandbox`` connector (labelled sandbox: no real shop can be
    reached from here): search, a cart whose lines are keyed by the Idempotency-Key header, and a
    checkout that refuses (409) a cart over the caller's ``max_total``. ``prices`` may be changed
    by a test between two gates; ``arrivals`` records every request (method, path, key)."""

    base_url: str = ""
    prices: dict[str, str] = field(
        default_factory=lambda: {"cable-a": "9.90", "cable-b": "12.50", "cable-c": "19.00"}
    )
    cart: dict[str, dict[str, Any]] = field(default_factory=dict)
    orders: dict[str, dict[str, Any]] = field(default_factory=dict)
    arrivals: list[tuple[str, str, str | None]] = field(default_factory=list)
    #: prices that change the moment a checkout arrives (the world moving under a write)
    reprice_at_checkout: dict[str, str] = field(default_factory=dict)
    _by_key: dict[str, dict[str, Any]] = field(default_factory=dict)

    def total(self) -> str:
        cents = sum(
            round(float(line["unit_price"]) * 100) * line["quantity"] for line in self.cart.values()
        )
        return f"{cents / 100:.2f}"

    def handle(
        self, method: str, path: str, query: dict[str, str], body: Any, key: str | None
    ) -> tuple[int, Any]:
        self.arrivals.append((method, path, key))
        if method == "GET" and path == "/search":
            q = query.get("q", "")
            return 200, {
                "query": q,
                "offers": [
                    {"item": i, "title": f"{q} ({i})", "price": p}
                    for i, p in sorted(self.prices.items())
                ],
            }
        if method == "GET" and path == "/cart":
            return 200, {"lines": list(self.cart.values()), "total": self.total()}
        if key is not None and key in self._by_key:  # a replay of a request already applied
            return 200, self._by_key[key]
        if method == "POST" and path == "/cart":
            item = str(body.get("item"))
            if item not in self.prices:
                return 404, {"error": f"no item {item}"}
            line_id = f"line-{len(self.cart) + len(self.orders) + 1}"
            line: dict[str, Any] = {
                "id": line_id,
                "item": item,
                "quantity": int(body.get("quantity", 1)),
                "unit_price": self.prices[item],
            }
            self.cart[line_id] = line
            out: dict[str, Any] = {**line, "cart_total": self.total()}
        elif method == "DELETE" and path.startswith("/cart/"):
            self.cart.pop(path.rsplit("/", 1)[1], None)
            out = {"cart_total": self.total()}
        elif method == "POST" and path == "/checkout":
            # prices are read again at checkout: the cart total is what would be charged now
            self.prices.update(self.reprice_at_checkout)
            for held in self.cart.values():
                held["unit_price"] = self.prices[str(held["item"])]
            if float(self.total()) > float(str(body.get("max_total"))):
                return 409, {"error": "cart total over max_total", "total": self.total()}
            order_id = f"order-{len(self.orders) + 1}"
            order: dict[str, Any] = {
                "id": order_id,
                "total": self.total(),
                "lines": [dict(v) for v in self.cart.values()],
            }
            self.orders[order_id] = order
            self.cart.clear()
            out = order
        elif method == "POST" and path.startswith("/orders/") and path.endswith("/cancel"):
            oid = path.split("/")[2]
            if oid not in self.orders:
                return 404, {"error": f"no order {oid}"}
            self.orders[oid]["cancelled"] = True
            out = {"id": oid, "cancelled": True}
        else:
            return 404, {"error": f"no route {method} {path}"}
        if key is not None:
            self._by_key[key] = out
        return 200, out


@pytest.fixture
def shop_sandbox() -> Iterator[ShopSandbox]:
    """A fresh sandbox shop on a free loopback port."""
    shop = ShopSandbox()
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def _any(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            parts = urlsplit(self.path)
            try:
                body = json.loads(raw) if raw else {}
            except ValueError:
                body = {}
            with lock:
                status, out = shop.handle(
                    self.command,
                    parts.path,
                    dict(parse_qsl(parts.query)),
                    body,
                    self.headers.get("Idempotency-Key") or None,
                )
            data = json.dumps(out).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_DELETE = _any  # noqa: N815

        def log_message(self, *args: Any) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    shop.base_url = f"http://127.0.0.1:{server.server_address[1]}"
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield shop
    finally:
        server.shutdown()
