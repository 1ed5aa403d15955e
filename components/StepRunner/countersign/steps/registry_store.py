"""Registry files edited through the API (runs SQL: a store). Lives on the StepRunner floor so
the API (which edits it) and the durable worker (which follows it: a plan signed against the
newest registry verifies there without a restart) read one effective registry.

Every accepted edit is a new revision of one file; the effective registry is the shipped folder
overlaid with the newest revision of each edited file. An edit is validated as part of the whole
registry it would produce (the registry's own errors, naming file and field) before it is stored,
so a stored revision always yields a valid registry. The new registry has a new version, so plans
signed before the edit are refused at preview and execute (``registry_changed``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Literal

from sqlalchemy import text
from sqlalchemy.engine import Connection

from countersign.audit import AuditLog
from countersign.kernel import InputError
from countersign.registry import Registry, read_documents, registry_from_documents
from countersign.storage import Database

__all__ = ["Kind", "RegistryStore"]

Kind = Literal["connectors", "intents"]
_KEY = {"connectors": "id", "intents": "name"}
_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]{0,63}$")


@dataclass
class RegistryStore:
    """Revisions of API-edited registry files over a shipped registry folder."""

    db: Database
    folder: Path
    audit: AuditLog
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

    def revision(self, kind: Kind, name: str) -> int:
        """The newest API revision of a file (0: never edited through the API)."""
        with self.db.tx() as c:
            row = c.execute(
                text("SELECT max(revision) AS r FROM registry_docs WHERE kind = :k AND name = :n"),
                {"k": kind, "n": name},
            ).one()
        return int(row.r or 0)

    def put(self, kind: Kind, name: str, document: Mapping[str, Any], *, author: str) -> Registry:
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
