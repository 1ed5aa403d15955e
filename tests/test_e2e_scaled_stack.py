"""Several of each on this machine (issue 27 §3, §4): ``countersign up --scale`` starts two API
processes and two durable workers on one database and one Temporal server, and n8n in queue mode
(main + two workers + Redis, n8n's data on PostgreSQL). Through the public HTTP API only:

- meetings planned, approved and executed through both APIs at the same moment all complete, each
  write landing once at the sandbox providers (Radicale, the mailbox) and executed by the n8n
  workers, not the main process;
- the other use cases at the same moment, each crossing from one API to the other: shopping (two
  gates: gate-A on one API, gate-B on the other) buys once at the sandbox shop, and the n8n
  records of its settled writes are deleted; the visa watcher (durable: Temporal and the two
  workers) started on one API and approved on the other books once at the visa sandbox;
- an API in another place (its own data folder, no local n8n) reaches n8n, the database and
  Temporal by settings alone (``COUNTERSIGN_N8N_URL``, ``COUNTERSIGN_N8N_API_KEY``,
  ``COUNTERSIGN_N8N_DB_URL``, ``DATABASE_URL``) and serves a meeting; a wrong n8n URL or key
  stops it at start, naming the setting;
- a session signed in on one API is served by the other (sessions live in the database);
- the per-user rate limit is one budget across both APIs;
- a plan's event stream followed on one API resumes on the other with ``Last-Event-ID`` after the
  first is killed (SIGKILL): no event lost, none twice.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from countersign.kernel.process import alive, free_port, read_pid
from countersign.n8n.keeping import PostgresExecutionStore, execution_store, owner_plan
from countersign.planner.testing import until
from countersign.sandbox import sandbox_status
from countersign.storage.db import embedded_url

#: the module's first test also starts the whole scaled stack (minutes on a loaded 2-core machine)
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]
PEOPLE = [("sa@example.com", "sb@example.com"), ("sc@example.com", "sd@example.com")]


@dataclass
class Scaled:
    home: Path
    env: dict[str, str]
    apis: list[str] = field(default_factory=list)
    urls: dict[str, str] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)
    login: str = ""

    def cli(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "countersign.cli", *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=900,
            check=False,
        )

    def client(self, api: int | str, user: str) -> httpx.Client:
        """``user``'s client of API ``api`` (its index, or a base URL)."""
        auth = {"Authorization": f"Bearer {self.keys[user]}"}
        base = api if isinstance(api, str) else self.apis[api]
        return httpx.Client(base_url=base, headers=auth, timeout=120)

    def sandbox(self, name: str) -> dict[str, Any]:
        """The state of the sandbox shop or visa service (what the provider holds)."""
        state: dict[str, Any] = httpx.get(f"{self.urls[name]}/_sandbox/state", timeout=10).json()
        return state

    def mails(self, subject: str) -> list[dict[str, Any]]:
        got = httpx.get(f"{self.urls['mailbox']}/messages", timeout=10).json()["messages"]
        return [m for m in got if m["subject"] == subject]

    def events_of(self, user: str) -> int:
        r = httpx.request(
            "PROPFIND", f"{self.urls['caldav']}/{user}/calendar/", headers={"Depth": "1"}
        )
        return len(re.findall(r"\.ics</", r.text))


