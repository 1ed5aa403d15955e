"""Pytest plugin: real protocol peers on loopback standing in for SaaS that cannot be reached.

- ``radicale``: a Radicale CalDAV server (no auth) with helpers to create calendars and count
  events (``.ics`` files) per calendar.
- ``smtp_server``: an aiosmtpd SMTP server that keeps every message it received.
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message
from pathlib import Path
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from aiosmtpd.controller import Controller

from .runtime import free_port

__all__ = ["Radicale", "SmtpSink", "radicale", "smtp_server", "start_radicale"]

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
