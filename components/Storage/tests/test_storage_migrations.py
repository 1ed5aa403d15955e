"""Migrations: from empty, down and up again, and a newer database refused."""

from __future__ import annotations

import pytest
from sqlalchemy import text

from countersign.storage import Database, SchemaTooNewError


def test_upgrade_from_empty_then_round_trip(pg_url: str) -> None:
    # a separate database on the same server, so the shared one is untouched
    admin = Database.from_url(pg_url, migrate=False)
    with admin.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        c.execute(text("DROP DATABASE IF EXISTS migr_test"))
        c.execute(text("CREATE DATABASE migr_test"))
    url = admin.engine.url.set(database="migr_test").render_as_string(hide_password=False)
    admin.dispose()
    db = Database.from_url(url, migrate=False)
    assert db.current_revision() is None
    db.upgrade()
    assert db.current_revision() == db.head_revision()
    with db.tx() as c:
        assert c.execute(text("SELECT count(*) FROM audit_head")).scalar() == 1
        assert c.execute(
            text("SELECT extversion FROM pg_extension WHERE extname = 'vector'")
        ).scalar()
    db.downgrade("base")
    assert db.current_revision() is None
    with db.tx() as c:
        assert c.execute(text("SELECT to_regclass('plans')")).scalar() is None
    db.upgrade()
    assert db.current_revision() == db.head_revision()
    with db.tx() as c:
        c.execute(text("UPDATE alembic_version SET version_num = '9999_future'"))
    with pytest.raises(SchemaTooNewError, match="9999_future"):
        Database.from_url(url)
    db.dispose()


def test_0006_reads_step_counts_as_one_run(pg_url: str) -> None:
    admin = Database.from_url(pg_url, migrate=False)
    with admin.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as c:
        c.execute(text("DROP DATABASE IF EXISTS migr_runs"))
        c.execute(text("CREATE DATABASE migr_runs"))
    url = admin.engine.url.set(database="migr_runs").render_as_string(hide_password=False)
    admin.dispose()
    db = Database.from_url(url, migrate=False)
    db.upgrade("0005")
    counts = {"a": (5, 0), "b": (3, 1), "c": (0, 0), "d": (1, 0), "e": (0, 2)}
    with db.tx() as c:
        for pid, (ok, bad) in counts.items():
            c.execute(
                text(
                    "INSERT INTO plan_library (plan_id, user_id, intent, text, success_count, "
                    "failure_count, created_at) VALUES (:p, 'u', 'i', 't', :s, :f, now())"
                ),
                {"p": pid, "s": ok, "f": bad},
            )
    db.upgrade()
    with db.tx() as c:
        got: dict[str, str] = dict(
            c.execute(
                text("SELECT plan_id, (success_count, failure_count)::text FROM plan_library")
            ).all()
        )
    assert got == {"a": "(1,0)", "b": "(0,1)", "c": "(0,0)", "d": "(1,0)", "e": "(0,1)"}
    db.dispose()