@pytest.fixture(scope="module")
def scaled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Scaled]:
    home = tmp_path_factory.mktemp("scaled") / "home"
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("COUNTERSIGN_") and k != "DATABASE_URL"
    }
    if cache := os.environ.get("COUNTERSIGN_CACHE_DIR"):
        env["COUNTERSIGN_CACHE_DIR"] = cache
    port = free_port()
    env |= {
        "COUNTERSIGN_HOME": str(home),
        "COUNTERSIGN_N8N_PORT": str(free_port()),
        "COUNTERSIGN_TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}",
        "COUNTERSIGN_SANDBOX_PORTS": "free",
    }
    s = Scaled(home, env)
    up = s.cli("up", "--detach", "--scale", "--port", str(port))
    try:
        said = up.stdout + up.stderr
        assert up.returncode == 0, said[-3000:]
        assert "queue mode, 2 workers" in said and "worker ok (2)" in said, said
        line = re.search(r"sandbox ok: (.*)", said)
        more = re.search(r"more APIs\s+(\S+)", said)
        login = re.search(r"sign in \(once\)\s+(\S+)", said)
        assert line and more and login, said
        s.urls = dict(part.split(" ", 1) for part in line.group(1).split(", "))
        s.apis = [f"http://127.0.0.1:{port}", more.group(1)]
        s.login = login.group(1)
        for pair in PEOPLE:
            for who in pair:
                httpx.request("MKCOL", f"{s.urls['caldav']}/{who}/")
                httpx.request("MKCALENDAR", f"{s.urls['caldav']}/{who}/calendar/")
            added = s.cli("users", "add", pair[0])
            assert added.returncode == 0, added.stderr
            s.keys[pair[0]] = added.stdout.strip().splitlines()[-1]
        yield s
    finally:
        down = s.cli("down")
        assert down.returncode == 0, down.stderr


def _plan(c: httpx.Client, partner: str, title: str) -> tuple[str, dict[str, str]]:
    first = c.post("/v1/intents", json={"text": f"set up a meeting with {partner} tomorrow"})
    assert first.status_code in (200, 201), first.text
    body = c.post(
        "/v1/intents",
        json={
            "text": f"30 minutes, called {title}",
            "conversation_id": first.json()["conversation_id"],
        },
    ).json()
    slot = body["preview"]["normalized"]["steps"]["3"]["slots"][0]
    end = datetime.fromisoformat(slot["start"].replace("Z", "+00:00")) + timedelta(minutes=30)
    return body["plan_id"], {"start": slot["start"], "end": end.strftime("%Y-%m-%dT%H:%M:%SZ")}


def _meeting(
    s: Scaled, api: int | str, pair: tuple[str, str], out: dict[str, Any], title: str = ""
) -> None:
    user, partner = pair
    with s.client(api, user) as c:
        plan_id, choice = _plan(c, partner, title or f"Sync {api}")
        token = c.post(f"/v1/plans/{plan_id}/gates/gate-A/approve", json={"choice": choice})
        done = c.post(
            f"/v1/plans/{plan_id}/execute", json={"tokens": {"gate-A": token.json()["token"]}}
        )
        out[user] = done.json()


