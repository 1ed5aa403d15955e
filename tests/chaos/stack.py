"""The chaos harness over the whole stack ``countersign up --detach --scale`` starts (two APIs, two
durable workers, n8n main + two queue workers + Redis, the Temporal dev server, the embedded
PostgreSQL, the sandbox providers), driven through the public HTTP API only.

A run drives a use case and SIGKILLs one process of the stack at a random moment of it (the seed
decides which and when: ``random.Random(seed)``), starts that process again the way ``up`` started
it (the same command line, environment, working folder, log and pid file, read from ``/proc``
before the kill: ``up`` run again would find the stack running and start nothing unless the
first API is the one gone), lets the plan finish (the API's reconciler passes; the durable path
resumes on Temporal; the person's finish or undo when the plan asks for one) and checks the
invariants of ``tests/chaos/harness.py`` counted at the providers:

- ``twice``: at most one event per calendar per meeting UID, one mail per recipient per meeting,
  one booking per visa watcher (the visa sandbox's own list);
- ``half``: the meeting is in both calendars or in neither;
- ``stuck``: the plan ends terminal, or ``unknown`` (needs attention) with finish/undo offered —
  never ``running`` once the stack had the time to settle it;
- ``approval``: a terminal plan's gate ended ``passed`` or ``spent``;
- ``audit``: ``countersign audit verify`` passes on the stack's database;
- ``log``: a completed meeting has both events and both mails, a failed one no event left; a
  completed watcher booked once.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from countersign.api.core import ASKING, TERMINAL
from countersign.kernel.process import alive, free_port, read_pid, spawn

#: every process the chaos suite may kill, by name: where its pid is (relative to the home)
PROCESSES: dict[str, str] = {
    "api-1": "run/api.pid",
    "api-2": "run/api-2.pid",
    "worker-1": "run/worker.pid",
    "worker-2": "run/worker-2.pid",
    "n8n-main": "n8n/n8n.pid",
    "n8n-worker-1": "n8n/n8n-worker-0.pid",
    "n8n-worker-2": "n8n/n8n-worker-1.pid",
    "temporal": "temporal/temporal.pid",
    "postgres": "pg/postmaster.pid",
}


def kind_of(name: str) -> str:
    """``api-2`` → ``api``; ``n8n-worker-1`` → ``n8n-worker``."""
    return re.sub(r"-[0-9]+$", "", name)


@dataclass(frozen=True)
class Captured:
    """How a killed process was started (read from ``/proc`` before the kill)."""

    name: str
    cmd: list[str]
    env: dict[str, str]
    cwd: str
    log: Path


def _children(pid: int) -> list[int]:
    """Every descendant of ``pid`` (``/proc``'s parent links)."""
    parents: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, IndexError, ValueError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            parents.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for child in parents.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _capture(name: str, pid: int, home: Path) -> Captured:
    proc = Path(f"/proc/{pid}")
    cmd = proc.joinpath("cmdline").read_bytes().split(b"\0")[:-1]
    pairs = (e.split(b"=", 1) for e in proc.joinpath("environ").read_bytes().split(b"\0") if e)
    env = {k.decode(): v.decode() for k, v in pairs}
    log = Path(os.readlink(proc / "fd" / "1"))
    if not log.is_absolute() or not log.exists():
        log = home / "logs" / f"chaos-{name}.log"
    return Captured(name, [c.decode() for c in cmd], env, os.readlink(proc / "cwd"), log)


@dataclass
class ChaosStack:
    """The scaled stack of one ``COUNTERSIGN_HOME``."""

    home: Path
    env: dict[str, str]
    port: int
    apis: list[str] = field(default_factory=list)
    urls: dict[str, str] = field(default_factory=dict)
    keys: dict[str, str] = field(default_factory=dict)

    # ---- starting and stopping ----------------------------------------------------------------
    @classmethod
    @contextlib.contextmanager
    def up(cls, home: Path) -> Iterator[ChaosStack]:
        """``countersign up --detach --scale`` in ``home`` (its own ports); ``down`` after."""
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("COUNTERSIGN_") and k != "DATABASE_URL"
        }
        if cache := os.environ.get("COUNTERSIGN_CACHE_DIR"):
            env["COUNTERSIGN_CACHE_DIR"] = cache
        env |= {
            "COUNTERSIGN_HOME": str(home),
            "COUNTERSIGN_N8N_PORT": str(free_port()),
            "COUNTERSIGN_TEMPORAL_ADDRESS": f"127.0.0.1:{free_port()}",
            "COUNTERSIGN_SANDBOX_PORTS": "free",
        }
        s = cls(home, env, free_port())
        try:
            s._start()
            yield s
        finally:
            s.cli("down")

    def _start(self) -> None:
        up = self.cli("up", "--detach", "--scale", "--port", str(self.port))
        said = up.stdout + up.stderr
        if up.returncode != 0:
            raise RuntimeError(f"countersign up failed:\n{said[-3000:]}")
        line = re.search(r"sandbox ok: (.*)", said)
        more = re.search(r"more APIs\s+(\S+)", said)
        if not (line and more):
            raise RuntimeError(f"countersign up said:\n{said[-3000:]}")
        self.urls = dict(part.split(" ", 1) for part in line.group(1).split(", "))
        self.apis = [f"http://127.0.0.1:{self.port}", more.group(1)]

    def cli(self, *args: str, timeout_s: float = 900) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [sys.executable, "-m", "countersign.cli", *args],
            capture_output=True,
            text=True,
            env=self.env,
            timeout=timeout_s,
            check=False,
        )

    def user(self, who: str, partner: str) -> None:
        """A user with an API key, both calendars made at the CalDAV sandbox."""
        for person in (who, partner):
            httpx.request("MKCOL", f"{self.urls['caldav']}/{person}/", timeout=10)
            httpx.request("MKCALENDAR", f"{self.urls['caldav']}/{person}/calendar/", timeout=10)
        added = self.cli("users", "add", who)
        if added.returncode != 0:
            raise RuntimeError(added.stderr)
        self.keys[who] = added.stdout.strip().splitlines()[-1]

    def client(self, api: int, user: str, timeout_s: float = 120) -> httpx.Client:
        auth = {"Authorization": f"Bearer {self.keys[user]}"}
        return httpx.Client(base_url=self.apis[api], headers=auth, timeout=timeout_s)

    # ---- killing and restarting ----------------------------------------------------------------
    def pid_of(self, name: str) -> int | None:
        path = self.home / PROCESSES[name]
        if name == "postgres":  # postmaster.pid: the pid is its first line
            first = path.read_text().split("\n", 1)[0] if path.exists() else ""
            pid = int(first) if re.fullmatch(r"[0-9]+", first) else None
        else:
            pid = read_pid(path)
        return pid if pid is not None and alive(pid) else None

    def kill(self, name: str) -> Captured:
        """SIGKILL ``name`` (its process group; PostgreSQL: the postmaster and every backend);
        returns once nothing of it is left."""
        pid = self.pid_of(name)
        if pid is None:
            raise RuntimeError(f"{name} is not running")
        captured = _capture(name, pid, self.home)
        victims = [pid, *_children(pid)]
        if name != "postgres" and os.getpgid(pid) == pid:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        for v in victims:
            with contextlib.suppress(ProcessLookupError):
                os.kill(v, signal.SIGKILL)
        deadline = time.monotonic() + 15
        while any(_running(v) for v in victims) and time.monotonic() < deadline:
            time.sleep(0.05)
        return captured

    def restart(self, c: Captured) -> None:
        """Start the killed process again as it was started; wait until it serves."""
        if c.name == "postgres":  # as ``up`` starts it: the library, as its system user
            code = "import sys, pathlib; from countersign.storage.db import embedded_url; "
            code += "embedded_url(pathlib.Path(sys.argv[1]))"
            folder = c.cmd[c.cmd.index("-D") + 1]
            subprocess.run(
                [sys.executable, "-c", code, folder], env=self.env, timeout=120, check=True
            )
        else:
            spawn(
                c.cmd, log=c.log, pid_file=self.home / PROCESSES[c.name], cwd=Path(c.cwd), env=c.env
            )
        _READY[kind_of(c.name)](self, c)


