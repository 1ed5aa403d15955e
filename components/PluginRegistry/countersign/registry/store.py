"""Registry files edited through the API, kept as revisions in the ``registry_docs`` table (the
store runs SQL: PluginRegistry SPEC "Edits through the API"). The API edits it; the durable worker
follows it (a plan signed against the newest registry verifies there without a restart), so both
read one effective registry.

Every accepted edit is a new revision of one file; the effective registry is the shipped folder
overlaid with the newest revision of each edited file. An edit is validated as part of the whole
registry it would produce (the registry's own errors, naming file and field) before it is stored,
so a stored revision always yields a valid registry. The new registry has a new version, so plans
signed before the edit are refused at preview and execute (``registry_changed``).

The database and the audit log come in as the two things the store uses of them (``Transactions``,
``AuditAppend``: Storage's ``Database`` and Audit's ``AuditLog`` are both), so the registry stays
on the floor every component builds on (PluginRegistry LLD "The edit store").
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal, Protocol

from sqlalchemy import text
from sqlalchemy.engine import Connection

from countersign.kernel import InputError

from .loader import Registry, read_documents, registry_from_documents

__all__ = ["AuditAppend", "RegistryKind", "RegistryStore", "Transactions"]

RegistryKind = Literal["connectors", "intents"]
_KEY = {"connectors": "id", "intents": "name"}
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")


class Transactions(Protocol):
    """A database the store runs its statements on (``countersign.storage.Database``)."""

    def tx(self) -> AbstractContextManager[Connection]:
        """One transaction: committed when the block ends, rolled back on an exception."""
        ...


class AuditAppend(Protocol):
    """The audit log an accepted edit is recorded in (``countersign.audit.AuditLog``)."""

    def append(self, conn: Connection, entry: Mapping[str, Any]) -> int:
        """Append one row inside the caller's transaction."""
        ...


@dataclass
class RegistryStore:
    """Revisions of API-edited registry files over a shipped registry folder."""

    db: Transactions
    folder: Path
    audit: AuditAppend
    clock: Callable[[], datetime]

    def _overlay(self, c: Connection) -> dict[tuple[str, str], tuple[int, Any]]:
        rows = c.execute(
            text(
                "SELECT DISTINCT ON (kind, name) kind, name, revision, document "
                "FROM registry_docs ORDER BY kind, name, revision DESC"
            )
        )
        return {(r.kind, r.name): (r.revision, r.document) for r in rows}

    def _build(self, overlay: Mapping[tuple[str, str], tuple[int, Any]]) -> Registry:
        connectors, intents = read_documents(self.folder)
        by_kind: dict[str, dict[str, Any]] = {"connectors": connectors, "intents": intents}
        for (kind, name), (rev, doc) in sorted(overlay.items()):
            docs = by_kind[kind]
            for source in [
                s for s, d in docs.items() if isinstance(d, Mapping) and d.get(_KEY[kind]) == name
            ]:
                del docs[source]
            docs[f"<api:{kind}/{name}@{rev}>"] = doc
        return registry_from_documents(connectors, intents)

    def current(self) -> Registry:
        """The effective registry (shipped files + the newest API revisions)."""
        with self.db.tx() as c:
            return self._build(self._overlay(c))

    def revision(self, kind: RegistryKind, name: str) -> int:
        """The newest API revision of a file (0: never edited through the API)."""
        with self.db.tx() as c:
            row = c.execute(
                text("SELECT max(revision) AS r FROM registry_docs WHERE kind = :k AND name = :n"),
                {"k": kind, "n": name},
            ).one()
        return int(row.r or 0)

    def put(
        self, kind: RegistryKind, name: str, document: Mapping[str, Any], *, author: str
    ) -> Registry:
        """Validate and store a new revision of one file; the registry it yields.

        Raises:
            RegistryFileError: the document (or the registry it would yield) is invalid; nothing
                is stored.
        """
        if not _NAME.match(name):
            raise InputError(f"{kind} name {name[:70]!r} is not valid (a-z, 0-9, '.', '_', '-')")
        doc = {**document}
        doc.setdefault(_KEY[kind], name)
        if doc[_KEY[kind]] != name:
            raise InputError(
                f"the document's {_KEY[kind]} {str(doc[_KEY[kind]])[:64]!r} is not {name!r} "
                "(the name in the path)"
            )
        with self.db.tx() as c:
            c.execute(text("LOCK TABLE registry_docs IN SHARE ROW EXCLUSIVE MODE"))
            overlay = self._overlay(c)
            rev = overlay.get((kind, name), (0, None))[0] + 1
            overlay[(kind, name)] = (rev, doc)
            registry = self._build(overlay)  # raises before anything is written
            c.execute(
                text(
                    "INSERT INTO registry_docs (kind, name, revision, document, author, "
                    "registry_version, created_at) VALUES (:k, :n, :r, CAST(:d AS jsonb), :a, :v, :t)"
                ),
                {
                    "k": kind,
                    "n": name,
                    "r": rev,
                    "d": json.dumps(doc, ensure_ascii=False),
                    "a": author,
                    "v": registry.version,
                    "t": self.clock(),
                },
            )
            self.audit.append(
                c,
                {
                    "kind": "registry_edited",
                    "status": "ok",
                    "actor": author[:128],
                    "op": f"{kind}/{name}"[:160],
                    "details": {"revision": rev, "registry_version": registry.version},
                },
            )
        return registry
