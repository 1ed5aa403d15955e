"""Pytest plugin: one embedded PostgreSQL (or ``DATABASE_URL``) for the whole run.

``pg_url`` (session): the database URL, migrated to head; the embedded server it started is
stopped when the session ends (no postgres process outlives the test run). ``db`` (per test): a ``Database`` on
it with every table emptied and the audit chain reset, so tests do not see each other's rows.
Because the fixture empties tables, it never uses ``DATABASE_URL`` (a developer's real database);
an external test database is opted into with ``COUNTERSIGN_TEST_DATABASE_URL``.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import pytest
from sqlalchemy import text

from .db import Database, embedded_server

__all__ = ["db", "pg_url"]

_TABLES = (
    "plan_library, outcomes, audit_log, idempotency_keys, gate_decisions, approval_tokens, "
    "plan_steps, plans, profile_prefs, consents, plan_events, login_links, api_sessions, api_users, "
    "registry_docs, conversation_turns, conversations, history_facts, memory_facts, contacts, "
    "gate_receipts, api_rate"
)


@pytest.fixture(scope="session")
def pg_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A PostgreSQL with pgvector, migrated; embedded unless COUNTERSIGN_TEST_DATABASE_URL is set."""
    external = os.environ.get("COUNTERSIGN_TEST_DATABASE_URL")
    with (
        contextlib.nullcontext(external)
        if external
        else embedded_server(tmp_path_factory.mktemp("pg"))
    ) as url:
        database = Database.from_url(url)
        database.dispose()
        yield url


@pytest.fixture
def db(pg_url: str) -> Iterator[Database]:
    """A migrated database with empty tables."""
    database = Database.from_url(pg_url, migrate=False)
    with database.tx() as c:
        c.execute(text(f"TRUNCATE {_TABLES} RESTART IDENTITY CASCADE"))
        c.execute(text("UPDATE audit_head SET seq = 0, last_hash = repeat('0', 64) WHERE id = 1"))
    yield database
    database.dispose()
