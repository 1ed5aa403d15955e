"""Benchmark: each use case from chat text to its last external effect, over the public HTTP
API, on the stack ``countersign up --detach`` starts (throwaway data folder, free ports).

Per use case, n iterations:
- **text → card**: ``POST /v1/intents`` with the sentence until the answer with the signed plan,
  the read-only preview and the gates (what the card shows);
- **approve → last effect**: from the approve request of the last gate until the last external
  effect is observable at the sandbox provider (the human wait between gates excluded):
  meeting — both mails in the mailbox (after the two calendar events); shopping — the order at
  the shop and the receipt in the mailbox (gate-A's cart write is done before, untimed);
  visa — the booking at the visa service and the confirmation mail (the watcher has found the
  slot before; the approval goes to the running Temporal workflow).

Run: ``.venv/bin/python bench/bench_usecases.py [--n 20] [--out bench/results/usecases.md]``.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, summary

from countersign.kernel.process import free_port

USER = "bench@example.com"


def _until(check: Callable[[], bool], seconds: float = 60, step: float = 0.003) -> float:
    """Poll until ``check()``; the moment it first held (perf_counter)."""
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        if check():
            return time.perf_counter()
        time.sleep(step)
    raise TimeoutError("the effect never arrived")


class Run:
    def __init__(self, base: str, key: str, urls: dict[str, str]) -> None:
        self.api = httpx.Client(
            base_url=base, headers={"Authorization": f"Bearer {key}"}, timeout=60
        )
        self.side = httpx.Client(timeout=10)
        self.urls = urls

    def mails(self, subject: str) -> int:
        msgs = self.side.get(f"{self.urls['mailbox']}/messages").json()["messages"]
        return sum(1 for m in msgs if m["subject"] == subject)

    def state(self, name: str) -> dict[str, Any]:
        out: dict[str, Any] = self.side.get(f"{self.urls[name]}/_sandbox/state").json()
        return out

    def say(self, text: str) -> tuple[float, dict[str, Any]]:
        t0 = time.perf_counter()
        r = self.api.post("/v1/intents", json={"text": text})
        took = time.perf_counter() - t0
        assert r.status_code == 201, r.text
        return took, r.json()

    def approve(self, plan_id: str, gate: str, choice: Any = None) -> str:
        r = self.api.post(f"/v1/plans/{plan_id}/gates/{gate}/approve", json={"choice": choice})
        assert r.status_code == 200, r.text
        return str(r.json()["token"])

    def execute(self, plan_id: str, tokens: dict[str, str]) -> dict[str, Any]:
        r = self.api.post(f"/v1/plans/{plan_id}/execute", json={"tokens": tokens})
        assert r.status_code == 202, r.text
        out: dict[str, Any] = r.json()
        return out

    # ---- the three use cases ------------------------------------------------------------------
    def meeting(self, i: int) -> tuple[float, float]:
        title = f"Bench meeting {i}"
        took, body = self.say(
            f"schedule a 30 minute meeting with Alice and Bob within two weeks called {title}"
        )
        slot = body["preview"]["normalized"]["steps"]["3"]["slots"][0]["start"]
        end = (
            datetime.fromisoformat(slot.replace("Z", "+00:00")) + timedelta(minutes=30)
        ).strftime("%Y-%m-%dT%H:%M:%SZ")
        t0 = time.perf_counter()
        token = self.approve(body["plan_id"], "gate-A", {"start": slot, "end": end})
        assert self.execute(body["plan_id"], {"gate-A": token})["status"] == "completed"
        t1 = _until(lambda: self.mails(title) == 2)
        return took, t1 - t0

    def shopping(self, i: int) -> tuple[float, float]:
        took, body = self.say(
            "buy 1 usb cable under 30 euros and mail the receipt to bench@example.com"
        )
        plan_id = body["plan_id"]
        item = body["preview"]["normalized"]["steps"]["2"]["shortlist"][0]["item"]
        token = self.approve(plan_id, "gate-A", {"item": item})
        assert self.execute(plan_id, {"gate-A": token})["status"] == "waiting"
        orders = len(self.state("shop")["orders"])
        receipts = self.mails("Your order")
        t0 = time.perf_counter()
        token = self.approve(plan_id, "gate-B")
        assert self.execute(plan_id, {"gate-B": token})["status"] == "completed"
        t1 = _until(
            lambda: (
                len(self.state("shop")["orders"]) == orders + 1
                and self.mails("Your order") == receipts + 1
            )
        )
        return took, t1 - t0

    def visa(self, i: int) -> tuple[float, float]:
        took, body = self.say(
            "watch the lisbon consulate for a visa slot in march and mail me at bench@example.com"
        )
        plan_id = body["plan_id"]
        self.side.post(f"{self.urls['visa']}/_sandbox/slots")
        assert self.execute(plan_id, {})["status"] == "handed_off"

        def found() -> bool:
            items = self.api.get("/v1/audit", params={"plan_id": plan_id}).json()["items"]
            return any(e["kind"] == "watcher_polled" and e["status"] == "found" for e in items)

        _until(found, step=0.05)
        slot = [
            e
            for e in self.api.get("/v1/audit", params={"plan_id": plan_id}).json()["items"]
            if e["kind"] == "watcher_polled" and e["status"] == "found"
        ][-1]["details"]["found"]["slots"][0]["id"]
        bookings = len(self.state("visa")["bookings"])
        mails = self.mails("Visa appointment booked")
        t0 = time.perf_counter()
        for _ in range(200):  # the workflow turns to wait for the gate just after it found it
            r = self.api.post(
                f"/v1/plans/{plan_id}/gates/gate-A/approve", json={"choice": {"slot": {"id": slot}}}
            )
            if r.status_code == 200:
                break
            time.sleep(0.01)
        assert r.status_code == 200, r.text
        t1 = _until(
            lambda: (
                len(self.state("visa")["bookings"]) == bookings + 1
                and self.mails("Visa appointment booked") == mails + 1
            )
        )
        return took, t1 - t0


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--out", type=Path, default=Path("bench/results/usecases.md"))
    args = ap.parse_args()
    results: dict[str, tuple[list[float], list[float]]] = {}
    with tempfile.TemporaryDirectory(prefix="cs-bench-uc-") as tmp:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("COUNTERSIGN_") and k != "DATABASE_URL"
        }
        if cache := os.environ.get("COUNTERSIGN_CACHE_DIR"):
            env["COUNTERSIGN_CACHE_DIR"] = cache
        port = free_port()
        env |= {
            "COUNTERSIGN_HOME": str(Path(tmp) / "home"),
            "COUNTERSIGN_N8N_PORT": str(free_port()),
            "COUNTERSIGN_TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}",
            "COUNTERSIGN_SANDBOX_PORTS": "free",
        }
        cli = [sys.executable, "-m", "countersign.cli"]

        def run(*a: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [*cli, *a], capture_output=True, text=True, env=env, check=False, timeout=900
            )

        up = run("up", "--detach", "--port", str(port))
        try:
            if up.returncode != 0:
                raise SystemExit(f"countersign up failed:\n{up.stderr[-3000:]}")
            said = up.stdout + up.stderr
            line = re.search(r"sandbox ok: (.*)", said)
            assert line, said
            urls = dict(part.split(" ", 1) for part in line.group(1).split(", "))
            key = run("users", "add", USER).stdout.strip().splitlines()[-1]
            r = Run(f"http://127.0.0.1:{port}", key, urls)
            cases: dict[str, Callable[[int], tuple[float, float]]] = {
                "meeting": r.meeting,
                "shopping": r.shopping,
                "visa watcher": r.visa,
            }
            for name in cases:
                results[name] = ([], [])
            for i in range(args.n + 2):  # two warm-ups; interleaved so noise hits all alike
                for name, case in cases.items():
                    card, effect = case(i)
                    if i >= 2:
                        results[name][0].append(card * 1000)
                        results[name][1].append(effect * 1000)
        finally:
            run("down")
    rows = []
    for name, (cards, effects) in results.items():
        c50, c95 = summary(cards)
        e50, e95 = summary(effects)
        rows.append(f"| {name} | {c50:.1f} | {c95:.1f} | {e50:.1f} | {e95:.1f} |")
    report = (
        f"# Use cases from chat text, over the HTTP API — {machine()}\n\n"
        f"n = {args.n} per use case (after 2 warm-ups), interleaved; the stack from "
        "`countersign up`.\n\n"
        "| use case | text → card p50 ms | p95 | approve → last effect p50 ms | p95 |\n"
        "|---|---:|---:|---:|---:|\n" + "\n".join(rows) + "\n"
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(report)
    print(report)


if __name__ == "__main__":
    main()
