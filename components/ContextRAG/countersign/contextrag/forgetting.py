"""The forget / export walk (ContextRAG SPEC §4–§5): which rows of which table are a person's,
and the statements that export, delete or redact them.

``USER_TABLES`` says, for every table that can hold a person's data, which rows are theirs;
:meth:`~countersign.contextrag.MemoryStore.forget` and ``export`` both walk it, so what is
forgotten is exactly what is exported (SPEC §4). The audit log is not deleted: the rows about the
person are *redacted* in place (SPEC §5) so the hash chain keeps verifying. Each function runs
on the caller's connection: a forget's deletes, its redaction and its audit rows are one
transaction.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Connection, text

from countersign.audit import AuditLog
from countersign.kernel import CountersignError

from .models import ForgetRequest

__all__ = [
    "ANONYMIZED",
    "FORGET_ACTOR",
    "USER_TABLES",
    "ForgetChangedError",
    "ForgetTargets",
    "anonymize_authors",
    "audit_forgotten",
    "check_expected",
    "delete_rows",
    "export_tables",
    "plan_ids",
    "redact_audit",
    "targets",
]

#: the audit actor of a forget (the person's id is never written by it)
FORGET_ACTOR = "system:memory"

_P = "plan_id = ANY(:p)"
#: table → the rows that are the person's (``:u`` the user id, ``:p`` their plan ids). A new
#: table that holds a user id must be added here (tests/test_memory_api.py walks
#: information_schema column by column after a forget and fails otherwise).
USER_TABLES: dict[str, str] = {
    "plans": "user_id = :u",
    "plan_steps": _P,
    "approval_tokens": f"user_id = :u OR {_P}",
    "gate_decisions": f"user_id = :u OR {_P}",
    "gate_receipts": f"user_id = :u OR {_P}",
    "plan_events": f"actor = :u OR {_P}",
    "outcomes": _P,
    "idempotency_keys": "split_part(key, ':', 1) = ANY(:p)",
    "plan_library": f"user_id = :u OR {_P}",
    "history_facts": f"user_id = :u OR {_P}",
    "profile_prefs": "user_id = :u",
    "consents": "user_id = :u",
    "memory_facts": "user_id = :u",
    "contacts": "user_id = :u",
    "conversation_turns": (
        "conversation_id IN (SELECT conversation_id FROM conversations WHERE user_id = :u)"
    ),
    "conversations": "user_id = :u",
    "login_links": "user_id = :u",
    "api_sessions": "user_id = :u",
    "api_rate": "user_id = :u",
    "api_users": "user_id = :u",
}
_ACCOUNT = {"api_users", "api_sessions", "login_links", "api_rate"}
_PLAN_KEYED = {
    "plan_steps",
    "approval_tokens",
    "gate_decisions",
    "gate_receipts",
    "plan_events",
    "outcomes",
    "plan_library",
    "history_facts",
    # a conversation that led to a plan naming the subject goes with the plan (turns cascade)
    "conversations",
}
#: tables whose rows about the person are kept but made anonymous (SPEC §5)
ANONYMIZED = {"audit_log": f"actor = :u OR {_P}", "registry_docs": "author = :u"}
#: columns never exported (hashes of secrets; the vector is exported as its text's source)
_NOT_EXPORTED = {"key_hash", "session_hash", "link_hash", "token_hash", "csrf", "embedding", "tsv"}
#: redacted seq ranges per ``memory_forgotten`` row (its details stay under 4 KB)
_RANGES_PER_ROW = 150


class ForgetChangedError(CountersignError):
    """The person's plans changed between erasing the runtime records and deleting the rows
    (a plan was made meanwhile): nothing was deleted; erase again."""

    code = "forget_changed"
    retryable = True


@dataclass(frozen=True)
class ForgetTargets:
    """What one forget takes (SPEC §4): ``scope`` (``all`` / ``subject``), ``plan_ids`` the
    plans taken wholly (with every runtime record of theirs), ``own_plan_ids`` every plan of the
    person (a runtime record is theirs when it holds one), ``subject`` (None for ``all``): a
    record of theirs that mentions it goes too."""

    scope: str
    plan_ids: tuple[str, ...]
    own_plan_ids: tuple[str, ...]
    subject: str | None


def plan_ids(c: Connection, user_id: str) -> list[str]:
    """Every plan id of the person."""
    return list(
        c.execute(text("SELECT plan_id FROM plans WHERE user_id = :u"), {"u": user_id}).scalars()
    )


def targets(c: Connection, user_id: str, req: ForgetRequest) -> tuple[list[str], list[str]]:
    """The plan ids a forget takes and the needles runtime records are searched for."""
    if req.all:
        p = plan_ids(c, user_id)
        return p, [user_id, *p]
    subject = req.subject or ""
    p = list(
        c.execute(
            text(
                "SELECT plan_id FROM plans t WHERE user_id = :u AND strpos(lower("
                "convert_from(canonical, 'UTF8') || t::text), lower(:s)) > 0"
            ),
            {"u": user_id, "s": subject},
        ).scalars()
    )
    return p, [subject, *p]


def check_expected(p: Sequence[str], expected: Collection[str] | None) -> None:
    """A forget may take only plans whose runtime records were erased before (SPEC §4)."""
    if expected is not None and not set(p) <= set(expected):
        raise ForgetChangedError(
            f"memory forget: {len(set(p) - set(expected))} plan(s) appeared after the "
            "runtime records were erased; erase again"
        )


def export_tables(c: Connection, user_id: str) -> dict[str, list[Any]]:
    """Every row of every table in ``USER_TABLES`` and ``ANONYMIZED`` that is the person's,
    hashes of secrets left out."""
    tables: dict[str, list[Any]] = {}
    p = plan_ids(c, user_id)
    for table, where in {**USER_TABLES, **ANONYMIZED}.items():
        rows = c.execute(
            text(f"SELECT to_jsonb(t) AS j FROM {table} t WHERE {where}"),  # noqa: S608 - fixed text
            {"u": user_id, "p": p},
        ).scalars()
        kept = [{k: v for k, v in r.items() if k not in _NOT_EXPORTED} for r in rows]
        if table == "plans":
            for r in kept:
                r.pop("canonical", None)  # the envelope holds the same plan
        tables[table] = kept
    return tables


def _delete_condition(table: str, where: str, req: ForgetRequest) -> str | None:
    """The ``WHERE`` of one table's delete (None: the table is kept)."""
    if req.all:
        return where
    if table in _ACCOUNT:
        return None  # forgetting a subject keeps the account
    if table == "plans":
        return f"user_id = :u AND {_P}"
    if table == "idempotency_keys":
        return where  # the keys of the plans naming the subject
    # a subject: any row of theirs naming the subject, and the plans naming it wholly
    cond = f"(({where}) AND strpos(lower(t::text), lower(:s)) > 0)"
    return cond + f" OR {_P}" if table in _PLAN_KEYED else cond


