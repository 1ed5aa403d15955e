"""The one supervisor for background services (n8n, the Temporal dev server, the sandbox
providers, the API): start detached in its own process group with a log and a pid file, wait for
a port, tell whether it runs, stop the whole group. Adapters to the OS live here once."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from .errors import CountersignError

__all__ = [
    "ServiceError",
    "alive",
    "free_port",
    "group_alive",
    "kill_group",
    "port_open",
    "read_pid",
    "spawn",
    "stop_group",
    "wait_port",
]


class ServiceError(CountersignError):
    """A background service could not start (names it and where its log is)."""

    code = "service_failed"
    retryable = True


def spawn(
    cmd: Sequence[str],
    *,
    log: Path,
    pid_file: Path,
    cwd: Path | None = None,
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[bytes]:
    """Start ``cmd`` detached (its own session and process group), stdout+stderr appended to
    ``log``, its pid in ``pid_file``; a daemon thread reaps it so it never lingers as a zombie."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with log.open("ab") as out:
        proc = subprocess.Popen(
            list(cmd),
            cwd=cwd,
            env=dict(env) if env is not None else None,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    started = _start_ticks(proc.pid)
    pid_file.write_text(f"{proc.pid} {started}\n" if started is not None else f"{proc.pid}\n")
    threading.Thread(target=proc.wait, daemon=True).start()
    return proc


def _start_ticks(pid: int) -> int | None:
    """When the process started (clock ticks since boot, ``/proc/PID/stat`` field 22), or None."""
    try:
        return int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19])
    except (OSError, IndexError, ValueError):
        return None


def read_pid(pid_file: Path) -> int | None:
    """The pid a pid file names, while that process is still the one the file was written for
    (None: no file, not a number, or the pid now names another process — pids are reused, and
    signalling a stale pid's group would hit a stranger). A file with the pid alone (written
    before the start time was recorded) is taken at its word."""
    try:
        fields = pid_file.read_text().split()
        pid = int(fields[0])
        recorded = int(fields[1]) if len(fields) > 1 else None
    except (OSError, ValueError, IndexError):
        return None
    if recorded is not None and _start_ticks(pid) not in (recorded, None):
        return None
    return pid


def alive(pid: int) -> bool:
    """Is the process there (a zombie is not)?"""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return True
    return state != "Z"


def group_alive(pgid: int) -> bool:
    """Is any process of the group still there (zombies aside)? Children can keep a service's
    listening socket open after its main process exited."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    for stat_file in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat_file.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != "Z":
            return True
    return False


def kill_group(pid: int, sig: int = signal.SIGTERM) -> None:
    """Signal a whole process group (gone already: nothing to do)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def stop_group(pid_file: Path, *, timeout_s: float = 15.0) -> bool:
    """SIGTERM the group a pid file names, SIGKILL after ``timeout_s``; returns once no process
    of it is left (its ports are free) and removes the pid file. True if it was running."""
    pid = read_pid(pid_file)
    if pid is None:
        pid_file.unlink(missing_ok=True)
        return False
    ran = alive(pid)
    kill_group(pid)
    deadline = time.monotonic() + timeout_s
    while group_alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    if group_alive(pid):
        kill_group(pid, signal.SIGKILL)
        deadline = time.monotonic() + 5
        while group_alive(pid) and time.monotonic() < deadline:
            time.sleep(0.05)
    pid_file.unlink(missing_ok=True)
    return ran


def free_port(host: str = "127.0.0.1") -> int:
    """A free TCP port on ``host`` (for servers that cannot bind port 0 themselves)."""
    with socket.socket() as s:
        s.bind((host, 0))
        port: int = s.getsockname()[1]
        return port


def port_open(port: int, host: str = "127.0.0.1") -> bool:
    """Does something accept connections on ``host:port``?"""
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex((host, port)) == 0


def wait_port(
    port: int, proc: subprocess.Popen[bytes], *, name: str, log: Path, timeout_s: float
) -> None:
    """Wait until ``port`` accepts connections; ``ServiceError`` naming the log if the process
    exits first or the time runs out."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ServiceError(f"{name} exited with {proc.returncode}; see {log}")
        if port_open(port):
            return
        time.sleep(0.1)
    raise ServiceError(f"{name} did not open port {port} within {timeout_s:.0f} s; see {log}")
