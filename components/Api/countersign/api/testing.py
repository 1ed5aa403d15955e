"""Test seams (a pytest plugin loaded by the root conftest): serve an app on a free loopback port
with uvicorn in a thread (real HTTP, real SSE), and ``api``: the whole service on the real stack
(embedded Postgres, n8n, Radicale, aiosmtpd) with users alice, bob and an admin."""

from __future__ import annotations

import asyncio
import shutil
import socket
import threading
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn
from fastapi import FastAPI
from playwright.sync_api import Browser, Page, sync_playwright

from countersign.audit import AuditLog
from countersign.intake import Contact
from countersign.kernel import Policy, source_registry_dir
from countersign.n8n import N8nClient, N8nHandle
from countersign.n8n.keeping import SqliteExecutionStore
from countersign.registry import Registry
from countersign.registry.store import RegistryStore
from countersign.sandbox import SANDBOX_CONTACTS, Radicale, SmtpSink
from countersign.signer import KeyRing
from countersign.steps import N8nTransport, StepTransport
from countersign.storage import Database, ReadPool, libpq_url
from countersign.workflowbuilder import CredentialRef

from .app import create_app
from .config import ApiConfig
from .server import DEFAULT_READ_TIMEOUT_S, server_config
from .users import UserStore
from .wiring import Services, build_services

__all__ = [
    "ALICE",
    "BOB",
    "CHROMIUM_ARGS",
    "SANDBOX_PEOPLE",
    "ApiHarness",
    "api",
    "api_smtp_credential",
    "chromium",
    "harness",
    "meeting_body",
    "serve",
    "sign_in",
]

ALICE, BOB = "alice@example.com", "bob@example.com"
LOCAL = Policy(providers={"calendar": "caldav", "mail": "smtp", "chat": "slack"})
#: the contacts chat text may name in the tests: the sandbox's demo people (their calendars)
SANDBOX_PEOPLE = tuple(Contact(name, email) for name, email in SANDBOX_CONTACTS)


def meeting_body(
    title: str, *, day: int = 1, hours: float = 4, minutes: int = 30, hour: int = 13
) -> dict[str, Any]:
    """``POST /v1/intents`` for a meeting of Alice and Bob ``day`` days from now, in a window of
    ``hours`` from ``hour``:00 UTC."""
    start = datetime.now(UTC).replace(hour=hour, minute=0, second=0, microsecond=0)
    start += timedelta(days=day)
    return {
        "intent": {
            "intent": "schedule_meeting",
            "entities": {
                "participants": [ALICE, BOB],
                "duration_min": minutes,
                "title": title,
                "window_start": start.strftime("%Y-%m-%dT%H:%M:%SZ"),
                "window_end": (start + timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%M:%SZ"),
            },
        }
    }


def sign_in(page: Page, link: str) -> None:
    """Open a one-time login link in ``page`` and press its Sign in button (the link's GET spends
    nothing); returns when the chat page has loaded, its scripts run."""
    page.goto(link)
    with page.expect_navigation(wait_until="load"):
        page.get_by_role("button", name="Sign in").click()


#: Debian's chromium, headless and never reaching the network (as root it needs --no-sandbox)
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
]


@contextmanager
def chromium() -> Iterator[Browser]:
    """A headless Debian chromium driven by Playwright; ``make test`` installs both."""
    path = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(path).exists():
        pytest.fail(
            "Debian's chromium is missing: make test installs it (apt-get install chromium)"
        )
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=path, headless=True, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextmanager
def serve(
    app: FastAPI, *, port: int | None = None, read_timeout_s: float = DEFAULT_READ_TIMEOUT_S
) -> Iterator[str]:
    """Run ``app`` until the block ends, configured as ``countersign api`` serves it
    (``server.server_config``: the same protocol and edge); yields its base URL."""
    port = port or _free_port()
    config = server_config(app, host="127.0.0.1", port=port, read_timeout_s=read_timeout_s)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name=f"api-{port}", daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the API server did not start")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=15)


class ApiHarness:
    """The served API, a key per user, and the sandbox peers it writes to."""

    def __init__(
        self,
        base: str,
        keys: dict[str, str],
        services: Services,
        radicale: Radicale,
        smtp: SmtpSink,
    ) -> None:
        self.base, self.keys, self.services = base, keys, services
        self.db: Database = services.db
        self.radicale, self.smtp = radicale, smtp
        #: the served app (its routes, for tests that walk every one)
        self.app: FastAPI | None = None

    def client(self, user: str | None = ALICE, **kw: Any) -> httpx.Client:
        """An HTTP client authenticated as ``user`` (None: no credentials)."""
        headers = {"Authorization": f"Bearer {self.keys[user]}"} if user else {}
        return httpx.Client(base_url=self.base, headers=headers, timeout=60, **kw)

    def events_in_calendar(self) -> list[str]:
        """Events in Alice's sandbox calendar."""
        return self.radicale.events(ALICE)


