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
