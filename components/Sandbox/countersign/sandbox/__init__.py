"""Sandbox providers: real protocol peers and small labelled HTTP services on loopback, so a
newcomer runs every use case without any account, and tests run against the same peers.

- CalDAV: Radicale with demo calendars (``caldav``: ``Radicale``, ``start_radicale``,
  ``seed_demo_calendars``; busy time from ``core.demo_busy``);
- SMTP: aiosmtpd keeping every message, and the mailbox page (``mailbox``);
- the shop (``shop.ShopSandbox``) and the visa-appointment service (``visa.VisaSandbox``);
- all four as background processes (``stack.start_sandbox`` → ``SandboxHandle``) and
  ``countersign sandbox up|down|status`` (``cli.app``).

Every provider says it is a sandbox: a banner on its pages, ``"sandbox": true`` in its JSON.
"""

# Lazy (PEP 562): a name's module is imported on first use, so importing one light part of this
# package (an error class, a constant) does not load the rest (issue 28 §5: a CLI verb imports
# only what it uses). The names, and what they are, are those of the eager imports below.
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .caldav import Radicale, seed_demo_calendars, serve_radicale, start_radicale
    from .core import BANNER, DEMO_PEOPLE, BusyBlock, demo_busy
    from .http import free_port
    from .mailbox import SmtpSink, serve_mailbox, serve_smtp
    from .people import SANDBOX_CONTACTS
    from .shop import ShopSandbox, serve_shop
    from .stack import (
        DEFAULT_PORTS,
        SandboxHandle,
        SandboxPorts,
        sandbox_status,
        start_sandbox,
        stop_sandbox,
    )
    from .visa import VisaSandbox, serve_visa

__all__ = [
    "BANNER",
    "DEFAULT_PORTS",
    "DEMO_PEOPLE",
    "SANDBOX_CONTACTS",
    "BusyBlock",
    "Radicale",
    "SandboxHandle",
    "SandboxPorts",
    "ShopSandbox",
    "SmtpSink",
    "VisaSandbox",
    "demo_busy",
    "free_port",
    "sandbox_status",
    "seed_demo_calendars",
    "serve_mailbox",
    "serve_radicale",
    "serve_shop",
    "serve_smtp",
    "serve_visa",
    "start_radicale",
    "start_sandbox",
    "stop_sandbox",
]

#: each exported name -> the module (relative to this package) that defines it
_LAZY: dict[str, str] = {
    "Radicale": "caldav",
    "seed_demo_calendars": "caldav",
    "serve_radicale": "caldav",
    "start_radicale": "caldav",
    "BANNER": "core",
    "DEMO_PEOPLE": "core",
    "BusyBlock": "core",
    "demo_busy": "core",
    "free_port": "http",
    "SmtpSink": "mailbox",
    "serve_mailbox": "mailbox",
    "serve_smtp": "mailbox",
    "SANDBOX_CONTACTS": "people",
    "ShopSandbox": "shop",
    "serve_shop": "shop",
    "DEFAULT_PORTS": "stack",
    "SandboxHandle": "stack",
    "SandboxPorts": "stack",
    "sandbox_status": "stack",
    "start_sandbox": "stack",
    "stop_sandbox": "stack",
    "VisaSandbox": "visa",
    "serve_visa": "visa",
}

if not TYPE_CHECKING:
    from countersign.kernel import lazy_exports

    __getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
