"""The memory store (an adapter: SQL on the project's Postgres) and the forget / export walk.

Tables (Storage migrations 0001 and 0004): ``profile_prefs`` (T2), ``consents``,
``memory_facts`` (T2–T5 facts), ``contacts``, ``history_facts`` (T3: what actually happened,
written by PlanWriter through :func:`record_history`). Conversations (T1) are the Api's
``conversations`` / ``conversation_turns``.

What a forget or an export walks (``USER_TABLES``) and the statements it runs are in
``forgetting.py``; :meth:`MemoryStore.forget` and :meth:`MemoryStore.export` run them in one
transaction each (SPEC §4–§5).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Protocol

from pydantic import JsonValue
from sqlalchemy import Connection, Engine, text
from ulid import ULID

from countersign.audit import AuditLog
from countersign.kernel import (
    CountersignError,
    Evidence,
    InputError,
    Intent,
    format_utc,
    parse_contract,
)
from countersign.storage import Database, ReadPool

from .core import TIER_RANK, history_items, pref_items, relevant_items, select_evidence
from .forgetting import (
    FORGET_ACTOR,
    ForgetTargets,
    anonymize_authors,
    audit_forgotten,
    check_expected,
    delete_rows,
    export_tables,
    plan_ids,
    redact_audit,
    targets,
)
from .models import ContactIn, FactIn, ForgetRequest, MemoryItem, MemoryWrite, PrefsUpdate
from .sentences import contact_why, conversation_why, fact_why

__all__ = ["ExecutionEraser", "ExemplarSource", "MemoryStore", "record_history"]

#: the statuses history_facts may hold
_STATUSES = {"created", "updated", "skipped", "error", "ok", "failed", "cancelled"}
#: the candidates fetched per tier (the 2 KB cap holds ~20 items; ranking needs a margin)
_PER_TIER = 32
_HISTORY_ROWS = 100
#: the contacts chat text is read against, newest first (a person's own address book)
_CONTACTS = 500
#: the contacts as one row (one statement on an autocommit read connection: no BEGIN/COMMIT)
_CONTACT_ROWS = (
    "SELECT coalesce(json_agg(json_build_array(name, email) ORDER BY created_at DESC, "
    "contact_id DESC), '[]'::json) AS k FROM (SELECT name, email, created_at, contact_id "
    "FROM contacts WHERE user_id = %(u)s AND email IS NOT NULL "
    "ORDER BY created_at DESC, contact_id DESC LIMIT %(n)s) c"
)


class ExemplarSource(Protocol):
    """Where exemplar evidence comes from (PlanLibrary retrieval, PlanLibrary SPEC §4)."""

    def exemplars(self, intent: Intent, *, limit: int) -> list[Evidence]:
        """Exemplar items for this intent, best first."""
        ...


class ExecutionEraser(Protocol):
    """Deletes runtime execution records (n8n) whose data holds any of ``needles``."""

    async def erase(self, needles: Sequence[str]) -> int:
        """How many were deleted."""
        ...


def record_history(
    engine_or_conn: Engine | Connection,
    *,
    user_id: str,
    plan_id: str,
    step: int,
    intent: str,
    key: str,
    value: JsonValue,
    status: str,
    at: datetime,
) -> bool:
    """Insert one outcome-history row idempotently (``ON CONFLICT DO NOTHING`` on
    (plan_id, step, key)); True when it inserted. PII-light: ``value`` is a derived fact."""
    if not (0 < len(user_id) <= 128 and len(plan_id) == 26 and 0 < len(intent) <= 64):
        raise InputError(f"history row for plan {plan_id[:40]!r}: bad user, plan id or intent")
    if not (0 < len(key) <= 128) or status not in _STATUSES or at.tzinfo is None:
        raise InputError(
            f"history row {plan_id}:{step}: key 1–128 characters, status one of "
            f"{sorted(_STATUSES)}, an aware time (got {key[:40]!r}, {status[:20]!r})"
        )
    sql = text(
        "INSERT INTO history_facts (user_id, plan_id, step, intent, key, value, status, "
        "created_at) VALUES (:u, :p, :s, :i, :k, CAST(:v AS jsonb), :st, :at) "
        "ON CONFLICT DO NOTHING"
    )
    params = {
        "u": user_id,
        "p": plan_id,
        "s": step,
        "i": intent,
        "k": key,
        "v": json.dumps(value),
        "st": status,
        "at": at,
    }
    if isinstance(engine_or_conn, Connection):
        return engine_or_conn.execute(sql, params).rowcount == 1
    with engine_or_conn.begin() as c:
        return c.execute(sql, params).rowcount == 1


#: every tier's candidates in one round trip (``src`` says which part a row is from)
_CANDIDATES = text(
    """
    WITH g AS (SELECT purpose FROM consents WHERE user_id = :u AND granted AND :b5)
    SELECT 'consent' AS src, to_jsonb(g) AS j FROM g
    UNION ALL
    SELECT 'pref', to_jsonb(p) FROM (SELECT key, value, updated_at FROM profile_prefs
      WHERE user_id = :u ORDER BY updated_at DESC LIMIT :n) p
    UNION ALL
    SELECT 'contact', to_jsonb(k) FROM (SELECT contact_id, name, email, relation, created_at
      FROM contacts WHERE user_id = :u ORDER BY created_at DESC LIMIT :n) k
    UNION ALL
    SELECT 'history', to_jsonb(h) FROM (SELECT plan_id, step, intent, key, value, status,
      created_at FROM history_facts WHERE :b3 AND user_id = :u AND intent = :i
      ORDER BY created_at DESC LIMIT :hn) h
    UNION ALL
    SELECT 'fact', to_jsonb(f) FROM unnest(CAST(:tiers AS text[])) AS w(tier)
    CROSS JOIN LATERAL (SELECT f.tier, f.type, f.key, f.value, f.confidence, f.source_ref,
      f.created_at, f.ttl_days, f.purpose FROM memory_facts f
      WHERE f.user_id = :u AND f.tier = w.tier
      AND (f.ttl_days IS NULL OR f.created_at + make_interval(days => f.ttl_days) > :now)
      AND (f.tier <> 'T5' OR f.purpose IN (SELECT purpose FROM g))
      ORDER BY f.confidence DESC, f.created_at DESC LIMIT :n) f
    """
)


def _ts(value: Any) -> datetime:
    """A timestamp as ``to_jsonb`` writes it (ISO 8601 with an offset)."""
    return value if isinstance(value, datetime) else datetime.fromisoformat(str(value))


def _conversation_items(intent: Intent, conversation: Mapping[str, Any]) -> list[MemoryItem]:
    """T1: the conversation's entities the Intent does not carry itself."""
    cid = str(conversation.get("conversation_id", ""))
    return [
        MemoryItem(
            "T1",
            "preference",
            k,
            v,
            0.9,
            f"conversation:{cid}:{k}",
            intent.received_at,
            why=conversation_why(k, v),
        )
        for k, v in (conversation.get("entities") or {}).items()
        if k not in intent.entities
    ]


