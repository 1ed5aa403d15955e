"""The sandbox CalDAV server: a real Radicale (no authentication, storage in a folder) on
loopback, with helpers to create calendars and put events, and the demo calendars: one per demo
person, holding the busy time ``core.demo_busy`` gives for the coming days. The collection URL
is ``<base_url>/<user>/calendar/`` (the ``caldav`` connector's ``{@caldav_base_url}``)."""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import date
from html import escape
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import quote

import httpx

from countersign.kernel.process import ServiceError

from .core import BANNER, DEMO_PEOPLE, BusyBlock, demo_busy, ics_calendar, ics_stamp
from .http import free_port

__all__ = [
    "CaldavRequest",
    "CountingProxy",
    "Radicale",
    "counting_proxy",
    "radicale_command",
    "seed_demo_calendars",
    "serve_radicale",
    "start_radicale",
]


def _mkcalendar(name: str) -> str:
    return (
        '<?xml version="1.0" encoding="utf-8"?>\n'
        '<C:mkcalendar xmlns:D="DAV:" xmlns:C="urn:ietf:params:xml:ns:caldav">\n'
        f"  <D:set><D:prop><D:displayname>{escape(name)}</D:displayname></D:prop></D:set>\n"
        "</C:mkcalendar>"
    )


@dataclass
class Radicale:
    """A running Radicale."""

    base_url: str
    folder: Path

    def calendar_url(self, user: str) -> str:
        """The collection URL the caldav connector uses for ``user``."""
        return f"{self.base_url}/{quote(user, safe='@')}/calendar/"

    def make_calendar(self, user: str, *, name: str = "countersign test") -> None:
        """Create ``/<user>/`` and ``/<user>/calendar/`` (idempotent)."""
        httpx.request("MKCOL", f"{self.base_url}/{quote(user, safe='@')}/", timeout=10)
        r = httpx.request(
            "MKCALENDAR", self.calendar_url(user), content=_mkcalendar(name), timeout=10
        )
        if r.status_code not in (201, 405, 409):
            raise ServiceError(f"MKCALENDAR {user}: {r.status_code} {r.text[:200]}")

    def add_event(self, user: str, uid: str, start: str, end: str, summary: str = "busy") -> None:
        """Put an event directly (a change of the world outside Countersign); ``start``/``end``
        as iCalendar UTC date-times (``20261123T130000Z``). Putting the same UID again replaces
        it."""
        r = httpx.put(
            f"{self.calendar_url(user)}{uid}.ics",
            content=ics_calendar(uid, start, end, summary),
            headers={"Content-Type": "text/calendar"},
            timeout=10,
        )
        if r.status_code not in (201, 204):
            raise ServiceError(f"PUT event {uid} for {user}: {r.status_code} {r.text[:200]}")

    def store_events(self, user: str, objects: dict[str, str]) -> None:
        """Write calendar objects (UID → iCalendar text) straight into ``user``'s collection
        folder — thousands in a second, for benches; the calendar must exist
        (``make_calendar``). Radicale reads the folder on its next request."""
        folder = self.folder / "collection-root" / user / "calendar"
        for uid, text in objects.items():
            (folder / f"{uid}.ics").write_text(text, encoding="utf-8", newline="")

    def events(self, user: str) -> list[str]:
        """The ``.ics`` items in ``user``'s calendar (by file name)."""
        folder = self.folder / "collection-root" / user / "calendar"
        return sorted(p.name for p in folder.glob("*.ics")) if folder.exists() else []


def radicale_command(folder: Path, port: int, *, host: str = "127.0.0.1") -> list[str]:
    """The command line of a Radicale on ``host:port``, storage in ``folder``, no auth."""
    return [
        sys.executable,
        "-m",
        "radicale",
        "--server-hosts",
        f"{host}:{port}",
        "--storage-filesystem-folder",
        str(folder),
        "--auth-type",
        "none",
        "--rights-type",
        "authenticated",
        "--logging-level",
        "warning",
    ]


