"""All four sandbox providers as background processes for ``countersign up`` (and
``countersign sandbox up``): Radicale (CalDAV, demo calendars seeded), the SMTP server with its
mailbox page, the shop and the visa service, each on a loopback port, each with its log and pid
file in ``<data_dir>/sandbox/``; ``state.json`` there holds the ports. Starting again while they
run returns the running set; ``stop_sandbox`` stops what ``start_sandbox`` started
(Kernel ``process.py`` supervises them)."""

from __future__ import annotations

import json
import sys
from dataclasses import asdict, dataclass
from datetime import UTC, date, datetime
from pathlib import Path
from typing import Any

from countersign.kernel.process import (
    ServiceError,
    alive,
    port_open,
    read_pid,
    spawn,
    stop_group,
    wait_port,
)

from .caldav import Radicale, radicale_command, seed_demo_calendars
from .http import free_port

__all__ = [
    "DEFAULT_PORTS",
    "SERVICES",
    "SMTP_FROM",
    "SandboxHandle",
    "SandboxPorts",
    "sandbox_status",
    "start_sandbox",
    "stop_sandbox",
]

#: the processes, in start order (the mail process serves SMTP and the mailbox page)
SERVICES = ("caldav", "mail", "shop", "visa")
#: the sender address the sandbox implies for the ``smtp`` connector (``{@smtp_from}``)
SMTP_FROM = "countersign@example.com"
HOST = "127.0.0.1"


@dataclass(frozen=True)
class SandboxPorts:
    """The loopback ports of the providers (0: pick a free one at start)."""

    caldav: int = 5232
    smtp: int = 2525
    mailbox: int = 8025
    shop: int = 8091
    visa: int = 8092

    @classmethod
    def any_free(cls) -> SandboxPorts:
        """Every port picked at start (tests, or a machine where the defaults are taken)."""
        return cls(caldav=0, smtp=0, mailbox=0, shop=0, visa=0)

    def resolved(self) -> SandboxPorts:
        """Zeros replaced by free ports."""
        return SandboxPorts(**{k: v or free_port(HOST) for k, v in asdict(self).items()})


DEFAULT_PORTS = SandboxPorts()


@dataclass(frozen=True)
class SandboxHandle:
    """The running sandbox: where each provider answers and the connector settings they imply."""

    folder: Path
    ports: SandboxPorts

    @property
    def caldav_url(self) -> str:
        """Radicale's base URL (collections at ``<url>/<user>/calendar/``)."""
        return f"http://{HOST}:{self.ports.caldav}"

    @property
    def smtp_host(self) -> str:
        """The SMTP server's host."""
        return HOST

    @property
    def smtp_port(self) -> int:
        """The SMTP server's port."""
        return self.ports.smtp

    @property
    def mailbox_url(self) -> str:
        """The page listing received mail (JSON at ``/messages``)."""
        return f"http://{HOST}:{self.ports.mailbox}"

    @property
    def shop_url(self) -> str:
        """The sandbox shop."""
        return f"http://{HOST}:{self.ports.shop}"

    @property
    def visa_url(self) -> str:
        """The sandbox visa-appointment service."""
        return f"http://{HOST}:{self.ports.visa}"

    def radicale(self) -> Radicale:
        """The CalDAV server with its helpers."""
        return Radicale(base_url=self.caldav_url, folder=self.folder / "caldav")

    def connector_settings(self) -> dict[str, str]:
        """The ``{@name}`` settings of the registry's connectors that point at the sandbox
        (``caldav``, ``smtp``, ``shop.sandbox``, ``visa.sandbox``), and the mailbox the settling
        passes read."""
        return {
            "caldav_base_url": self.caldav_url,
            "smtp_host": self.smtp_host,
            "smtp_port": str(self.smtp_port),
            "smtp_from": SMTP_FROM,
            "shop_base_url": self.shop_url,
            "visa_base_url": self.visa_url,
            # the sandbox mailbox, read (never written) to settle a mail whose send was cut short
            "mailbox_url": self.mailbox_url,
        }

    def urls(self) -> dict[str, str]:
        """What ``countersign up`` prints."""
        return {
            "caldav": self.caldav_url,
            "smtp": f"{self.smtp_host}:{self.smtp_port}",
            "mailbox": self.mailbox_url,
            "shop": self.shop_url,
            "visa": self.visa_url,
        }

    def stop(self) -> list[str]:
        """Stop every provider (see ``stop_sandbox``)."""
        return _stop(self.folder)


def _folder(data_dir: Path) -> Path:
    return data_dir / "sandbox"


def _running(folder: Path) -> dict[str, bool]:
    return {
        name: (pid := read_pid(folder / f"{name}.pid")) is not None and alive(pid)
        for name in SERVICES
    }


