"""API users, their keys, browser sessions and one-time login links (runs SQL: a store).

A key, a session id and a login link are each 256 random bits shown once; only their sha256 is
stored, so a database dump lets nobody in. Looking one up is one indexed equality on the digest.
"""

from __future__ import annotations

import hashlib
import re
import secrets
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import text
from sqlalchemy.exc import IntegrityError

from countersign.kernel import InputError
from countersign.storage import Database, ReadPool
from countersign.storage.errors import StorageConstraintError

from .errors import AuthError, UnknownUserError, UserExistsError

__all__ = ["Principal", "UserStore", "digest"]

#: a user id: an e-mail address or a plain name (letters, digits, ``._@+-``), 1–128 characters
_USER_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$")
KEY_PREFIX = "cs_"
SESSION_TTL = timedelta(hours=12)
LINK_TTL = timedelta(minutes=15)
#: count one request of a user in this minute, forget minutes before the previous one, and
#: read the previous minute's count: one statement (UNLOGGED table api_rate, migration 0007)
_COUNT = """
WITH gone AS (DELETE FROM api_rate WHERE user_id = %(u)s AND minute < %(m)s - 1),
hit AS (
  INSERT INTO api_rate (user_id, minute, hits) VALUES (%(u)s, %(m)s, 1)
  ON CONFLICT (user_id, minute) DO UPDATE SET hits = api_rate.hits + 1
  RETURNING hits)
SELECT hit.hits AS now, coalesce((SELECT hits FROM api_rate
  WHERE user_id = %(u)s AND minute = %(m)s - 1), 0) AS before FROM hit
"""
#: an active key's user, one statement on the read pool
_KEY = "SELECT user_id, admin FROM api_users WHERE key_hash = %(h)s AND revoked_at IS NULL"


def digest(secret: str) -> str:
    """sha256 hex of a presented secret (what the tables store)."""
    return hashlib.sha256(secret.encode("utf-8")).hexdigest()


def _new_secret() -> str:
    return KEY_PREFIX + secrets.token_urlsafe(32)


@dataclass(frozen=True)
class Principal:
    """Who is calling: the user and how they proved it (``key`` or ``session``)."""

    user_id: str
    admin: bool
    via: str
    #: for a cookie session: the CSRF token its unsafe requests must echo
    csrf: str | None = None