def wait_radicale(base: str, proc: subprocess.Popen[bytes], *, timeout_s: float = 20) -> None:
    """Wait until Radicale answers HTTP (``ServiceError`` if it exits or the time runs out)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServiceError(f"radicale exited with {proc.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(base + "/", timeout=1).status_code < 500:
                return
        time.sleep(0.1)
    raise ServiceError(f"radicale did not answer at {base} within {timeout_s:.0f} s")


def start_radicale(folder: Path, *, port: int = 0) -> tuple[Radicale, subprocess.Popen[bytes]]:
    """Start Radicale on a loopback port (0: a free one) with storage in ``folder``; the caller
    stops the process."""
    port = port or free_port()
    proc = subprocess.Popen(
        radicale_command(folder, port), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_radicale(base, proc)
    except ServiceError:
        proc.kill()
        raise
    return Radicale(base_url=base, folder=folder), proc


@contextlib.contextmanager
def serve_radicale(folder: Path, *, port: int = 0) -> Iterator[Radicale]:
    """A Radicale until the block ends."""
    server, proc = start_radicale(folder, port=port)
    try:
        yield server
    finally:
        proc.terminate()
        proc.wait(10)


def seed_demo_calendars(
    server: Radicale,
    first_day: date,
    *,
    people: tuple[str, ...] = DEMO_PEOPLE,
    days: int = 5,
) -> list[BusyBlock]:
    """A calendar per demo person holding ``demo_busy(first_day)`` (idempotent: the same UIDs
    are put again). Returns the blocks put."""
    blocks = demo_busy(first_day, days=days, people=people)
    label = BANNER.format(what="calendar")
    for person in people:
        server.make_calendar(person, name=f"{person} — {label}")
    for b in blocks:
        server.add_event(b.person, b.uid, ics_stamp(b.start), ics_stamp(b.end), b.summary)
    return blocks


@dataclass(frozen=True)
class CaldavRequest:
    """One request a ``CountingProxy`` passed on: method, path, Depth, whether a REPORT asked
    for calendar data (a read) or etags only (a revalidation), the answer's status."""

    method: str
    path: str
    depth: str | None
    calendar_data: bool
    status: int


@dataclass
class CountingProxy:
    """An HTTP proxy in front of a CalDAV server that records every request (tests and benches
    count what a read or a re-check costs the provider). ``base_url`` replaces the server's."""

    target: str
    base_url: str = ""
    requests: list[CaldavRequest] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def record(self, request: CaldavRequest) -> None:
        """Append one request (thread-safe)."""
        with self._lock:
            self.requests.append(request)

    def take(self) -> list[CaldavRequest]:
        """The requests recorded since the last ``take``."""
        with self._lock:
            out, self.requests = self.requests, []
        return out


#: headers not passed back: the body is re-sent decoded (httpx undid any content encoding)
_HOP = frozenset({"content-length", "content-encoding", "transfer-encoding", "connection"})


def _handler(proxy: CountingProxy, client: httpx.Client) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _forward(self) -> None:
            size = int(self.headers.get("Content-Length") or 0)
            body = self.rfile.read(size) if size else b""
            skip = {"host", "content-length", "connection"}
            headers = {k: v for k, v in self.headers.items() if k.lower() not in skip}
            r = client.request(
                self.command, proxy.target + self.path, headers=headers, content=body
            )
            proxy.record(
                CaldavRequest(
                    method=self.command,
                    path=self.path,
                    depth=self.headers.get("Depth"),
                    calendar_data=b"calendar-data" in body,
                    status=r.status_code,
                )
            )
            self.send_response(r.status_code)
            for k, v in r.headers.items():
                if k.lower() not in _HOP:
                    self.send_header(k, v)
            self.send_header("Content-Length", str(len(r.content)))
            self.end_headers()
            self.wfile.write(r.content)

        do_GET = do_PUT = do_DELETE = do_REPORT = do_PROPFIND = do_MKCOL = _forward  # noqa: N815
        do_MKCALENDAR = do_OPTIONS = do_HEAD = do_POST = _forward  # noqa: N815

        def log_message(self, format: str, *args: object) -> None:
            """Quiet."""

    return Handler


@contextlib.contextmanager
def counting_proxy(target: str) -> Iterator[CountingProxy]:
    """A ``CountingProxy`` to ``target`` on a loopback port until the block ends."""
    proxy = CountingProxy(target=target)
    with httpx.Client(timeout=60) as client:
        server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(proxy, client))
        proxy.base_url = f"http://127.0.0.1:{server.server_address[1]}"
        thread = threading.Thread(target=server.serve_forever, daemon=True)
        thread.start()
        try:
            yield proxy
        finally:
            server.shutdown()
            server.server_close()