def _contact_item(j: Mapping[str, Any]) -> MemoryItem:
    """A ``contact`` row of ``_CANDIDATES`` as a T2 candidate."""
    value = {k: j[k] for k in ("email", "relation") if j.get(k)}
    name = str(j["name"])[:128]
    return MemoryItem(
        "T2",
        "contact",
        name,
        value or j["name"],
        0.8,
        f"contact:{j['contact_id']}",
        _ts(j["created_at"]),
        why=contact_why(name, j.get("email") or j["name"]),
    )


def _fact_item(j: Mapping[str, Any]) -> MemoryItem:
    """A ``fact`` row of ``_CANDIDATES`` as a candidate of its tier."""
    at = _ts(j["created_at"])
    return MemoryItem(
        j["tier"],
        j["type"],
        j["key"],
        j["value"],
        float(j["confidence"]),
        j["source_ref"],
        at,
        j["ttl_days"],
        j["purpose"],
        why=fact_why(j["type"], j["key"], j["value"], at, j["purpose"]),
    )


#: the ``_CANDIDATES`` rows that are candidates as they stand
_ROW_ITEM: dict[str, Callable[[Mapping[str, Any]], MemoryItem]] = {
    "contact": _contact_item,
    "fact": _fact_item,
}


@dataclass
class MemoryStore:
    """A person's memory: preferences, consent, facts, contacts, history; evidence; forget."""

    db: Database
    clock: Callable[[], datetime]
    exemplars: ExemplarSource | None = None
    #: single-statement reads (the contacts a chat message is read against) when given
    reads: ReadPool | None = None

    # ---- preferences and consent ----------------------------------------------------------
    def prefs(self, user_id: str) -> dict[str, Any]:
        """``{"prefs": {key: value}, "consent": {purpose: granted}}``."""
        with self.db.tx() as c:
            prefs = {
                r.key: r.value
                for r in c.execute(
                    text("SELECT key, value FROM profile_prefs WHERE user_id = :u ORDER BY key"),
                    {"u": user_id},
                )
            }
            consent = {
                r.purpose: r.granted
                for r in c.execute(
                    text("SELECT purpose, granted FROM consents WHERE user_id = :u ORDER BY 1"),
                    {"u": user_id},
                )
            }
        return {"prefs": prefs, "consent": consent}

    def put_prefs(self, user_id: str, body: Mapping[str, Any]) -> dict[str, Any]:
        """Set preferences (``null`` removes one) and grant or revoke consent per purpose."""
        update = parse_contract(PrefsUpdate, body, what="memory prefs")
        now = self.clock()
        with self.db.tx() as c:
            for key, value in update.prefs.items():
                if value is None:
                    c.execute(
                        text("DELETE FROM profile_prefs WHERE user_id = :u AND key = :k"),
                        {"u": user_id, "k": key},
                    )
                    continue
                c.execute(
                    text(
                        "INSERT INTO profile_prefs (user_id, key, value, updated_at) VALUES "
                        "(:u, :k, CAST(:v AS jsonb), :t) ON CONFLICT (user_id, key) DO UPDATE "
                        "SET value = EXCLUDED.value, updated_at = EXCLUDED.updated_at"
                    ),
                    {"u": user_id, "k": key, "v": json.dumps(value), "t": now},
                )
            for purpose, granted in update.consent.items():
                c.execute(
                    text(
                        "INSERT INTO consents (user_id, purpose, granted, granted_at, revoked_at) "
                        "VALUES (:u, :p, :g, CASE WHEN :g THEN CAST(:t AS timestamptz) END, "
                        "CASE WHEN :g THEN NULL ELSE CAST(:t AS timestamptz) END) "
                        "ON CONFLICT (user_id, purpose) DO UPDATE SET granted = EXCLUDED.granted, "
                        "granted_at = coalesce(EXCLUDED.granted_at, consents.granted_at), "
                        "revoked_at = EXCLUDED.revoked_at"
                    ),
                    {"u": user_id, "p": purpose, "g": granted, "t": now},
                )
        return self.prefs(user_id)

    def granted(self, c: Connection, user_id: str) -> set[str]:
        """The purposes the person has granted now."""
        return set(
            c.execute(
                text("SELECT purpose FROM consents WHERE user_id = :u AND granted"),
                {"u": user_id},
            ).scalars()
        )

    # ---- facts and contacts -----------------------------------------------------------------
    def add(self, user_id: str, body: Mapping[str, Any]) -> dict[str, list[str]]:
        """Store facts and contacts; their ids."""
        write = parse_contract(MemoryWrite, body, what="memory facts")
        now = self.clock()
        facts: list[str] = []
        contacts: list[str] = []
        with self.db.tx() as c:
            for f in write.facts:
                fid = str(ULID.from_datetime(now))
                facts.append(fid)
                self._insert_fact(c, user_id, fid, f, now)
            for k in write.contacts:
                cid = str(ULID.from_datetime(now))
                contacts.append(cid)
                self._insert_contact(c, user_id, cid, k, now)
        return {"facts": facts, "contacts": contacts}

    def contacts(self, user_id: str, *, limit: int | None = _CONTACTS) -> list[tuple[str, str]]:
        """``(name, e-mail)`` of the person's contacts that have an e-mail, newest first, at most
        ``limit`` (chat text may name them; Api SPEC, chat text); ``None``: every one (what the
        gate rules' ``contacts`` set must hold: an older contact cut off would read as outside).
        One statement on the ``contacts_user`` index, per message (on the read pool when given)."""
        params = {"u": user_id, "n": limit}
        if self.reads is not None:
            row = self.reads.one(_CONTACT_ROWS, params)
            found = row["k"] if row else []
        else:
            with self.db.tx() as c:
                found = c.exec_driver_sql(_CONTACT_ROWS, params).scalar_one()
        return [(str(name), str(email)) for name, email in found]

    @staticmethod
    def _insert_fact(c: Connection, user_id: str, fid: str, f: FactIn, now: datetime) -> None:
        c.execute(
            text(
                "INSERT INTO memory_facts (fact_id, user_id, tier, type, key, value, subject, "
                "purpose, confidence, source_ref, ttl_days, created_at) VALUES (:id, :u, :tier, "
                ":type, :k, CAST(:v AS jsonb), :s, :p, :conf, :ref, :ttl, :t)"
            ),
            {
                "id": fid,
                "u": user_id,
                "tier": f.tier,
                "type": f.type,
                "k": f.key,
                "v": json.dumps(f.value),
                "s": f.subject,
                "p": f.purpose,
                "conf": f.confidence,
                "ref": f"fact:{fid}",
                "ttl": f.ttl_days,
                "t": now,
            },
        )

    @staticmethod
    def _insert_contact(c: Connection, user_id: str, cid: str, k: ContactIn, now: datetime) -> None:
        c.execute(
            text(
                "INSERT INTO contacts (contact_id, user_id, name, email, phone, relation, "
                "created_at) VALUES (:id, :u, :n, :e, :ph, :r, :t)"
            ),
            {
                "id": cid,
                "u": user_id,
                "n": k.name,
                "e": k.email,
                "ph": k.phone,
                "r": k.relation,
                "t": now,
            },
        )

    # ---- evidence -----------------------------------------------------------------------------
    def candidates(
        self, c: Connection, intent: Intent, *, conversation: Mapping[str, Any] | None = None
    ) -> tuple[list[MemoryItem], set[str]]:
        """Every tier's candidates the Intent's ``context_budget`` allows, and the granted
        purposes, in one statement (one round trip). Each tier's part is bounded (32 rows,
        100 history rows; the most confident live facts per tier off the index), expiry and
        T5 consent are filtered in SQL, so its cost does not grow with the person's history."""
        budget = intent.context_budget
        items = _conversation_items(intent, conversation) if budget >= 1 and conversation else []
        if budget < 2:
            return items, set()
        tiers = [t for t, n in TIER_RANK.items() if 2 <= n <= budget]
        rows = c.execute(
            _CANDIDATES,
            {
                "u": intent.user_id,
                "i": intent.intent,
                "now": intent.received_at,
                "tiers": tiers,
                "b3": budget >= 3,
                "b5": budget >= 5,
                "n": _PER_TIER,
                "hn": _HISTORY_ROWS,
            },
        ).all()
        consents = {str(r.j["purpose"]) for r in rows if r.src == "consent"}
        prefs: dict[str, tuple[JsonValue, datetime]] = {}
        hist: list[dict[str, Any]] = []
        for r in rows:
            j = r.j
            if r.src == "pref":
                prefs[j["key"]] = (j["value"], _ts(j["updated_at"]))
            elif r.src == "history":
                hist.append({**j, "created_at": _ts(j["created_at"])})
            elif r.src in _ROW_ITEM:
                items.append(_ROW_ITEM[r.src](j))
        items += pref_items(prefs)
        items += history_items(hist, intent.intent)
        return items, consents

    def evidence(
        self,
        intent: Intent,
        *,
        conversation: Mapping[str, Any] | None = None,
        exclude: Collection[str] = (),
        relevant: Collection[str] = (),
    ) -> list[Evidence]:
        """The Intent's evidence (≤ 2 KB), best first: only items relevant to this intent
        (``core.relevant_items``; ``relevant``: the registry's entity names of the intent), each
        with the sentence a person reads (``Evidence.why``)."""
        with self.db.tx() as c:
            items, consents = self.candidates(c, intent, conversation=conversation)
        if self.exemplars is not None and intent.context_budget >= 3:
            try:
                found = self.exemplars.exemplars(intent, limit=5)
            except CountersignError:
                # retrieval is advice: a library that cannot answer (embedder down) leaves the
                # plan to the other tiers instead of refusing to plan
                found = []
            for ev in found:
                items.append(
                    MemoryItem(
                        "T3",
                        ev.type,
                        ev.key,
                        ev.value,
                        ev.confidence,
                        ev.source_ref,
                        intent.received_at,
                        ev.ttl_days,
                        why=ev.why,
                    )
                )
        names = {*relevant, *intent.entities}
        keep = relevant_items(items, intent=intent.intent, names=names, entities=intent.entities)
        return select_evidence(
            keep,
            budget=intent.context_budget,
            now=intent.received_at,
            consents=consents,
            exclude=exclude,
            relevant=relevant,
        )

    # ---- export and forget (forgetting.py) ----------------------------------------------------
    def export(self, user_id: str) -> dict[str, Any]:
        """One JSON document with everything stored about the person: every row of every table
        in ``USER_TABLES`` (hashes of secrets left out), the audit rows about them, and the
        registry revisions they authored."""
        out: dict[str, Any] = {"user_id": user_id, "exported_at": format_utc(self.clock())}
        with self.db.tx() as c:
            out["tables"] = export_tables(c, user_id)
        return out

    def forget_targets(self, user_id: str, body: Mapping[str, Any]) -> ForgetTargets:
        """What a forget would take (read only): the plan ids and the subject the runtimes'
        records (n8n executions, Temporal runs) are matched with. The Api erases those records
        *before* :meth:`forget` deletes the rows that name the plans (SPEC §4), so a runtime that
        is down leaves everything findable for the next attempt."""
        req = parse_contract(ForgetRequest, body, what="memory forget")
        with self.db.tx() as c:
            p, _ = targets(c, user_id, req)
            own = p if req.all else plan_ids(c, user_id)
        scope = "all" if req.all else "subject"
        return ForgetTargets(scope, tuple(p), tuple(own), None if req.all else req.subject)

    def forget_incomplete(
        self,
        scope: str,
        *,
        erased: Mapping[str, int | None],
        pending: Mapping[str, str],
        audit: AuditLog,
    ) -> None:
        """Audit a forget that stopped because a runtime could not be erased (no table row was
        deleted): the scope, what was erased so far, and which store failed with which error
        code — never the user id or the subject (SPEC §5)."""
        with self.db.tx() as c:
            audit.append(
                c,
                {
                    "kind": "memory_forget_incomplete",
                    "status": "failed",
                    "actor": FORGET_ACTOR,
                    "reason": ",".join(sorted(pending.values()))[:128],
                    "details": {
                        "scope": scope,
                        "erased": dict(sorted(erased.items())),
                        "pending": dict(sorted(pending.items())),
                    },
                },
            )

    def forget(
        self,
        user_id: str,
        body: Mapping[str, Any],
        *,
        audit: AuditLog,
        erased: Mapping[str, int | None] | None = None,
        expected: Collection[str] | None = None,
    ) -> dict[str, Any]:
        """Delete the person's data (``{"all": true}``) or one subject's, from every table in
        ``USER_TABLES``; redact the audit rows about it; audit the forget without its content
        (scope, row counts, the runtime records ``erased`` before, the redacted sequence numbers).
        Returns what it did and the needles (plan ids, the user id or the subject) the runtime's
        execution records are searched for.

        ``expected``: the plan ids whose runtime records were erased before (from
        :meth:`forget_targets`); a forget that would now take a plan outside them (made in
        between) deletes nothing and raises :class:`ForgetChangedError`, so no plan id is
        deleted before its records are.
        """
        req = parse_contract(ForgetRequest, body, what="memory forget")
        scope = "all" if req.all else "subject"
        with self.db.tx() as c:
            p, needles = targets(c, user_id, req)
            check_expected(p, expected)
            params: dict[str, Any] = {"u": user_id, "p": p, "s": req.subject}
            counts = delete_rows(c, req, params)
            redacted = redact_audit(c, req, params)
            if req.all:
                anonymize_authors(c, params, counts)
            audit_forgotten(c, audit, scope=scope, counts=counts, erased=erased, redacted=redacted)
        return {
            "scope": scope,
            "deleted": counts,
            "audit_rows_redacted": len(redacted),
            "needles": needles,
        }
