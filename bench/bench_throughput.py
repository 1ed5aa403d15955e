"""Benchmark: sustained plans per second end to end on the stack ``countersign up`` starts.

Each virtual user loops the meeting use case through the public HTTP API, as the chat page
drives it: a sentence (``POST /v1/intents`` text → a question), the answer (→ a signed plan and
its read-only preview on n8n), ``approve`` gate-A with the first offered slot, ``execute`` (two
calendar PUTs and two mails through n8n) — and one loop is one plan, counted when ``execute``
answers ``completed``. Every user meets a partner of their own (no calendar is shared, so the
resource locks do not serialize users). After a warm-up round the users run for ``--seconds``;
the figures are completed plans per second over that window and the per-plan latency (sentence
→ completed) median / p95, plus each stage's median.

Topologies (one run = one topology; compare runs made back to back):
- ``--apis 2``: a second API process on the same database, Temporal and n8n (started with the
  first one's environment); users alternate between them per plan;
- ``--n8n-workers 2``: n8n in queue mode (main + 2 workers + Redis, n8n's data on PostgreSQL).

Run: ``.venv/bin/python bench/bench_throughput.py [--users 8] [--seconds 60] [--apis 1]
[--n8n-workers 0] [--json out.json]``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, summary

from countersign.kernel.process import free_port, read_pid, stop_group, wait_port
from countersign.sandbox import Radicale

_EXE = [sys.executable, "-m", "countersign.cli"]


@dataclass
class Run:
    env: dict[str, str]
    home: Path
    apis: list[str] = field(default_factory=list)
    urls: dict[str, str] = field(default_factory=dict)

    def cli(self, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*_EXE, *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout,
            check=False,
        )


def _env(home: Path, n8n_workers: int) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("COUNTERSIGN_")}
    env.pop("DATABASE_URL", None)
    if cache := os.environ.get("COUNTERSIGN_CACHE_DIR"):
        env["COUNTERSIGN_CACHE_DIR"] = cache
    return env | {
        "COUNTERSIGN_HOME": str(home),
        "COUNTERSIGN_N8N_PORT": str(free_port()),
        "COUNTERSIGN_TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}",
        "COUNTERSIGN_SANDBOX_PORTS": "free",
        "COUNTERSIGN_N8N_WORKERS": str(n8n_workers),
    }


def _up(run: Run) -> None:
    port = free_port()
    up = run.cli("up", "--detach", "--port", str(port))
    said = up.stdout + up.stderr
    if up.returncode != 0:
        raise SystemExit(f"countersign up failed:\n{said[-3000:]}")
    line = re.search(r"sandbox ok: (.*)", said)
    if line is None:
        raise SystemExit(said)
    run.urls = dict(part.split(" ", 1) for part in line.group(1).split(", "))
    run.apis.append(f"http://127.0.0.1:{port}")


def _second_api(run: Run) -> None:
    """Another API process with the first one's environment (same database, Temporal, n8n)."""
    pid = read_pid(run.home / "run" / "api.pid")
    if pid is None:
        raise SystemExit("the first API's pid file is missing")
    raw = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    env = dict(p.decode().split("=", 1) for p in raw if b"=" in p)
    port = free_port()
    log = run.home / "logs" / "api-2.log"
    with log.open("ab") as out:
        proc = subprocess.Popen(
            [*_EXE, "api", "--port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    (run.home / "run" / "api-2.pid").write_text(f"{proc.pid}\n")
    wait_port(port, proc, name="the second API", log=log, timeout_s=90)
    run.apis.append(f"http://127.0.0.1:{port}")


def _users(run: Run, n: int) -> list[tuple[str, str, str]]:
    """``n`` (user, partner, API key), each with a calendar of their own."""
    caldav = Radicale(run.urls["caldav"], run.home / "sandbox")  # the folder is not read
    out = []
    for i in range(n):
        user, partner = f"tp{i}@example.com", f"tq{i}@example.com"
        added = run.cli("users", "add", user)
        if added.returncode != 0:
            raise SystemExit(added.stderr)
        caldav.make_calendar(user)
        caldav.make_calendar(partner)
        out.append((user, partner, added.stdout.strip().splitlines()[-1]))
    return out


@dataclass
class Tally:
    lock: threading.Lock = field(default_factory=threading.Lock)
    done: list[tuple[float, float, dict[str, float]]] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def _post(c: httpx.Client, path: str, body: dict[str, Any], stage: str) -> dict[str, Any]:
    r = c.post(path, json=body)
    if r.status_code >= 400:
        raise RuntimeError(f"{stage}: {r.status_code} {r.text[:300]}")
    out: dict[str, Any] = r.json()
    return out


def _one_plan(c: httpx.Client, partner: str, n: int) -> dict[str, float]:
    """One meeting from a sentence to completed; each stage's ms."""
    t: dict[str, float] = {}
    t0 = time.perf_counter()
    # a day further every 4 plans, so a user's afternoons never fill up
    day = (datetime.now(UTC) + timedelta(days=1 + n // 4)).strftime("%-d %B")
    first = _post(
        c, "/v1/intents", {"text": f"set up a meeting with {partner} on {day} afternoon"}, "ask"
    )
    t["sentence"] = time.perf_counter()
    body = _post(
        c,
        "/v1/intents",
        {"text": f"30 minutes, called Sync {n}", "conversation_id": first["conversation_id"]},
        "answer",
    )
    t["plan+preview"] = time.perf_counter()
    plan_id = body["plan_id"]
    slot = body["preview"]["normalized"]["steps"]["3"]["slots"][0]
    end = datetime.fromisoformat(slot["start"].replace("Z", "+00:00")) + timedelta(minutes=30)
    choice = {"start": slot["start"], "end": end.strftime("%Y-%m-%dT%H:%M:%SZ")}
    token = _post(c, f"/v1/plans/{plan_id}/gates/gate-A/approve", {"choice": choice}, "approve")
    t["approve"] = time.perf_counter()
    done = _post(c, f"/v1/plans/{plan_id}/execute", {"tokens": {"gate-A": token["token"]}}, "run")
    if done.get("status") != "completed":
        raise RuntimeError(f"execute: {done.get('status')}")
    t["execute"] = time.perf_counter()
    marks, prev = {}, t0
    for name, at in t.items():
        marks[name], prev = (at - prev) * 1000, at
    return marks


def _user_loop(apis: list[str], user: tuple[str, str, str], stop: float, tally: Tally) -> None:
    _, partner, key = user
    clients = [
        httpx.Client(base_url=a, headers={"Authorization": f"Bearer {key}"}, timeout=120)
        for a in apis
    ]
    n = 0
    try:
        while time.perf_counter() < stop:
            start = time.perf_counter()
            try:
                marks = _one_plan(clients[n % len(clients)], partner, n)
            except (RuntimeError, httpx.HTTPError, KeyError, IndexError) as e:
                with tally.lock:
                    tally.errors.append(str(e)[:200])
            else:
                with tally.lock:
                    tally.done.append((start, time.perf_counter(), marks))
            n += 1
    finally:
        for c in clients:
            c.close()


def _drive(run: Run, users: list[tuple[str, str, str]], seconds: float) -> Tally:
    tally = Tally()
    stop = time.perf_counter() + seconds
    threads = [threading.Thread(target=_user_loop, args=(run.apis, u, stop, tally)) for u in users]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return tally


def _report(tally: Tally, seconds: float, args: argparse.Namespace) -> dict[str, Any]:
    lat = [(end - start) * 1000 for start, end, _ in tally.done]
    p50, p95 = summary(lat) if lat else (0.0, 0.0)
    stages = {
        k: round(statistics.median(m[k] for _, _, m in tally.done), 1)
        for k in (tally.done[0][2] if tally.done else {})
    }
    return {
        "machine": machine(),
        "users": args.users,
        "apis": args.apis,
        "n8n_workers": args.n8n_workers,
        "seconds": seconds,
        "completed": len(tally.done),
        "plans_per_s": round(len(tally.done) / seconds, 2),
        "latency_ms_p50": round(p50, 1),
        "latency_ms_p95": round(p95, 1),
        "stage_ms_p50": stages,
        "errors": len(tally.errors),
        "first_errors": tally.errors[:5],
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--users", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--apis", type=int, choices=(1, 2), default=1)
    ap.add_argument("--n8n-workers", type=int, default=0)
    ap.add_argument("--json", type=Path)
    args = ap.parse_args()
    home = Path(tempfile.mkdtemp(prefix="cs-throughput-")) / "home"
    run = Run(_env(home, args.n8n_workers), home)
    try:
        _up(run)
        if args.apis == 2:
            _second_api(run)
        users = _users(run, args.users)
        warm = _drive(run, users, 1.0)  # one plan per user (each loop finishes its plan)
        if warm.errors:
            raise SystemExit(f"warm-up failed: {warm.errors[:3]}")
        out = _report(_drive(run, users, args.seconds), args.seconds, args)
    finally:
        stop_group(home / "run" / "api-2.pid")
        run.cli("down")
    print(json.dumps(out, indent=2))
    if args.json:
        args.json.write_text(json.dumps(out, indent=2) + "\n")


if __name__ == "__main__":
    main()
