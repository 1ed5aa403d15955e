"""Benchmark: the HTTP API over the real stack (embedded Postgres, n8n, Radicale, aiosmtpd).

In one run, interleaved per iteration so machine noise hits both sides alike:
- ``POST /v1/intents`` (plan, sign, store, preview on n8n) over HTTP vs. the same engine calls
  made directly (``Planning.plan`` + ``Runs.preview``): the API's own cost is the difference;
- approve → first external write: from the approve request to the calendar PUT arriving at the
  CalDAV server (a recording proxy in front of Radicale), through ``POST …/approve`` and
  ``POST …/execute``;
- state change → SSE event at a connected client (a ``plan_cancelled`` event);
- ``GET /v1/plans/{id}`` requests/s from a separate process (8 concurrent connections).

Run: ``.venv/bin/python bench/bench_api.py [--n 30]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
from aiosmtpd.controller import Controller

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, summary

from countersign.api import ApiConfig, Services, UserStore, build_services, create_app
from countersign.api.testing import serve
from countersign.kernel import Policy, Settings, source_registry_dir
from countersign.n8n import N8nClient, free_port, install, start, stop
from countersign.registry import load_registry
from countersign.sandbox import SmtpSink, start_radicale
from countersign.signer import KeyRing
from countersign.steps import N8nTransport, StepTransport
from countersign.storage import Database, ReadPool, embedded_server, libpq_url
from countersign.workflowbuilder import CredentialRef

ALICE, BOB = "alice@example.com", "bob@example.com"
LOCAL = Policy(providers={"calendar": "caldav", "mail": "smtp", "chat": "slack"})

LOAD = """
import asyncio, sys, time, httpx
base, key, path, secs = sys.argv[1], sys.argv[2], sys.argv[3], float(sys.argv[4])
async def worker(c, stop, n):
    while time.perf_counter() < stop:
        r = await c.get(path)
        assert r.status_code == 200, r.text
        n[0] += 1
async def main():
    n = [0]
    async with httpx.AsyncClient(base_url=base, headers={"Authorization": "Bearer " + key}) as c:
        await c.get(path)
        t0 = time.perf_counter()
        await asyncio.gather(*(worker(c, t0 + secs, n) for _ in range(8)))
        print(n[0] / (time.perf_counter() - t0))
