"""Several of each on this machine (issue 27 §3, §4): ``countersign up --scale`` starts two API
processes and two durable workers on one database and one Temporal server, and n8n in queue mode
(main + two workers + Redis, n8n's data on PostgreSQL). Through the public HTTP API only:

- meetings planned, approved and executed through both APIs at the same moment all complete, each
  write landing once at the sandbox providers (Radicale, the mailbox) and executed by the n8n
  workers, not the main process;
- a session signed in on one API is served by the other (sessions live in the database);
- the per-user rate limit is one budget across both APIs;
- a plan's event stream followed on one API resumes on the other with ``Last-Event-ID`` after the
  first is killed (SIGKILL): no event lost, none twice.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from countersign.kernel.process import free_port, read_pid

pytestmark = pytest.mark.slow
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

    def client(self, api: int, user: str) -> httpx.Client:
        auth = {"Authorization": f"Bearer {self.keys[user]}"}
        return httpx.Client(base_url=self.apis[api], headers=auth, timeout=120)

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


def _meeting(s: Scaled, api: int, pair: tuple[str, str], out: dict[str, Any]) -> None:
    user, partner = pair
    with s.client(api, user) as c:
        plan_id, choice = _plan(c, partner, f"Sync {api}")
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
