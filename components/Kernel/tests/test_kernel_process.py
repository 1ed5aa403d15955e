"""Pid files name the process they were written for: a pid the kernel has since given to another
process is not signalled (``countersign down`` or a test's teardown after a crash must never hit a
stranger's process group)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from countersign.kernel.process import alive, read_pid, spawn, stop_group


def _sleeper(tmp_path: Path) -> subprocess.Popen[bytes]:
    cmd = [sys.executable, "-c", "import time; time.sleep(60)"]
    return spawn(cmd, log=tmp_path / "s.log", pid_file=tmp_path / "s.pid")


def test_a_pid_file_names_its_process_and_stop_ends_it(tmp_path: Path) -> None:
    proc = _sleeper(tmp_path)
    pid_file = tmp_path / "s.pid"
    assert read_pid(pid_file) == proc.pid
    assert len(pid_file.read_text().split()) == 2  # the pid and its start time
    assert stop_group(pid_file, timeout_s=5)
    assert not alive(proc.pid)
    assert not pid_file.exists()


def test_a_reused_pid_is_not_signalled(tmp_path: Path) -> None:
    """The file's pid now belongs to another process (the same pid, another start time): the
    file names nobody, and stopping it signals nothing."""
    stranger = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)"], start_new_session=True
    )
    try:
        pid_file = tmp_path / "old.pid"
        pid_file.write_text(f"{stranger.pid} 1\n")  # started at tick 1: not this process
        assert read_pid(pid_file) is None
        assert not stop_group(pid_file, timeout_s=2)
        assert stranger.poll() is None, "a stranger's process was signalled"
    finally:
        stranger.kill()
        stranger.wait()


def test_a_pid_alone_is_taken_at_its_word(tmp_path: Path) -> None:
    """A file from before the start time was recorded: the pid as written."""
    pid_file = tmp_path / "legacy.pid"
    pid_file.write_text(f"{os.getpid()}\n")
    assert read_pid(pid_file) == os.getpid()
    pid_file.write_text("not a pid\n")
    assert read_pid(pid_file) is None