asyncio.run(main())
"""


class Recorder:
    """A forwarding proxy in front of the CalDAV server that notes when each PUT arrives."""

    def __init__(self, upstream: str) -> None:
        self.upstream = upstream
        self.puts: list[float] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _forward(self) -> None:
                if self.command == "PUT":
                    outer.puts.append(time.perf_counter())
                body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
                headers = {
                    k: v
                    for k, v in self.headers.items()
                    if k.lower() not in {"host", "content-length"}
                }
                # the answer's bytes as the server sent them (still gzip-compressed when it says
                # Content-Encoding: gzip): forwarding the decoded body under the server's
                # Content-Encoding made clients fail to decode it (httpx: DecodingError)
                with httpx.stream(
                    self.command, outer.upstream + self.path, content=body, headers=headers
                ) as r:
                    raw = b"".join(r.iter_raw())
                self.send_response(r.status_code)
                for k, v in r.headers.multi_items():
                    if k.lower() not in {"content-length", "transfer-encoding", "connection"}:
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(raw)))
                self.end_headers()
                self.wfile.write(raw)

            do_GET = do_PUT = do_REPORT = do_PROPFIND = do_DELETE = do_MKCALENDAR = _forward  # noqa: N815

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}"


def meeting(title: str, day: int) -> dict[str, Any]:
    start = datetime.now(UTC).replace(hour=13, minute=0, second=0, microsecond=0) + timedelta(
        days=day
    )
    return {
        "intent": {
            "intent": "schedule_meeting",
            "entities": {
                "participants": [ALICE, BOB],
                "duration_min": 30,
                "title": title,
                "window_start": start.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "window_end": (start + timedelta(hours=5)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
        }
    }


def slot(preview: dict[str, Any]) -> dict[str, str]:
    s = preview["normalized"]["steps"]["3"]["slots"][0]
    start = datetime.fromisoformat(s["start"].replace("Z", "+00:00"))
    return {
        "start": s["start"],
        "end": (start + timedelta(minutes=30)).isoformat().replace("+00:00", "Z"),
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=30)
    n = ap.parse_args().n
    tmp = Path(tempfile.mkdtemp())
    cache = Path(os.environ.get("COUNTERSIGN_CACHE_DIR") or Settings().cache_dir)
    handle = start(install(cache), tmp / "n8n")
    radicale, rproc = start_radicale(tmp / "radicale")
    proxy = Recorder(radicale.base_url)
    smtp = SmtpSink(host="127.0.0.1", port=free_port())
    controller = Controller(smtp, hostname="127.0.0.1", port=smtp.port)
    controller.start()
    stack = contextlib.ExitStack()
    try:
        db = Database.from_url(stack.enter_context(embedded_server(tmp / "pg")))

        def clock() -> datetime:
            return datetime.now(UTC)

        async def cred() -> CredentialRef:
            async with N8nClient(handle.base_url, handle.api_key) as c:
                made = await c.create_credential(
                    "bench smtp",
                    "smtp",
                    {
                        "host": smtp.host,
                        "port": smtp.port,
                        "secure": False,
                        "disableStartTls": True,
                        "user": "",
                        "password": "",
                    },
                )
            return CredentialRef(id=str(made["id"]), name="bench smtp")

        dsn = libpq_url(db)
        reads = ReadPool.open(dsn)
        services = build_services(
            reads=reads,
            db=db,
            registry=load_registry(source_registry_dir()),
            keyring=KeyRing.from_seed(os.urandom(32), pubkey_id="k1", created_at=clock()),
            policy=LOCAL,
            connector_settings={"caldav_base_url": proxy.base_url, "smtp_from": "cs@example.com"},
            credentials={"smtp": asyncio.run(cred())},
            clock=clock,
        )
        users = UserStore(db, clock=clock, reads=reads)
        key = users.add(ALICE)
        for u in (ALICE, BOB):
            radicale.make_calendar(u)

        @contextlib.asynccontextmanager
        async def runtime() -> AsyncIterator[StepTransport]:
            async with N8nClient(handle.base_url, handle.api_key) as client:
                yield N8nTransport(client)

        app = create_app(
            services, users, ApiConfig(listen_dsn=dsn, runtime=runtime, rate_limit_per_min=0)
        )
        with serve(app) as base:
            run(base, key, services, proxy, n, handle)
    finally:
        stack.close()
        controller.stop()
        rproc.terminate()
        stop(tmp / "n8n")


def run(base: str, key: str, services: Services, proxy: Recorder, n: int, handle: Any) -> None:
    headers = {"Authorization": f"Bearer {key}"}
    http = httpx.Client(base_url=base, headers=headers, timeout=60)
    via_api, direct, approve_write, sse, own = [], [], [], [], []
    loop = asyncio.new_event_loop()

    async def open_direct() -> N8nClient:
        client = N8nClient(handle.base_url, handle.api_key)
        await client.__aenter__()
        return client

    direct_client = loop.run_until_complete(open_direct())
    direct_transport = N8nTransport(direct_client)

    async def engine(i: int) -> str:
        # the same service object, with its own runtime (the API's is bound to the server loop)
        saved = services.runtime.transport
        services.runtime.use_transport(direct_transport)
        try:
            intent = services.planning.intent_from(
                meeting(f"direct {i}", 1 + i % 5)["intent"], ALICE
            )
            doc = services.planning.plan(intent, ALICE)
            assert isinstance(doc, dict)
            await services.runs.preview(doc["plan"]["plan_id"], ALICE)
            return str(doc["plan"]["plan_id"])
        finally:
            services.runtime.use_transport(saved)

    # warm both paths (step workflows deployed once, connections open)
    http.post("/v1/intents", json=meeting("warm", 1)).raise_for_status()
    loop.run_until_complete(engine(-1))
    for i in range(n):
        t0 = time.perf_counter()
        r = http.post("/v1/intents", json=meeting(f"api {i}", 1 + i % 5))
        via_api.append((time.perf_counter() - t0) * 1000)
        engine_ms = float(r.headers["server-timing"].split("dur=")[1])
        own.append(via_api[-1] - engine_ms)
        assert r.status_code == 201 and r.json()["preview"], r.text
        body = r.json()
        t0 = time.perf_counter()
        previewed = loop.run_until_complete(engine(i))
        direct.append((time.perf_counter() - t0) * 1000)
        # approve → first external write
        plan_id = body["plan_id"]
        before = len(proxy.puts)
        t0 = time.perf_counter()
        tok = http.post(
            f"/v1/plans/{plan_id}/gates/gate-A/approve", json={"choice": slot(body["preview"])}
        )
        done = http.post(
            f"/v1/plans/{plan_id}/execute", json={"tokens": {"gate-A": tok.json()["token"]}}
        )
        assert done.status_code == 202 and done.json()["status"] == "completed", done.text
        approve_write.append((proxy.puts[before] - t0) * 1000)
        # state change → SSE event at a connected client: cancelling the plan the direct calls
        # just previewed (a completed plan cannot be cancelled: 409 plan_finished)
        sse.append(sse_latency(base, key, http, previewed))
    rps = float(
        subprocess.run(
            [sys.executable, "-c", LOAD, base, key, f"/v1/plans/{plan_id}", "5"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.strip()
    )
    rows = [
        ("POST /v1/intents → plan + preview (HTTP)", via_api),
        ("same engine calls, direct (plan, sign, store, preview)", direct),
        ("approve → first calendar write at the CalDAV server (HTTP)", approve_write),
        ("state change → SSE event at the client", sse),
    ]
    print(f"# bench_api — {machine()}; n={n}")
    for name, samples in rows:
        p50, p95 = summary(samples)
        print(f"{name}: p50 {p50:.1f} ms, p95 {p95:.1f} ms")
    diff = [a - d for a, d in zip(via_api, direct, strict=True)]
    p50, p95 = summary(diff)
    print(f"HTTP minus direct (paired, includes n8n noise): p50 {p50:.1f} ms, p95 {p95:.1f} ms")
    p50, p95 = summary(own)
    print(
        f"API's own time per POST /v1/intents (total - engine, per request): p50 {p50:.1f} ms, p95 {p95:.1f} ms"
    )
    print(f"GET /v1/plans/{{id}}: {rps:.0f} requests/s (8 connections, separate process)")
    out = Path(__file__).parent / "results" / "bench_api.json"
    out.write_text(
        json.dumps(
            {
                "machine": machine(),
                "n": n,
                "rps_get_plan": rps,
                "api_own_ms": summary(own),
                **{k: summary(v) for k, v in rows},
            },
            indent=1,
        )
    )


def sse_latency(base: str, key: str, http: httpx.Client, plan_id: str) -> float:
    got = threading.Event()
    ready = threading.Event()
    arrived: list[float] = []

    def listen() -> None:
        headers = {"Authorization": f"Bearer {key}"}
        with httpx.stream(
            "GET", f"{base}/v1/plans/{plan_id}/events", headers=headers, timeout=30
        ) as r:
            for line in r.iter_lines():
                if line.startswith(":") or line.startswith("id:"):
                    ready.set()
                if line == "event: plan_cancelled":
                    arrived.append(time.perf_counter())
                    got.set()
                    return

    t = threading.Thread(target=listen, daemon=True)
    t.start()
    ready.wait(10)
    time.sleep(0.05)
    t0 = time.perf_counter()
    http.post(f"/v1/plans/{plan_id}/cancel").raise_for_status()
    got.wait(10)
    return (arrived[0] - t0) * 1000 if arrived else float("nan")


if __name__ == "__main__":
    main()
