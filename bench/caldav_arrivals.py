"""Radicale with a stopwatch at the door: the time each PUT reaches the server (benches only).

Runs the sandbox's Radicale (same command line as ``countersign.sandbox.start_radicale``) in its
own process, with a WSGI wrapper that stamps every request on arrival — ``time.perf_counter()``,
which on Linux is ``CLOCK_MONOTONIC``, one clock for every process of the machine, so a bench
compares it with its own ``perf_counter`` readings. The stamp is taken when Radicale's server has
read the request line and headers and calls the application: before the body is parsed, before
any storage work. ``POST /.arrivals`` answers the PUTs stamped since the last such call
(``<seconds> <path>`` per line) and forgets them; nothing else changes.

Its own process, not a thread of the bench: a thread would wait for the GIL while the bench's
LangGraph side runs, and stamp late.

Run: ``python bench/caldav_arrivals.py FOLDER PORT`` (``start`` below does it).
"""

from __future__ import annotations

import contextlib
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx

_PATH = "/.arrivals"


def _serve(folder: str, port: str) -> None:
    import radicale.app  # noqa: PLC0415
    from radicale.__main__ import run  # noqa: PLC0415

    stamps: list[str] = []
    lock = threading.Lock()
    inner = radicale.app.Application.__call__

    def call(self: object, environ: dict[str, object], start_response: object) -> object:
        t = time.perf_counter()
        path = str(environ.get("PATH_INFO", ""))
        method = environ.get("REQUEST_METHOD")
        if path == _PATH:
            with lock:
                body = "".join(stamps).encode()
                stamps.clear()
            start_response("200 OK", [("Content-Length", str(len(body)))])  # type: ignore[operator]
            return [body]
        if method == "PUT":
            with lock:
                stamps.append(f"{t:.6f} {path}\n")
        return inner(self, environ, start_response)  # type: ignore[arg-type]

    radicale.app.Application.__call__ = call  # type: ignore[method-assign,assignment]
    sys.argv = [
        "radicale",
        "--server-hosts",
        f"127.0.0.1:{port}",
        "--storage-filesystem-folder",
        folder,
        "--auth-type",
        "none",
        "--rights-type",
        "authenticated",
        "--logging-level",
        "warning",
    ]
    run()


class Arrivals:
    """The bench's side: the stamped Radicale's base URL and its PUT arrivals."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url
        self._http = httpx.Client(timeout=10)

    def take(self) -> list[tuple[float, str]]:
        """The PUTs that arrived since the last ``take``: ``(perf_counter seconds, path)``."""
        r = self._http.post(self.base_url + _PATH)
        r.raise_for_status()
        out = []
        for line in r.text.splitlines():
            t, _, path = line.partition(" ")
            out.append((float(t), path))
        return out

    def close(self) -> None:
        """Close the bench's client."""
        self._http.close()


@contextlib.contextmanager
def start(folder: Path, port: int) -> Iterator[Arrivals]:
    """A stamped Radicale on ``127.0.0.1:port`` until the block ends."""
    folder.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [sys.executable, __file__, str(folder), str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"stamped radicale exited with {proc.returncode}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(base + "/", timeout=1).status_code < 500:
                    break
            if time.monotonic() > deadline:
                raise SystemExit("stamped radicale did not answer within 20 s")
            time.sleep(0.1)
        arrivals = Arrivals(base)
        try:
            yield arrivals
        finally:
            arrivals.close()
    finally:
        proc.terminate()
        proc.wait(10)


if __name__ == "__main__":
    _serve(sys.argv[1], sys.argv[2])
