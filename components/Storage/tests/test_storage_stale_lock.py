"""A killed embedded PostgreSQL whose pid the kernel gave to another process must still start
again: its stale ``postmaster.pid`` is removed (never a live server's, never while a process of
the old server still works in the data folder)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from sqlalchemy import create_engine, text

from countersign.storage.db import clear_stale_lock, embedded_server, embedded_url, stop_embedded


def _sleeper(cwd: Path | None = None) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], cwd=cwd)


def test_a_stale_lock_naming_a_reused_pid_is_cleared_and_the_server_starts(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "pg"
    with embedded_server(folder):
        lines = (folder / "postmaster.pid").read_text().splitlines()
        assert not clear_stale_lock(folder)  # the live server's own lock stays
    stranger = _sleeper()
    try:
        # the server was SIGKILLed long ago and its pid now names the stranger
        lines[0], lines[2] = str(stranger.pid), str(int(lines[2]) - 1000)
        (folder / "postmaster.pid").write_text("\n".join(lines) + "\n")
        url = embedded_url(folder)
        engine = create_engine(url)
        with engine.connect() as c:
            assert c.execute(text("SELECT 1")).scalar_one() == 1
        engine.dispose()
        assert stranger.poll() is None
    finally:
        stop_embedded(folder)
        stranger.kill()
        stranger.wait()


def test_a_lock_is_kept_while_a_process_works_in_the_data_folder(tmp_path: Path) -> None:
    folder = tmp_path / "pg"
    folder.mkdir()
    stranger = _sleeper()
    backend = _sleeper(cwd=folder)  # as an orphaned backend of the killed server would
    try:
        (folder / "postmaster.pid").write_text(f"{stranger.pid}\n{folder}\n1000\n5432\n")
        assert not clear_stale_lock(folder)
        backend.kill()
        backend.wait()
        assert clear_stale_lock(folder)
        assert not (folder / "postmaster.pid").exists()
    finally:
        for p in (stranger, backend):
            p.kill()
            p.wait()
