"""Pytest plugin: the sandbox providers as fixtures (loaded by the repository's ``conftest.py``).

- ``radicale``: a Radicale CalDAV server (no auth) with helpers to create calendars and count
  events (``.ics`` files) per calendar;
- ``smtp_server``: an aiosmtpd SMTP server that keeps every message it received;
- ``shop_sandbox``: a fresh sandbox shop.

Thin wrappers over this package's ``serve_*`` (Sandbox SPEC: the tests use the same providers a
newcomer runs; no second copy). The visa service's fixture, ``sandbox``, is the
DurableOrchestrator's (``countersign.durable.testing``), the one component that polls it.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from .caldav import Radicale, serve_radicale
from .mailbox import SmtpSink, serve_smtp
from .shop import ShopSandbox, serve_shop

__all__ = ["radicale", "shop_sandbox", "smtp_server"]


@pytest.fixture(scope="session")
def radicale(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Radicale]:
    """Radicale on a free loopback port, storage in a temp folder, no authentication."""
    with serve_radicale(tmp_path_factory.mktemp("radicale")) as server:
        yield server


@pytest.fixture(scope="session")
def smtp_server() -> Iterator[SmtpSink]:
    """An aiosmtpd server on a free loopback port."""
    with serve_smtp() as sink:
        yield sink


@pytest.fixture
def shop_sandbox() -> Iterator[ShopSandbox]:
    """A fresh sandbox shop on a free loopback port."""
    with serve_shop() as shop:
        yield shop
