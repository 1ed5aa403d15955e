"""Benchmark: calendar reads as people's calendars grow (issue 28 §1) — preview and staleness
re-check over calendars of 10, 1,000 and 10,000 events per attendee, the window query against
the whole-collection GET, in one run.

One process, one embedded PostgreSQL, one Radicale, one n8n. Per size, each of two attendees
holds N events (one in ten a weekly series, COUNT=26; plus one open-ended weekly series since
2030; the rest one-offs spread over five years around the window; a few inside the window),
written straight into Radicale's folder, then warmed (Radicale builds its item cache on the first
read). A fresh find_meeting_time plan (one day's 13:00–18:00 window) is signed per round; rounds
interleave the two registries:

- **window**: the registry as it is — ``caldav.list_free_busy`` is a ``calendar-query`` REPORT
  for the window; the re-check sends one etag-only query per calendar and keeps the preview's
  output when nothing changed (``execute.revalidate``);
- **GET**: the same registry with ``list_free_busy`` bound as before issue 28 (a GET of the whole
  collection, parsed and filtered here); the re-check reads everything again.

Clocks: *preview* = ``run_preview`` wall (verify, the two reads as one n8n batch execution, the
overlap in-process, fingerprints, the stored preview); *re-check* = what ``Views.check_stale``
does before the writes with nothing changed (``unchanged_reads`` then ``read_fresh`` of the rest
— window; ``read_fresh`` of every read — GET), wall. *Radicale* = a direct httpx REPORT (window)
or GET (collection) of one calendar, keep-alive: the server's own share.

Run: ``.venv/bin/python bench/bench_caldav_window.py [--n 15] [--sizes 10,1000,10000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import shutil
import tempfile
import time
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import yaml
from common import machine, summary

from countersign.binding.caldav import caldav_query
from countersign.execute.revalidate import unchanged_reads
from countersign.kernel import Intent, Plan, Policy, Settings, source_registry_dir, system_clock
from countersign.n8n import N8nClient, install, start, stop
from countersign.planner import make_plan
from countersign.preview import run_preview
from countersign.registry import Registry, load_registry
from countersign.sandbox import Radicale, start_radicale
from countersign.signer import KeyRing, sign_plan
from countersign.steps import N8nStepRunner, N8nTransport, StoreRecorder
from countersign.storage import Database, embedded_server

LOCAL = Policy(providers={"calendar": "caldav", "mail": "smtp", "chat": "slack"})
WINDOW = ("2037-11-23T13:00:00Z", "2037-11-23T18:00:00Z")
_OLD_OP = {
    "method": {"const": "GET"},
    "url": {"template": "{@caldav_base_url}/{user}/calendar/"},
    "options.response.response.responseFormat": {"const": "text"},
}


def _stamp(t: datetime) -> str:
    return t.strftime("%Y%m%dT%H%M%SZ")


def _vevent(uid: str, start: datetime, minutes: int, extra: str = "") -> str:
    return (
        "BEGIN:VCALENDAR\r\nVERSION:2.0\r\nPRODID:-//bench//EN\r\nBEGIN:VEVENT\r\n"
        f"UID:{uid}\r\nDTSTAMP:20300101T000000Z\r\nDTSTART:{_stamp(start)}\r\n"
        f"DTEND:{_stamp(start + timedelta(minutes=minutes))}\r\nSUMMARY:bench {uid}\r\n"
        f"{extra}END:VEVENT\r\nEND:VCALENDAR\r\n"
    )


def calendar(n: int, who: str) -> dict[str, str]:
    """``n`` events: one in ten a weekly series (COUNT=26), the rest one-offs over five years
    around the window, plus an open-ended weekly series since 2030 and two events in the
    window."""
    first = datetime(2035, 6, 1, tzinfo=UTC)
    out: dict[str, str] = {}
    for i in range(n):
        day = first + timedelta(days=(i * 7919) % 1826, hours=7 + (i * 31) % 11)
        uid = f"{who}-{i}"
        rule = "RRULE:FREQ=WEEKLY;COUNT=26\r\n" if i % 10 == 0 else ""
        out[uid] = _vevent(uid, day, 30 + (i % 4) * 15, rule)
    monday = datetime(2030, 1, 7, 9, tzinfo=UTC)
    out[f"{who}-standup"] = _vevent(f"{who}-standup", monday, 15, "RRULE:FREQ=WEEKLY\r\n")
    out[f"{who}-w1"] = _vevent(f"{who}-w1", datetime(2037, 11, 23, 13, 30, tzinfo=UTC), 30)
    out[f"{who}-w2"] = _vevent(f"{who}-w2", datetime(2037, 11, 23, 16, tzinfo=UTC), 45)
    return out


def old_registry(tmp: Path) -> Registry:
    """The registry with ``caldav.list_free_busy`` as a whole-collection GET (before issue 28)."""
    dest = tmp / "registry-get"
    shutil.copytree(source_registry_dir(), dest)
    path = dest / "connectors" / "caldav.yaml"
    doc = yaml.safe_load(path.read_text(encoding="utf-8"))
    doc["ops"]["list_free_busy"]["params"] = _OLD_OP
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return load_registry(dest)


def signed(registry: Registry, ring: KeyRing, i: int, people: list[str]) -> dict[str, Any]:
    intent = Intent.model_validate(
        {
            "intent": "find_meeting_time",
            "intent_id": f"01JDQ3Z0000000000000B{i:05d}",
            "received_at": datetime.now(UTC).replace(microsecond=0).isoformat()[:19] + "Z",
            "user_id": "organizer@example.com",
            "entities": {
                "participants": people,
                "duration_min": 30,
                "title": f"bench {i}",
                "window_start": WINDOW[0],
                "window_end": WINDOW[1],
            },
        }
    )
    plan = make_plan(intent, [], registry, LOCAL)
    if not isinstance(plan, Plan):
        raise SystemExit(f"no plan: {plan}")
    pid, key = ring.active()
    return sign_plan(plan, key=key, pubkey_id=pid, signer="planner@system").to_json()


def server_share(radicale: Radicale, user: str, rounds: int) -> dict[str, list[float]]:
    """Radicale's own time per request: the window's REPORT, the etag-only REPORT, the GET."""
    out: dict[str, list[float]] = {"report": [], "etags": [], "get": []}
    url = radicale.calendar_url(user)
    headers = {"Depth": "1", "Content-Type": "application/xml"}
    with httpx.Client(timeout=300) as c:
        for _ in range(rounds):
            for name, body in (("report", True), ("etags", False)):
                t0 = time.perf_counter()
                c.request("REPORT", url, content=caldav_query(*WINDOW, data=body), headers=headers)
                out[name].append((time.perf_counter() - t0) * 1000)
            t0 = time.perf_counter()
            c.get(url)
            out["get"].append((time.perf_counter() - t0) * 1000)
    return out


class Bench:
    """The servers and the two registries of one run."""

    def __init__(self, tmp: Path, db: Database, radicale: Radicale, ring: KeyRing) -> None:
        self.db, self.radicale, self.ring = db, radicale, ring
        self.registries = {"window": load_registry(source_registry_dir()), "GET": old_registry(tmp)}
        self.settings = {"caldav_base_url": radicale.base_url, "smtp_from": "cs@example.com"}
        self.count = 0

    async def round(
        self, transport: N8nTransport, path: str, people: list[str]
    ) -> tuple[float, float]:
        """One preview and one re-check (ms, ms) of a fresh plan on ``path``."""
        registry = self.registries[path]
        self.count += 1
        doc = signed(registry, self.ring, self.count, people)
        t0 = time.perf_counter()
        pv = await run_preview(
            doc,
            keys=self.ring,
            registry=registry,
            transport=transport,
            recorder=StoreRecorder(self.db, clock=system_clock),
            settings=self.settings,
            actor="organizer@example.com",
            now=system_clock(),
        )
        t1 = time.perf_counter()
        plan = Plan.model_validate(doc["plan"])
        runner = N8nStepRunner(
            plan=plan,
            plan_hash=doc["plan_hash"],
            registry=registry,
            transport=transport,
            settings=self.settings,
        )
        reads = sorted(pv.outputs)
        t2 = time.perf_counter()
        same = await unchanged_reads(runner, plan, reads, pv.outputs, {})
        rest = [n for n in reads if n not in same]
        fresh = {**same, **(await runner.read_fresh(rest, outputs=same) if rest else {})}
        t3 = time.perf_counter()
        if fresh != pv.outputs:
            raise SystemExit(f"{path}: the re-check differs from the preview")
        return (t1 - t0) * 1000, (t3 - t2) * 1000


def _row(label: str, samples: list[float]) -> str:
    med, p95 = summary(samples)
    return f"{label} | {med:.1f} | {p95:.1f}"


async def main_async(n: int, sizes: list[int]) -> None:
    tmp = Path(tempfile.mkdtemp(prefix="bench-caldav-"))
    cache = Path(os.environ.get("COUNTERSIGN_CACHE_DIR") or Settings().cache_dir)
    stack = contextlib.ExitStack()
    try:
        stack.callback(shutil.rmtree, tmp, True)
        handle = start(install(cache), tmp / "n8n")
        stack.callback(stop, tmp / "n8n")
        radicale, rproc = start_radicale(tmp / "radicale")
        stack.callback(rproc.wait, 10)
        stack.callback(rproc.terminate)
        url = stack.enter_context(embedded_server(tmp / "pg"))
        db = Database.from_url(url)
        stack.callback(db.dispose)
        ring = KeyRing.from_seed(os.urandom(32), pubkey_id="k1", created_at=datetime.now(UTC))
        bench = Bench(tmp, db, radicale, ring)
        results: dict[tuple[int, str], tuple[list[float], list[float]]] = {}
        server: dict[int, dict[str, list[float]]] = {}
        async with N8nClient(handle.base_url, handle.api_key) as client:
            transport = N8nTransport(client)
            for size in sizes:
                people = [f"alice{size}@example.com", f"bob{size}@example.com"]
                for who in people:
                    radicale.make_calendar(who)
                    radicale.store_events(who, calendar(size, who.split("@")[0]))
                server[size] = server_share(radicale, people[1], 2)  # warm Radicale's cache
                for path in ("window", "GET"):  # warm n8n's workflows
                    await bench.round(transport, path, people)
                rounds = n if size < 10_000 else max(5, n // 2)
                for path in ("window", "GET"):
                    results[(size, path)] = ([], [])
                for i in range(rounds):
                    order = ("window", "GET") if i % 2 == 0 else ("GET", "window")
                    for path in order:
                        pv, rc = await bench.round(transport, path, people)
                        results[(size, path)][0].append(pv)
                        results[(size, path)][1].append(rc)
                server[size] = server_share(radicale, people[1], rounds)
                print(f"size {size}: done ({rounds} rounds)", flush=True)
        print(f"\n{machine()}; n8n {handle.base_url}; {date.today()}\n")
        print("events/attendee | path | preview median ms | p95 | re-check median ms | p95")
        print("---|---|---|---|---|---")
        for (size, path), (pvs, rcs) in results.items():
            print(f"{size:,} | {path} | {_row('', pvs)[3:]} | {_row('', rcs)[3:]}")
        print("\nevents/attendee | Radicale: window REPORT | etag-only REPORT | GET (medians, ms)")
        print("---|---|---|---")
        for size, s in server.items():
            med = {k: summary(v)[0] for k, v in s.items()}
            print(f"{size:,} | {med['report']:.1f} | {med['etags']:.1f} | {med['get']:.1f}")
        print("\nratios (GET / window, medians): preview, re-check")
        for size in sizes:
            (wp, wr), (gp, gr) = results[(size, "window")], results[(size, "GET")]
            print(
                f"{size:,}: preview {summary(gp)[0] / summary(wp)[0]:.1f}x, "
                f"re-check {summary(gr)[0] / summary(wr)[0]:.1f}x"
            )
        base = summary(results[(sizes[0], "window")][0])[1]
        for size in sizes[1:]:
            p95 = summary(results[(size, "window")][0])[1]
            print(f"window preview p95 at {size:,} / at {sizes[0]:,}: {p95 / base:.2f}x")
    finally:
        stack.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=15)
    parser.add_argument("--sizes", default="10,1000,10000")
    args = parser.parse_args()
    asyncio.run(main_async(args.n, [int(s) for s in args.sizes.split(",")]))


if __name__ == "__main__":
    main()