def delete_rows(c: Connection, req: ForgetRequest, params: Mapping[str, Any]) -> dict[str, int]:
    """Delete the forget's rows, table by table in ``USER_TABLES`` order; rows per table."""
    counts: dict[str, int] = {}
    for table, where in USER_TABLES.items():
        cond = _delete_condition(table, where, req)
        if cond is None:
            continue
        n = c.execute(
            text(f"DELETE FROM {table} t WHERE {cond}"),  # noqa: S608 - fixed text
            params,
        ).rowcount
        if n:
            counts[table] = n
    return counts


def redact_audit(c: Connection, req: ForgetRequest, params: Mapping[str, Any]) -> list[int]:
    """Redact the audit rows about the person (or the subject) in place (SPEC §5); their seqs."""
    audit_where = (
        ANONYMIZED["audit_log"]
        if req.all
        else (f"{_P} OR (actor = :u AND strpos(lower(t::text), lower(:s)) > 0)")
    )
    return list(
        c.execute(
            text(
                "UPDATE audit_log t SET actor = 'forgotten', reason = NULL, "  # noqa: S608 - fixed text
                "details = '{\"redacted\": true}'::jsonb, redacted = true "
                f"WHERE ({audit_where}) RETURNING seq"
            ),
            params,
        ).scalars()
    )


def anonymize_authors(c: Connection, params: Mapping[str, Any], counts: dict[str, int]) -> None:
    """A forget of everything: the registry revisions the person authored name no one."""
    n = c.execute(
        text("UPDATE registry_docs SET author = 'forgotten' WHERE author = :u"),
        params,
    ).rowcount
    if n:
        counts["registry_docs (author anonymized)"] = n


def audit_forgotten(
    c: Connection,
    audit: AuditLog,
    *,
    scope: str,
    counts: Mapping[str, int],
    erased: Mapping[str, int | None] | None,
    redacted: Sequence[int],
) -> None:
    """The ``memory_forgotten`` rows: scope, row counts, the runtime records erased before and
    the redacted seqs as ranges — never the user id or the subject (SPEC §5)."""
    ranges = _ranges(redacted)
    for i in range(0, max(1, len(ranges)), _RANGES_PER_ROW):
        audit.append(
            c,
            {
                "kind": "memory_forgotten",
                "status": "ok",
                "actor": FORGET_ACTOR,
                "details": {
                    "scope": scope,
                    "deleted": dict(sorted(counts.items())) if i == 0 else {},
                    **({"erased": dict(sorted((erased or {}).items()))} if i == 0 else {}),
                    "redacted_seqs": ranges[i : i + _RANGES_PER_ROW],
                },
            },
        )


def _ranges(seqs: Sequence[int]) -> list[list[int]]:
    out: list[list[int]] = []
    for s in sorted(seqs):
        if out and out[-1][1] == s - 1:
            out[-1][1] = s
        else:
            out.append([s, s])
    return out
