"""``status`` reads n8n's pid file the way ``kernel.process`` writes it (``<pid> <start time>``):
a stack started by ``countersign up`` is found running, a stale file is not."""

from __future__ import annotations

import signal
from pathlib import Path

from countersign.kernel.process import kill_group, spawn
from countersign.n8n import status


def test_status_reads_the_pid_file_spawn_writes(tmp_path: Path) -> None:
    proc = spawn(["sleep", "30"], log=tmp_path / "n8n.log", pid_file=tmp_path / "n8n.pid")
    try:
        assert len((tmp_path / "n8n.pid").read_text().split()) == 2
        assert status(tmp_path)["running"] is True
        assert status(tmp_path)["pid"] == proc.pid
    finally:
        kill_group(proc.pid, signal.SIGKILL)
        proc.wait()
    assert status(tmp_path)["running"] is False
    (tmp_path / "n8n.pid").write_text("not a pid\n")
    assert status(tmp_path) == {"running": False}