@dataclass
class UserStore:
    """Users, keys, sessions and login links in Postgres."""

    db: Database
    clock: Callable[[], datetime]
    #: hot reads (a key lookup per request) on the read pool when given
    reads: ReadPool | None = None

    def add(self, user_id: str, *, admin: bool = False) -> str:
        """Create a user; returns the API key (shown once, stored hashed)."""
        if not _USER_ID.match(user_id):
            raise InputError(
                f"user name {user_id!r} is not valid: use 1-128 letters, digits or ._@+- "
                "(starting with a letter or digit)"
            )
        key = _new_secret()
        try:
            with self.db.tx() as c:
                c.execute(
                    text(
                        "INSERT INTO api_users (user_id, key_hash, admin, created_at) "
                        "VALUES (:u, :h, :a, :t)"
                    ),
                    {"u": user_id, "h": digest(key), "a": admin, "t": self.clock()},
                )
        except (IntegrityError, StorageConstraintError) as e:
            raise UserExistsError(f"user {user_id!r} already exists") from e
        return key

    def ensure(self, user_id: str, *, admin: bool = False) -> None:
        """Create ``user_id`` without a usable key if it does not exist (the local browser user)."""
        with self.db.tx() as c:
            c.execute(
                text(
                    "INSERT INTO api_users (user_id, key_hash, admin, created_at) "
                    "VALUES (:u, :h, :a, :t) ON CONFLICT (user_id) DO NOTHING"
                ),
                {"u": user_id, "h": digest(_new_secret()), "a": admin, "t": self.clock()},
            )

    def list(self) -> list[dict[str, Any]]:
        """Every user (never a key)."""
        with self.db.tx() as c:
            rows = c.execute(
                text(
                    "SELECT user_id, admin, created_at, revoked_at FROM api_users ORDER BY user_id"
                )
            ).mappings()
            return [dict(r) for r in rows]

    def revoke(self, user_id: str) -> None:
        """Revoke a user's key and end their sessions."""
        with self.db.tx() as c:
            hit = c.execute(
                text(
                    "UPDATE api_users SET revoked_at = :t WHERE user_id = :u AND revoked_at IS NULL"
                ),
                {"u": user_id, "t": self.clock()},
            ).rowcount
            c.execute(text("DELETE FROM api_sessions WHERE user_id = :u"), {"u": user_id})
        if not hit:
            raise UnknownUserError(f"no active user {user_id!r}")

    def count_request(self, user_id: str, minute: int) -> tuple[int, int]:
        """Count one request of ``user_id`` in wall-clock ``minute`` (shared by every API
        process); ``(this minute's count, the previous minute's)``. Needs the pool (autocommit:
        the counter is not part of any request's transaction)."""
        if self.reads is None:
            raise InputError("a shared rate limit needs the API's connection pool")
        row = self.reads.one(_COUNT, {"u": user_id, "m": minute})
        if row is None:  # the INSERT always returns its row; a driver that did not is a bug
            raise InputError("the rate counter returned nothing")
        return int(row["now"]), int(row["before"])

    def by_key(self, key: str) -> Principal:
        """The user a Bearer key belongs to."""
        if self.reads is not None:
            hit = self.reads.one(_KEY, {"h": digest(key)})
            if hit is None:
                raise AuthError("the API key is unknown or revoked")
            return Principal(user_id=hit["user_id"], admin=hit["admin"], via="key")
        with self.db.tx() as c:
            row = c.execute(
                text(
                    "SELECT user_id, admin FROM api_users "
                    "WHERE key_hash = :h AND revoked_at IS NULL"
                ),
                {"h": digest(key)},
            ).first()
        if row is None:
            raise AuthError("the API key is unknown or revoked")
        return Principal(user_id=row.user_id, admin=row.admin, via="key")

    def login_link(self, user_id: str) -> str:
        """A one-time secret for ``/login?token=…`` (15 minutes)."""
        secret = _new_secret()
        with self.db.tx() as c:
            c.execute(
                text(
                    "INSERT INTO login_links (link_hash, user_id, expires_at) VALUES (:h, :u, :e)"
                ),
                {"h": digest(secret), "u": user_id, "e": self.clock() + LINK_TTL},
            )
        return secret

    def redeem_link(self, secret: str) -> tuple[str, str]:
        """Spend a login link (once); returns ``(session_id, csrf)`` of a new session."""
        now = self.clock()
        session, csrf = _new_secret(), secrets.token_urlsafe(24)
        with self.db.tx() as c:
            row = c.execute(
                text(
                    "UPDATE login_links SET used_at = :t WHERE link_hash = :h AND used_at IS NULL "
                    "AND expires_at > :t RETURNING user_id"
                ),
                {"h": digest(secret), "t": now},
            ).first()
            if row is None:
                raise AuthError("the login link is unknown, used or expired")
            c.execute(
                text(
                    "INSERT INTO api_sessions (session_hash, user_id, csrf, created_at, expires_at)"
                    " VALUES (:h, :u, :c, :t, :e)"
                ),
                {
                    "h": digest(session),
                    "u": row.user_id,
                    "c": csrf,
                    "t": now,
                    "e": now + SESSION_TTL,
                },
            )
        return session, csrf

    def by_session(self, session: str) -> Principal:
        """The user a session cookie belongs to."""
        with self.db.tx() as c:
            row = c.execute(
                text(
                    "SELECT s.user_id, s.csrf, u.admin FROM api_sessions s "
                    "JOIN api_users u USING (user_id) WHERE s.session_hash = :h "
                    "AND s.expires_at > :t AND u.revoked_at IS NULL"
                ),
                {"h": digest(session), "t": self.clock()},
            ).first()
        if row is None:
            raise AuthError("the session is unknown or expired; open a new login link")
        return Principal(user_id=row.user_id, admin=row.admin, via="session", csrf=row.csrf)