@pytest.fixture(scope="session")
def api_smtp_credential(n8n: N8nHandle, smtp_server: SmtpSink) -> CredentialRef:
    """An n8n SMTP credential for the test mail server."""

    async def make() -> dict[str, Any]:
        async with N8nClient(n8n.base_url, n8n.api_key) as c:
            return await c.create_credential(
                "api smtp",
                "smtp",
                {
                    "host": smtp_server.host,
                    "port": smtp_server.port,
                    "secure": False,
                    "disableStartTls": True,
                    "user": "",
                    "password": "",
                },
            )

    return CredentialRef(id=str(asyncio.run(make())["id"]), name="api smtp")


@pytest.fixture
def api(
    n8n: N8nHandle,
    db: Database,
    registry: Registry,
    keyring: KeyRing,
    radicale: Radicale,
    smtp_server: SmtpSink,
    api_smtp_credential: CredentialRef,
) -> Iterator[ApiHarness]:
    """The API served over the real stack; empty calendars and mailbox."""
    with harness(n8n, db, registry, keyring, radicale, smtp_server, api_smtp_credential) as h:
        yield h


def _clock() -> datetime:
    return datetime.now(UTC)


def _empty(radicale: Radicale, smtp_server: SmtpSink) -> None:
    """Empty calendars for Alice and Bob, an empty mailbox."""
    for user in (ALICE, BOB):
        radicale.make_calendar(user)
        for name in radicale.events(user):
            httpx.delete(radicale.calendar_url(user) + name, timeout=5)
    smtp_server.messages.clear()


def _services(
    db: Database,
    registry: Registry,
    keyring: KeyRing,
    reads: ReadPool,
    connector_settings: dict[str, str],
    smtp_credential: CredentialRef,
) -> Services:
    """The services as the entry points build them, on the sandbox's people and providers."""
    audit = AuditLog(clock=_clock)
    return build_services(
        reads=reads,
        db=db,
        registry=registry,
        keyring=keyring,
        policy=LOCAL,
        connector_settings=connector_settings,
        credentials={"smtp": smtp_credential},
        clock=_clock,
        contacts=SANDBOX_PEOPLE,
        audit=audit,
        registry_store=RegistryStore(db, source_registry_dir(), audit, _clock),
    )


@contextmanager
def harness(
    n8n: N8nHandle,
    db: Database,
    registry: Registry,
    keyring: KeyRing,
    radicale: Radicale,
    smtp_server: SmtpSink,
    smtp_credential: CredentialRef,
    *,
    settings: dict[str, str] | None = None,
    temporal_connect: Any = None,
    payload_codec: Any = None,
    codec_origin: str | None = None,
    reconcile_every_s: float = 60.0,
    read_timeout_s: float = DEFAULT_READ_TIMEOUT_S,
    rate_limit_per_min: int = 600,
) -> Iterator[ApiHarness]:
    """Serve the API over these peers (``settings`` adds connector settings; ``temporal_connect``
    lets durable plans run on Temporal; ``payload_codec`` and ``codec_origin`` serve the codec
    endpoint for the Temporal UI at that origin; ``reconcile_every_s`` paces the recording of
    runs that ended outside Countersign; ``read_timeout_s`` the server's whole-request deadline;
    ``rate_limit_per_min`` 0 = none)."""
    _empty(radicale, smtp_server)
    dsn = libpq_url(db)
    reads = ReadPool.open(dsn)
    connector_settings = {
        "caldav_base_url": radicale.base_url,
        "smtp_from": "countersign@example.com",
        **(settings or {}),
    }
    services = _services(db, registry, keyring, reads, connector_settings, smtp_credential)
    services.memory.n8n_store = SqliteExecutionStore.of(n8n.data_dir)  # forget reaches n8n
    users = UserStore(db, clock=_clock, reads=reads)
    keys = {ALICE: users.add(ALICE), BOB: users.add(BOB), "root": users.add("root", admin=True)}

    @asynccontextmanager
    async def runtime() -> AsyncIterator[StepTransport]:
        async with N8nClient(n8n.base_url, n8n.api_key) as client:
            yield N8nTransport(client)

    config = ApiConfig(
        listen_dsn=dsn,
        runtime=runtime,
        sse_ping_s=1,
        temporal_connect=temporal_connect,
        payload_codec=payload_codec,
        codec_origin=codec_origin,
        reconcile_every_s=reconcile_every_s,
        rate_limit_per_min=rate_limit_per_min,
    )
    app = create_app(services, users, config)
    try:
        with serve(app, read_timeout_s=read_timeout_s) as base:
            harness = ApiHarness(base, keys, services, radicale, smtp_server)
            harness.app = app
            yield harness
    finally:
        reads.close()
