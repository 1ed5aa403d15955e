"""Pytest plugin: the sandbox providers (``countersign.sandbox``, their one home) as fixtures.

- ``radicale``: a Radicale CalDAV server (no auth) with helpers to create calendars and count
  events (``.ics`` files) per calendar.
- ``smtp_server``: an aiosmtpd SMTP server that keeps every message it received.
- ``shop_sandbox``: a fresh sandbox shop.

The classes are re-exported for older imports; new code imports them from ``countersign.sandbox``.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from countersign.sandbox import (
    Radicale,
    ShopSandbox,
    SmtpSink,
    serve_radicale,
    serve_shop,
    serve_smtp,
    start_radicale,
)

__all__ = [
    "Radicale",
    "ShopSandbox",
    "SmtpSink",
    "radicale",
    "shop_sandbox",
    "smtp_server",
    "start_radicale",
]


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