def _running(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state != "Z"


def _until(check: Callable[[], bool], timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError, OSError):
            if check():
                return
        time.sleep(0.25)
    raise RuntimeError(f"{what} did not come back within {timeout_s:.0f} s")


def _api_ready(s: ChaosStack, c: Captured) -> None:
    port = c.cmd[c.cmd.index("--port") + 1]
    url = f"http://127.0.0.1:{port}/healthz"
    _until(lambda: httpx.get(url, timeout=3).status_code == 200, 90, c.name)


def _n8n_worker_ready(s: ChaosStack, c: Captured) -> None:
    url = f"http://127.0.0.1:{c.env['QUEUE_HEALTH_CHECK_PORT']}/healthz/readiness"
    _until(lambda: httpx.get(url, timeout=3).status_code == 200, 120, c.name)


def _n8n_main_ready(s: ChaosStack, c: Captured) -> None:
    url = f"http://127.0.0.1:{c.env['N8N_PORT']}/healthz/readiness"
    _until(lambda: httpx.get(url, timeout=3).status_code == 200, 120, c.name)


def _port_ready(flag: str) -> Callable[[ChaosStack, Captured], None]:
    def ready(s: ChaosStack, c: Captured) -> None:
        import socket

        port = int(c.cmd[c.cmd.index(flag) + 1])

        def accepts() -> bool:
            with socket.create_connection(("127.0.0.1", port), timeout=2):
                return True

        _until(accepts, 60, c.name)

    return ready


def _postgres_ready(s: ChaosStack, c: Captured) -> None:
    import psycopg

    folder = c.cmd[c.cmd.index("-D") + 1]

    def accepts() -> bool:
        try:
            with psycopg.connect(
                host=folder, user="postgres", dbname="postgres", connect_timeout=2
            ):
                return True
        except psycopg.OperationalError:
            return False

    _until(accepts, 180, c.name)  # crash recovery under load can take minutes


def _worker_ready(s: ChaosStack, c: Captured) -> None:
    time.sleep(2.0)  # a durable worker serves no port: give it the time to poll Temporal


_READY: dict[str, Callable[[ChaosStack, Captured], None]] = {
    "api": _api_ready,
    "worker": _worker_ready,
    "n8n-main": _n8n_main_ready,
    "n8n-worker": _n8n_worker_ready,
    "temporal": _port_ready("--port"),
    "postgres": _postgres_ready,
}


def plan_state(s: ChaosStack, user: str, plan_id: str) -> dict[str, Any]:
    """The plan as the first API that answers shows it."""
    last: Exception | None = None
    for api in range(len(s.apis)):
        try:
            with s.client(api, user, timeout_s=15) as c:
                r = c.get(f"/v1/plans/{plan_id}")
                if r.status_code == 200:
                    out: dict[str, Any] = r.json()
                    return out
                last = RuntimeError(f"{r.status_code} {r.text[:200]}")
        except httpx.HTTPError as e:
            last = e
    raise RuntimeError(f"no API shows plan {plan_id}: {last}")


# ---- the runs ------------------------------------------------------------------------------------
#: what a meeting's kill may hit (the durable workers take no part in an interactive execute)
MEETING_KILLS = (
    "api-1",
    "api-2",
    "n8n-main",
    "n8n-worker-1",
    "n8n-worker-2",
    "temporal",
    "postgres",
)
#: what a visa watcher's kill may hit (it books on a durable worker, through Temporal)
VISA_KILLS = (
    "api-1",
    "api-2",
    "worker-1",
    "worker-2",
    "n8n-worker-1",
    "n8n-worker-2",
    "temporal",
    "postgres",
)
#: how long the stack has to bring a cut plan to an end (the API's settle passes wait for 60 s of
#: quiet, then ask the person after 120 s; every 10 s)
SETTLE_DEADLINE_S = 200.0


@dataclass
class StackRun:
    """One run on the stack: what was killed when, how the plan ended, what broke."""

    seed: int
    usecase: str
    process: str
    kill_at_ms: int
    plan_id: str = ""
    request: str = ""
    person: str = ""
    final: str = ""
    violations: list[str] = field(default_factory=list)
    seconds: float = 0.0

    def line(self) -> str:
        v = "; ".join(self.violations) or "ok"
        return (
            f"seed={self.seed} {self.usecase} kill={self.process}@{self.kill_at_ms}ms "
            f"request={self.request} person={self.person or '-'} final={self.final} "
            f"{self.seconds:.0f}s plan={self.plan_id}: {v}"
        )


class Call:
    """An HTTP call in a thread of its own (the kill lands while it is in flight)."""

    def __init__(self, fn: Callable[[], httpx.Response]) -> None:
        import threading

        self.outcome = "-"
        self.body: dict[str, Any] = {}
        self._t = threading.Thread(target=self._run, args=(fn,), daemon=True)
        self._t.start()

    def _run(self, fn: Callable[[], httpx.Response]) -> None:
        try:
            r = fn()
        except httpx.HTTPError as e:
            self.outcome = type(e).__name__
            return
        with contextlib.suppress(ValueError):
            self.body = r.json()
        self.outcome = f"{r.status_code}:{self.body.get('status', self.body.get('code', ''))}"

    def join(self, timeout_s: float) -> str:
        self._t.join(timeout_s)
        return self.outcome if not self._t.is_alive() else "hanging"


def kill_during(s: ChaosStack, run: StackRun, call: Call) -> None:
    time.sleep(run.kill_at_ms / 1000)
    captured = s.kill(run.process)
    run.request = call.join(180)
    s.restart(captured)


def wait_settled(s: ChaosStack, user: str, plan_id: str, deadline_s: float) -> dict[str, Any]:
    """Poll until the plan is terminal, or asks the person (``needs_attention`` with an offer), or
    waits for one (``approved``/``waiting`` with no execute in flight); the last state seen."""

    start = time.monotonic()
    end = start + deadline_s
    state: dict[str, Any] = {}
    while time.monotonic() < end:
        with contextlib.suppress(RuntimeError):
            state = plan_state(s, user, plan_id)
            state["offers"] = _offers(s, user, plan_id) if state["status"] in ASKING else []
            if state["status"] in TERMINAL or state["offers"]:
                return state
            if (
                state["status"] in ("approved", "waiting", "previewed")
                and time.monotonic() > start + 10
            ):
                return state  # nothing in flight moves it: the person approves again
        time.sleep(2.0)
    return state


def _offers(s: ChaosStack, user: str, plan_id: str) -> list[str]:
    with s.client(0, user, timeout_s=30) as c:
        r = c.get(f"/v1/plans/{plan_id}/settlement")
    return list(r.json().get("offers", [])) if r.status_code == 200 else []


def gate_status(state: dict[str, Any], gate_id: str) -> str | None:
    """A gate's status as the plan's GET shows it."""
    for g in state.get("gates") or []:
        if g.get("gate_id") == gate_id:
            return str(g.get("status"))
    return None


def audit_ok(s: ChaosStack) -> str:
    """``countersign audit verify`` on the stack's database: "" or what it said."""
    done = s.cli("audit", "verify", timeout_s=120)
    return "" if done.returncode == 0 else (done.stdout + done.stderr)[-300:]


def post_setup(c: httpx.Client, path: str, body: dict[str, Any]) -> httpx.Response:
    """A setup call (before any kill), tried again for up to a minute while the API answers
    5xx or not at all (the last run's kill: an API restarting, a pool reconnecting)."""
    end = time.monotonic() + 60
    while True:
        try:
            r = c.post(path, json=body)
        except httpx.TransportError:
            if time.monotonic() > end:
                raise
        else:
            if r.status_code < 500 or time.monotonic() > end:
                return r
        time.sleep(2.0)