def _handle_from_state(folder: Path) -> SandboxHandle | None:
    try:
        state = json.loads((folder / "state.json").read_text())
        return SandboxHandle(folder=folder, ports=SandboxPorts(**state["ports"]))
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _commands(
    folder: Path, ports: SandboxPorts, appear_after_s: float, appear_after_searches: int
) -> dict[str, list[str]]:
    me = [sys.executable, "-m", "countersign.sandbox"]
    return {
        "caldav": radicale_command(folder / "caldav", ports.caldav, host=HOST),
        "mail": [
            *me,
            "mail",
            "--smtp-port",
            str(ports.smtp),
            "--http-port",
            str(ports.mailbox),
            "--folder",
            str(folder / "mail"),
        ],
        "shop": [*me, "shop", "--port", str(ports.shop)],
        "visa": [
            *me,
            "visa",
            "--port",
            str(ports.visa),
            "--appear-after-s",
            str(appear_after_s),
            "--appear-after-searches",
            str(appear_after_searches),
        ],
    }


def _waits(ports: SandboxPorts) -> dict[str, list[int]]:
    return {
        "caldav": [ports.caldav],
        "mail": [ports.smtp, ports.mailbox],
        "shop": [ports.shop],
        "visa": [ports.visa],
    }


def start_sandbox(
    data_dir: Path,
    *,
    ports: SandboxPorts | None = None,
    first_day: date | None = None,
    appear_after_s: float = 30.0,
    appear_after_searches: int = 3,
    timeout_s: float = 30.0,
) -> SandboxHandle:
    """Start the four providers in the background (logs and pids in ``<data_dir>/sandbox/``),
    wait until each answers, seed the demo calendars with busy time from ``first_day`` (default:
    today, UTC) on. The visa service shows a watch (one consulate and window) its slot
    ``appear_after_s`` seconds after that watch first searched or at its
    ``appear_after_searches``-th search, whichever comes first. Already running from this
    folder: the running set is returned as it is.
    ``ServiceError`` (naming the log) when one cannot start; the others are then stopped."""
    folder = _folder(data_dir)
    folder.mkdir(parents=True, exist_ok=True)
    running = _running(folder)
    known = _handle_from_state(folder)
    if known is not None and all(running.values()):
        return known
    if any(running.values()):  # a partial set (one crashed): start clean
        _stop(folder)
    want = (ports or DEFAULT_PORTS).resolved()
    waits = _waits(want)
    for name, needed in waits.items():
        for port in needed:
            if port_open(port, HOST):
                raise ServiceError(
                    f"sandbox {name}: port {port} on {HOST} is taken by another program; "
                    "stop it or choose other ports"
                )
    handle = SandboxHandle(folder=folder, ports=want)
    try:
        for name, cmd in _commands(folder, want, appear_after_s, appear_after_searches).items():
            log = folder / f"{name}.log"
            proc = spawn(cmd, log=log, pid_file=folder / f"{name}.pid")
            for port in waits[name]:
                wait_port(port, proc, name=f"sandbox {name}", log=log, timeout_s=timeout_s)
        seed_demo_calendars(handle.radicale(), first_day or datetime.now(UTC).date())
    except BaseException:
        _stop(folder)
        raise
    (folder / "state.json").write_text(
        json.dumps({"ports": asdict(want), "urls": handle.urls()}, indent=2) + "\n"
    )
    return handle


def _stop(folder: Path) -> list[str]:
    stopped = [name for name in SERVICES if stop_group(folder / f"{name}.pid", timeout_s=10)]
    (folder / "state.json").unlink(missing_ok=True)
    return stopped


def stop_sandbox(data_dir: Path) -> list[str]:
    """Stop every provider ``start_sandbox`` started from ``data_dir``; the names that ran."""
    return _stop(_folder(data_dir))


def sandbox_status(data_dir: Path) -> dict[str, Any]:
    """Each provider: running or not, where it answers, its log."""
    folder = _folder(data_dir)
    handle = _handle_from_state(folder) or SandboxHandle(folder=folder, ports=DEFAULT_PORTS)
    running = _running(folder)
    urls = handle.urls()
    where = {"caldav": "caldav", "mail": "mailbox", "shop": "shop", "visa": "visa"}
    services = {
        name: {
            "running": running[name],
            "url": urls[where[name]],
            "log": str(folder / f"{name}.log"),
        }
        for name in SERVICES
    }
    services["mail"]["smtp"] = urls["smtp"]
    return {
        "running": all(running.values()),
        "services": services,
        "connector_settings": handle.connector_settings() if all(running.values()) else {},
    }