def test_meetings_through_both_apis_at_once_write_once_on_the_n8n_workers(
    scaled: Scaled,
) -> None:
    before = {who: scaled.events_of(who) for pair in PEOPLE for who in pair}
    jobs = _worker_jobs(scaled.home)
    out: dict[str, Any] = {}
    threads = [
        threading.Thread(target=_meeting, args=(scaled, i, pair, out))
        for i, pair in enumerate(PEOPLE)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for user, _ in PEOPLE:
        assert out[user]["status"] == "completed", out[user]
    for pair in PEOPLE:
        for who in pair:
            assert scaled.events_of(who) == before[who] + 1, who
    mails = httpx.get(f"{scaled.urls['mailbox']}/messages").json()["messages"]
    for i, (user, partner) in enumerate(PEOPLE):
        sent = [m for m in mails if m["subject"] == f"Sync {i}"]
        assert sorted(m["to"] for m in sent) == sorted([user, partner])
    assert _worker_jobs(scaled.home) > jobs, "the executions ran on the n8n workers"


def _worker_jobs(home: Path) -> int:
    logs = sorted((home / "n8n").glob("n8n-worker-*.log"))
    assert len(logs) == 2
    return sum(p.read_text(errors="replace").count("Worker finished execution") for p in logs)


def test_a_session_from_one_api_is_served_by_the_other(scaled: Scaled) -> None:
    token = scaled.login.split("token=", 1)[1]
    with httpx.Client(base_url=scaled.apis[0], follow_redirects=False) as first:
        r = first.post(
            "/login",
            content=f"token={token}",
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        assert r.status_code in (302, 303), r.text
        cookies = dict(first.cookies)
    with httpx.Client(base_url=scaled.apis[1], cookies=cookies) as other:
        me = other.get("/v1/me")
        assert me.status_code == 200 and me.json()["user_id"] == "local", me.text


def _shopping(s: Scaled, user: str, out: dict[str, Any]) -> None:
    """Gate-A and the cart on API 0, gate-B and the purchase on API 1."""
    orders = len(s.sandbox("shop")["orders"])
    with s.client(0, user) as first, s.client(1, user) as second:
        body = first.post(
            "/v1/intents",
            json={"text": f"buy 2 usb cables under 30 euros and mail the receipt to {user}"},
        ).json()
        plan_id = out["shop_plan"] = body["plan_id"]
        assert body["gates"] == ["gate-A", "gate-B"], body
        pick = body["preview"]["normalized"]["steps"]["2"]["shortlist"][0]
        token = first.post(
            f"/v1/plans/{plan_id}/gates/gate-A/approve", json={"choice": {"item": pick["item"]}}
        ).json()["token"]
        waiting = first.post(f"/v1/plans/{plan_id}/execute", json={"tokens": {"gate-A": token}})
        assert waiting.json()["waiting_gate"] == "gate-B", waiting.text
        assert len(s.sandbox("shop")["orders"]) == orders  # nothing bought before gate-B
        token = second.post(f"/v1/plans/{plan_id}/gates/gate-B/approve", json={}).json()["token"]
        done = second.post(f"/v1/plans/{plan_id}/execute", json={"tokens": {"gate-B": token}})
        assert done.json()["status"] == "completed", done.text
    out["orders"] = len(s.sandbox("shop")["orders"]) - orders


def _visa(s: Scaled, user: str, out: dict[str, Any]) -> None:
    """Started on API 1 (handed to Temporal and the durable workers), approved on API 0."""
    bookings = len(s.sandbox("visa")["bookings"])
    with s.client(1, user) as first, s.client(0, user) as second:
        body = first.post(
            "/v1/intents",
            json={
                "text": f"watch the lisbon consulate for a visa slot in march and mail me at {user}"
            },
        ).json()
        plan_id = body["plan_id"]
        httpx.post(f"{s.urls['visa']}/_sandbox/slots", timeout=10)  # a slot is there now
        started = first.post(f"/v1/plans/{plan_id}/execute", json={"tokens": {}})
        assert started.json()["status"] == "handed_off", started.text

        def slot() -> str | None:
            items = second.get("/v1/audit", params={"plan_id": plan_id}).json()["items"]
            found = [e for e in items if e["kind"] == "watcher_polled" and e["status"] == "found"]
            return str(found[-1]["details"]["found"]["slots"][0]["id"]) if found else None

        slot_id = until(slot, 90, every=1.0)
        assert slot_id, second.get(f"/v1/plans/{plan_id}").json()
        ok = second.post(
            f"/v1/plans/{plan_id}/gates/gate-A/approve", json={"choice": {"slot": {"id": slot_id}}}
        )
        assert ok.status_code == 200, ok.text

        def status() -> bool:
            return bool(first.get(f"/v1/plans/{plan_id}").json()["status"] == "completed")

        assert until(status, 90, every=1.0), first.get(f"/v1/plans/{plan_id}").json()
    out["bookings"] = len(s.sandbox("visa")["bookings"]) - bookings


def _n8n_records_of(s: Scaled, plan_id: str) -> list[str]:
    """Ids of the n8n executions (with data) that ran for ``plan_id``."""
    base = f"http://127.0.0.1:{s.env['COUNTERSIGN_N8N_PORT']}"
    key = (s.home / "n8n" / "countersign-api-key").read_text().strip()
    got = httpx.get(
        f"{base}/api/v1/executions",
        params={"includeData": "true", "limit": 250},
        headers={"X-N8N-API-KEY": key},
        timeout=30,
    ).json()["data"]
    return [str(e["id"]) for e in got if owner_plan(e) == plan_id]


def test_shopping_and_the_visa_watcher_across_both_apis_at_once(scaled: Scaled) -> None:
    shopper, watcher = PEOPLE[0][0], PEOPLE[1][0]
    receipts = len(scaled.mails("Your order"))
    out: dict[str, Any] = {}
    failures: list[BaseException] = []

    def run(fn: Callable[[Scaled, str, dict[str, Any]], None], user: str) -> None:
        try:
            fn(scaled, user, out)
        except BaseException as e:  # the main thread reports it
            failures.append(e)

    threads = [
        threading.Thread(target=run, args=(_shopping, shopper)),
        threading.Thread(target=run, args=(_visa, watcher)),
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    if failures:
        raise failures[0]
    assert out["orders"] == 1 and scaled.sandbox("shop")["cart"] == []  # one purchase, once
    assert out["bookings"] == 1  # one booking, once
    assert len(scaled.mails("Your order")) == receipts + 1
    # the shopping plan's writes are settled: the APIs' passes delete their n8n records
    left = until(lambda: not _n8n_records_of(scaled, out["shop_plan"]), 40, every=2.0)
    assert left, _n8n_records_of(scaled, out["shop_plan"])


def _elsewhere(s: Scaled, home: Path, **n8n: str) -> dict[str, str]:
    """The environment of an API with its own data folder (no local n8n, no sandbox): the
    database, Temporal, the providers and n8n by settings (``n8n``: the COUNTERSIGN_N8N_*
    overrides), the payload and signing keys copied as a cluster mounts them."""
    shutil.copytree(s.home / "keys", home / "keys")
    db_url = embedded_url(s.home / "pg")
    store = execution_store(s.home / "n8n", queue_database_url=db_url)
    assert isinstance(store, PostgresExecutionStore)
    env = {k: v for k, v in s.env.items() if k not in {"COUNTERSIGN_HOME", "COUNTERSIGN_N8N_PORT"}}
    return env | {
        "COUNTERSIGN_HOME": str(home),
        "DATABASE_URL": db_url,
        "COUNTERSIGN_CONNECTOR_SETTINGS": json.dumps(sandbox_status(s.home)["connector_settings"]),
        "COUNTERSIGN_N8N_URL": f"http://127.0.0.1:{s.env['COUNTERSIGN_N8N_PORT']}",
        "COUNTERSIGN_N8N_API_KEY": (s.home / "n8n" / "countersign-api-key").read_text().strip(),
        "COUNTERSIGN_N8N_DB_URL": store.dsn,
        **n8n,
    }


def _api(env: dict[str, str], port: int, log: Path) -> subprocess.Popen[bytes]:
    with log.open("wb") as out:
        return subprocess.Popen(
            [sys.executable, "-m", "countersign.cli", "api", "--port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )


def test_an_api_elsewhere_reaches_n8n_by_its_settings_and_serves_a_meeting(
    scaled: Scaled, tmp_path: Path
) -> None:
    home = tmp_path / "elsewhere"
    env = _elsewhere(scaled, home)
    port, log = free_port(), tmp_path / "api.log"
    proc = _api(env, port, log)
    try:
        base = f"http://127.0.0.1:{port}"

        def n8n_ok() -> bool:
            if proc.poll() is not None:
                raise AssertionError(log.read_text(errors="replace")[-3000:])
            try:
                return bool(httpx.get(f"{base}/healthz", timeout=5).json()["n8n"] == "ok")
            except httpx.HTTPError:
                return False

        assert until(n8n_ok, 120, every=1.0), log.read_text(errors="replace")[-3000:]
        assert not (home / "n8n" / "n8n.pid").exists()  # no local n8n: the URL's
        # no local worker either: Temporal says whether workers poll the durable queue (a
        # readiness probe on /healthz would otherwise keep such an API out of service)
        health = httpx.get(f"{base}/healthz", timeout=10).json()
        assert not (home / "run" / "worker.pid").exists()
        assert health["worker"] == "ok" and health["status"] == "ok", health
        pair = PEOPLE[0]
        before = {who: scaled.events_of(who) for who in pair}
        out: dict[str, Any] = {}
        _meeting(scaled, base, pair, out, title="Elsewhere")
        assert out[pair[0]]["status"] == "completed", out
        for who in pair:
            assert scaled.events_of(who) == before[who] + 1, who
        assert sorted(m["to"] for m in scaled.mails("Elsewhere")) == sorted(pair)
    finally:
        proc.terminate()
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


@pytest.mark.parametrize(
    ("override", "named"),
    [
        ({"COUNTERSIGN_N8N_URL": f"http://127.0.0.1:{free_port()}"}, "COUNTERSIGN_N8N_URL"),
        ({"COUNTERSIGN_N8N_API_KEY": "not-the-key"}, "COUNTERSIGN_N8N_API_KEY"),
    ],
)
def test_a_wrong_n8n_url_or_key_stops_the_api_at_start_naming_it(
    scaled: Scaled, tmp_path: Path, override: dict[str, str], named: str
) -> None:
    env = _elsewhere(scaled, tmp_path / "elsewhere", **override)
    started = time.monotonic()
    run = subprocess.run(
        [sys.executable, "-m", "countersign.cli", "api", "--port", str(free_port())],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert run.returncode == 2, run.stdout + run.stderr
    assert named in run.stderr and "n8n" in run.stderr, run.stderr
    assert env[named] not in run.stderr or named == "COUNTERSIGN_N8N_URL"  # a key is never said
    assert time.monotonic() - started < 120


def test_the_rate_limit_is_one_budget_across_both_apis(scaled: Scaled) -> None:
    user = PEOPLE[1][0]
    statuses = []
    with scaled.client(0, user) as a, scaled.client(1, user) as b:
        for i in range(700):  # the default limit is 600 a minute per user
            statuses.append((a if i % 2 else b).get("/v1/me").status_code)
    assert statuses.count(429) > 0 and set(statuses) <= {200, 429}
    assert 560 <= statuses.count(200) <= 600, statuses.count(200)


def _sse(api: str, key: str, plan_id: str, after: int, stop: int) -> list[dict[str, Any]]:
    """Follow a plan's events from ``after`` until ``stop`` of them arrived."""
    events: list[dict[str, Any]] = []
    headers = {"Authorization": f"Bearer {key}", "Last-Event-ID": str(after)}
    with httpx.stream("GET", f"{api}/v1/plans/{plan_id}/events", headers=headers, timeout=60) as r:
        current: dict[str, Any] = {}
        for line in r.iter_lines():
            if line.startswith("id:"):
                current["seq"] = int(line[3:])
            elif line.startswith("data:"):
                current |= json.loads(line[5:])
            elif line == "" and "seq" in current:
                events.append(current)
                current = {}
                if len(events) >= stop:
                    break
    return events


def test_events_resume_on_the_other_api_after_one_is_killed(scaled: Scaled) -> None:
    user, partner = PEOPLE[0]
    with scaled.client(1, user) as c:
        plan_id, choice = _plan(c, partner, "Resumed")
        known = c.get(f"/v1/plans/{plan_id}/events", params={"follow": "false"}).text
        first_seen = len(re.findall(r"^id:", known, flags=re.M))
    seen = _sse(scaled.apis[0], scaled.keys[user], plan_id, 0, first_seen)
    pid = read_pid(scaled.home / "run" / "api.pid")
    assert pid is not None
    os.kill(pid, signal.SIGKILL)  # the first API dies; the stream continues on the second
    with scaled.client(1, user) as c:
        token = c.post(f"/v1/plans/{plan_id}/gates/gate-A/approve", json={"choice": choice})
        done = c.post(
            f"/v1/plans/{plan_id}/execute", json={"tokens": {"gate-A": token.json()["token"]}}
        )
        assert done.json()["status"] == "completed", done.text
        total = c.get(f"/v1/plans/{plan_id}/events", params={"follow": "false"}).text
    all_ids = [int(m) for m in re.findall(r"^id:\s*(\d+)", total, flags=re.M)]
    rest = _sse(
        scaled.apis[1], scaled.keys[user], plan_id, seen[-1]["seq"], len(all_ids) - len(seen)
    )
    seqs = [e["seq"] for e in seen + rest]
    assert seqs == list(range(1, len(all_ids) + 1)), seqs  # nothing lost, nothing twice
    assert "execute_finished" in [e["kind"] for e in rest]


#: every process of the scaled stack with a pid file ``up`` reads (relative to the home)
PID_FILES = {
    "api": "run/api.pid",
    "api-2": "run/api-2.pid",
    "worker": "run/worker.pid",
    "worker-2": "run/worker-2.pid",
    "n8n": "n8n/n8n.pid",
    "n8n-worker-0": "n8n/n8n-worker-0.pid",
    "n8n-worker-1": "n8n/n8n-worker-1.pid",
    "redis": "n8n/redis.pid",
    "temporal": "temporal/temporal.pid",
}
#: the sandbox providers: one set to ``up`` (named ``sandbox``)
SANDBOX = [f"sandbox/{n}.pid" for n in ("caldav", "mail", "shop", "visa")]


def _pids(home: Path) -> dict[str, int | None]:
    """Each process's pid while it runs (None: not running), PostgreSQL's postmaster included."""
    out: dict[str, int | None] = {}
    for name, rel in PID_FILES.items():
        pid = read_pid(home / rel)
        out[name] = pid if pid is not None and alive(pid) else None
    providers = [read_pid(home / rel) for rel in SANDBOX]
    whole = all(pid is not None and alive(pid) for pid in providers)
    out["sandbox"] = providers[0] if whole else None
    first = (home / "pg" / "postmaster.pid").read_text().split("\n", 1)[0]
    out["postgres"] = int(first) if alive(int(first)) else None
    return out


def _kill9(home: Path, name: str) -> None:
    """SIGKILL ``name``'s process group (n8n's task runners with it; ``sandbox``: the shop
    provider alone); returns once it is gone."""
    pid = read_pid(home / (PID_FILES[name] if name != "sandbox" else "sandbox/shop.pid"))
    assert pid is not None and alive(pid), name
    os.killpg(pid, signal.SIGKILL)
    assert until(lambda: not alive(pid), timeout=15), f"{name} outlived SIGKILL"


def _up_again(s: Scaled, kill: list[str], also: frozenset[str] = frozenset()) -> None:
    """SIGKILL ``kill``, run ``up`` again: it starts exactly the dead processes (``kill``, and the
    first API when the test before killed it) and ``also``, says so, and every other process keeps
    its pid."""
    for name in kill:
        _kill9(s.home, name)
    before = _pids(s.home)
    dead = {name for name, pid in before.items() if pid is None}
    assert set(kill) <= dead <= {*kill, "api"}, dead
    port = s.apis[0].rsplit(":", 1)[1]
    again = s.cli("up", "--detach", "--scale", "--port", port)
    said = again.stdout + again.stderr
    assert again.returncode == 0, said[-3000:]
    started = re.search(r"^started\s{2,}(.*)$", again.stdout, flags=re.M)
    assert started and set(started.group(1).split(", ")) == dead | also, said
    assert "already running" in again.stderr
    after = _pids(s.home)
    for name, pid in before.items():
        if name in dead | also:
            assert after[name] not in (None, pid), f"{name} was not started again"
        else:
            assert after[name] == pid, f"{name} was restarted: {pid} → {after[name]}"
    shown = s.cli("status")  # without --scale: every process a pid file names
    assert shown.returncode == 0, shown.stderr
    processes = json.loads(shown.stdout)["processes"]
    assert {"api-2", "worker-2", "redis", "n8n-worker-1"} <= set(processes), processes
    assert all(processes.values()), processes


def test_up_again_starts_only_what_died_and_leaves_the_rest_alone(scaled: Scaled) -> None:
    """A durable worker, an n8n queue worker, n8n's main process, the Temporal dev server and a
    sandbox provider SIGKILLed (and the first API, when the test before killed it): ``up`` run
    again starts exactly those (the sandbox as one set, on the ports the APIs and workers hold)
    and every other process keeps its pid. Redis SIGKILLed: ``up`` starts it and
    n8n's main process and workers again (they know only the old Redis's port), nothing else.
    Meetings then complete through both APIs."""
    _up_again(scaled, ["worker-2", "n8n-worker-0", "n8n", "temporal", "sandbox"])
    _up_again(scaled, ["redis"], also=frozenset({"n8n", "n8n-worker-0", "n8n-worker-1"}))
    out: dict[str, Any] = {}
    for i, pair in enumerate(PEOPLE):
        _meeting(scaled, i, pair, out, title=f"Again {i}")
        assert out[pair[0]]["status"] == "completed", out[pair[0]]
    assert len(scaled.mails("Again 0")) == 2
