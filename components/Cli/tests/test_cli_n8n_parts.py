"""``up`` run again starts n8n process by process (``countersign.cli.n8nstack``): which parts it
starts for each set of live and dead processes, decided from real pid files of real processes
(``sleep``, started and killed here). The starting functions are recorded, not run; the real stack
is ``tests/test_e2e_scaled_stack.py::test_up_again_starts_only_what_died_and_leaves_the_rest_alone``.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from countersign.cli import n8nstack
from countersign.kernel import Settings
from countersign.kernel.process import alive, spawn, stop_group

QUEUE = ("n8n", "redis", "n8n-worker-0", "n8n-worker-1")


@pytest.fixture
def data_dir(tmp_path: Path) -> Iterator[Path]:
    folder = tmp_path / "n8n"
    folder.mkdir()
    yield folder
    for pid_file in folder.glob("*.pid"):
        stop_group(pid_file, timeout_s=2)


def _processes(folder: Path, live: set[str], dead: set[str]) -> None:
    """A pid file per name: ``live`` ones name a running ``sleep``, ``dead`` ones a killed one."""
    for name in live | dead:
        proc = spawn(["sleep", "300"], log=folder / f"{name}.log", pid_file=folder / f"{name}.pid")
        if name in dead:
            proc.send_signal(signal.SIGKILL)
            proc.wait()


def _recorded(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """What ``ensure_n8n`` starts, in order (nothing is started)."""
    from countersign.n8n import queue, runtime

    calls: list[str] = []
    monkeypatch.setattr(queue, "start_configured", lambda *a, **k: calls.append("whole set"))

    def stop(*a: Any, **k: Any) -> bool:
        calls.append("stop all")
        return True

    monkeypatch.setattr(runtime, "stop", stop)
    monkeypatch.setattr(runtime, "install", lambda *a, **k: None)
    monkeypatch.setattr(runtime, "start", lambda *a, **k: calls.append("n8n"))
    monkeypatch.setattr(runtime, "handle_from", lambda *a, **k: None)
    monkeypatch.setattr(queue, "_redis", lambda *a, **k: 6379)

    def worker(inst: Any, main: Any, index: int, env: dict[str, str]) -> int:
        assert env["QUEUE_BULL_REDIS_PORT"] == "6379" and env["EXECUTIONS_MODE"] == "queue"
        calls.append(f"n8n-worker-{index}")
        return 0

    monkeypatch.setattr(queue, "_worker", worker)
    return calls


CASES = [
    ("everything runs: nothing started", set(), []),
    ("one queue worker died: that worker", {"n8n-worker-0"}, ["n8n-worker-0"]),
    ("the main process died: the main process", {"n8n"}, ["n8n"]),
    ("the main and a worker: both", {"n8n", "n8n-worker-1"}, ["n8n", "n8n-worker-1"]),
    ("Redis died: the whole set, the rest stopped first", {"redis"}, ["stop all", "whole set"]),
    ("nothing runs: the whole set", set(QUEUE), ["whole set"]),
]


@pytest.mark.parametrize(("why", "dead", "started"), CASES, ids=[c[0] for c in CASES])
def test_queue_mode_starts_only_the_dead_parts(
    data_dir: Path,
    monkeypatch: pytest.MonkeyPatch,
    why: str,
    dead: set[str],
    started: list[str],
) -> None:
    _processes(data_dir, set(QUEUE) - dead, dead)
    calls = _recorded(monkeypatch)
    noted: dict[str, bool] = {}
    settings = Settings(home=data_dir.parent, n8n_workers=2)
    n8nstack.ensure_n8n(
        settings,
        data_dir,
        database_url="postgresql://u:p@127.0.0.1:5432/countersign",
        note=noted.__setitem__,
    )
    assert calls == started, why
    whole = "whole set" in started
    assert noted == {name: whole or name in dead for name in QUEUE}, why


def test_one_process_mode_is_the_main_process_alone(
    data_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    settings = Settings(home=data_dir.parent, n8n_workers=0)
    assert list(n8nstack.n8n_processes(settings, data_dir)) == ["n8n"]
    _processes(data_dir, {"n8n"}, set())
    calls = _recorded(monkeypatch)
    noted: dict[str, bool] = {}
    n8nstack.ensure_n8n(settings, data_dir, database_url="", note=noted.__setitem__)
    assert (calls, noted) == ([], {"n8n": False})
    stop_group(data_dir / "n8n.pid", timeout_s=2)
    n8nstack.ensure_n8n(settings, data_dir, database_url="", note=noted.__setitem__)
    assert (calls, noted) == (["whole set"], {"n8n": True})


def test_a_pid_file_naming_a_reused_pid_is_a_dead_process(data_dir: Path) -> None:
    """The pid file's start ticks no longer match (the pid was reused): not running."""
    _processes(data_dir, {"n8n"}, set())
    pid_file = data_dir / "n8n.pid"
    pid, ticks = pid_file.read_text().split()
    assert alive(int(pid))
    pid_file.write_text(f"{pid} {int(ticks) + 1}\n")
    assert not n8nstack._running(pid_file)
    pid_file.write_text(f"{pid} {ticks}\n")


def test_up_counts_the_stack_as_running_only_when_an_api_or_a_worker_was() -> None:
    """PostgreSQL, n8n, Temporal and the sandbox also run from other commands (``db``,
    ``n8n up``, ``temporal up``, ``sandbox up``): ``up`` after them is a first start (the main
    job, the foreground); an API or a durable worker found running makes it a repair."""
    from countersign.cli.stack import Tally

    tally = Tally()
    for name in ("postgres", "n8n", "redis", "n8n-worker-0", "temporal", "sandbox"):
        tally.note(name, False)
    tally.note("worker", True)
    tally.note("api", True)
    assert not tally.was_running
    tally.note("api-2", False)
    assert tally.was_running
    assert tally.lines() == [
        "started          worker, api",
        "already up       postgres, n8n, redis, n8n-worker-0, temporal, sandbox, api-2",
    ]
