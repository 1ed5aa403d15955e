"""Memory over the real stack (issue 15.1-2): preferences and consent fill the plan through
ContextRAG evidence (hashed into the signed plan, listed on the answer, droppable by re-planning),
T5 only with consent, export holds everything stored, and forget — one subject, then everything —
leaves no row about the person in any table (information_schema walked, every column), deletes
n8n's executions that held it, and keeps the audit chain verifying."""

from __future__ import annotations

import asyncio
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pytest
from sqlalchemy import text

from countersign.api.services import execution_matcher
from countersign.api.testing import ALICE, BOB, ApiHarness
from countersign.audit import AuditLog
from countersign.contextrag import record_history
from countersign.kernel import Settings, canonical_bytes, content_hash
from countersign.n8n import N8nClient, N8nHandle, install, start, stop
from countersign.storage import Database

pytestmark = pytest.mark.slow


def _meeting(participants: list[str], **entities: Any) -> dict[str, Any]:
    day = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
    return {
        "intent": {
            "intent": "schedule_meeting",
            "context_budget": 5,
            "entities": {
                "participants": participants,
                "title": "Sync",
                "window_start": (day + timedelta(hours=13)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                "window_end": (day + timedelta(hours=18)).strftime("%Y-%m-%dT%H:%M:%SZ"),
                **entities,
            },
        }
    }


def _columns(db: Database) -> list[tuple[str, str, str]]:
    with db.tx() as c:
        return [
            (r.table_name, r.column_name, r.data_type)
            for r in c.execute(
                text(
                    "SELECT c.table_name, c.column_name, c.data_type FROM information_schema.columns c "
                    "JOIN information_schema.tables t USING (table_schema, table_name) "
                    "WHERE c.table_schema = 'public' AND t.table_type = 'BASE TABLE' "
                    "AND c.table_name <> 'alembic_version' ORDER BY 1, 2"
                )
            )
        ]


def _holding(db: Database, needle: str, *, exact: bool) -> dict[str, int]:
    """``table.column`` → rows whose column equals (or, not exact, contains) ``needle``."""
    out: dict[str, int] = {}
    with db.tx() as c:
        for table, column, kind in _columns(db):
            # bytea (the plan's canonical bytes) is read as the UTF-8 text it holds
            value = (
                f"convert_from(\"{column}\", 'UTF8')"
                if kind == "bytea"
                else f'CAST("{column}" AS text)'
            )
            cond = f"{value} = :n" if exact else f"strpos(lower({value}), lower(:n)) > 0"
            n = c.execute(
                text(f'SELECT count(*) FROM "{table}" WHERE {cond}'),
                {"n": needle},
            ).scalar_one()
            if n:
                out[f"{table}.{column}"] = n
    return out


#: columns an export leaves out: hashes of secrets, the vector and the tsvector (ContextRAG §4)
_UNEXPORTED = {"key_hash", "session_hash", "link_hash", "token_hash", "csrf", "embedding", "tsv"}


def _rows_about(db: Database, user_id: str, plan_ids: list[str]) -> dict[str, set[str]]:
    """table → the rows (as sorted JSON, unexported columns left out) that have a column equal
    to ``user_id`` or holding one of ``plan_ids``, and the turns of the user's conversations:
    found by walking every column of every table, independently of ``USER_TABLES``."""
    by_table: dict[str, list[tuple[str, str]]] = {}
    for table, column, kind in _columns(db):
        by_table.setdefault(table, []).append((column, kind))
    out: dict[str, set[str]] = {}
    with db.tx() as c:
        for table, columns in by_table.items():
            conds = []
            for column, kind in columns:
                value = (
                    f"convert_from(\"{column}\", 'UTF8')"
                    if kind == "bytea"
                    else f'CAST("{column}" AS text)'
                )
                conds.append(f"{value} = :u")
                conds.append(
                    f"EXISTS (SELECT 1 FROM unnest(CAST(:p AS text[])) p WHERE strpos({value}, p) > 0)"
                )
            if table == "conversation_turns":
                conds.append(
                    "conversation_id IN (SELECT conversation_id FROM conversations WHERE user_id = :u)"
                )
            rows = c.execute(
                text(f'SELECT to_jsonb(t) FROM "{table}" t WHERE {" OR ".join(conds)}'),
                {"u": user_id, "p": plan_ids},
            ).scalars()
            kept = {
                json.dumps(
                    {
                        k: v
                        for k, v in r.items()
                        if k not in _UNEXPORTED and (table, k) != ("plans", "canonical")
                    },
                    sort_keys=True,
                )
                for r in rows
            }
            if kept:
                out[table] = kept
    return out


def _executions(n8n: N8nHandle, needles: list[str]) -> dict[str, str | None]:
    """id → workflow name of every n8n execution whose data holds one of ``needles``."""

    async def scan() -> dict[str, str | None]:
        found: dict[str, str | None] = {}
        async with N8nClient(n8n.base_url, n8n.api_key) as client:
            async for page in client.execution_pages(include_data=True):
                for ex in page:
                    blob = json.dumps(ex).lower()
                    if any(n.lower() in blob for n in needles):
                        found[str(ex["id"])] = (ex.get("workflowData") or {}).get("name")
        return found

    return asyncio.run(scan())


def _executions_blobs(n8n: N8nHandle, plan_id: str) -> list[str]:
    """The JSON text of every n8n execution holding ``plan_id``."""

    async def scan() -> list[str]:
        async with N8nClient(n8n.base_url, n8n.api_key) as client:
            return [
                blob
                async for page in client.execution_pages(include_data=True)
                for blob in (json.dumps(ex) for ex in page)
                if plan_id in blob
            ]

    return asyncio.run(scan())


def _turns(db: Database, conversation_id: str) -> list[str]:
    """The stored turns of a conversation, as text."""
    with db.tx() as c:
        return [
            json.dumps(r)
            for r in c.execute(
                text(
                    "SELECT to_jsonb(t) FROM conversation_turns t WHERE conversation_id = :c "
                    "ORDER BY 1::text"
                ),
                {"c": conversation_id},
            ).scalars()
        ]


def _executions_holding(n8n: N8nHandle, needles: list[str]) -> int:
    return len(_executions(n8n, needles))


def _others_naming(n8n: N8nHandle, name: str) -> set[str]:
    """Executions already naming ``name`` before a test starts: other tests share the session's
    n8n (components/N8nRuntime's tests write carol's calendar there), and those records are not
    this user's data, so a forget must leave them and a check must not count them."""
    return set(_executions(n8n, [name]))


def test_memory_fills_the_plan_drop_replans_export_and_forget(
    api: ApiHarness, n8n: N8nHandle
) -> None:
    others = _others_naming(n8n, "carol")
    with api.client() as alice, api.client(BOB) as bob:
        # bad bodies are named
        r = alice.put("/v1/memory/prefs", json={"prefs": {"Bad Key": 1}})
        assert r.status_code == 422 and "Bad Key" in r.text, r.text
        r = alice.post("/v1/memory/facts", json={"facts": [{"tier": "T5", "key": "x", "value": 1}]})
        assert r.status_code == 422 and "purpose" in r.text, r.text
        assert alice.post("/v1/memory/forget", json={}).status_code == 422

        r = alice.put(
            "/v1/memory/prefs",
            json={
                "prefs": {
                    "default_meeting_length": 45,
                    # relevant to a meeting (it bounds its window) but moves nothing here
                    "work_hours": {"start": "00:00", "end": "23:59"},
                    # no meeting entity uses it: never evidence for one (issue 25)
                    "video_link": "https://meet.example/a",
                }
            },
        )
        assert r.status_code == 200 and r.json()["prefs"]["default_meeting_length"] == 45
        r = alice.post(
            "/v1/memory/facts",
            json={
                "facts": [
                    {
                        "tier": "T5",
                        "type": "history",
                        "key": "schedule_meeting.focus_time",
                        "value": "mornings",
                        "purpose": "calendar_insights",
                        "confidence": 0.9,
                    },
                    {"tier": "T3", "key": "team", "value": "carol's team", "subject": "Carol"},
                ],
                "contacts": [{"name": "Carol", "email": "carol@example.com"}],
            },
        )
        assert r.status_code == 201, r.text
        bob.put("/v1/memory/prefs", json={"prefs": {"default_meeting_length": 20}})

        # the preference fills the missing duration; T5 is left out without consent
        r = alice.post("/v1/intents", json=_meeting([ALICE]))
        assert r.status_code == 201, r.text
        body = r.json()
        keys = {e["key"]: e for e in body["evidence"]}
        assert keys["duration_min"]["value"] == 45 and "schedule_meeting.focus_time" not in keys
        assert "video_link" not in keys and "work_hours" in keys
        assert all(e["why"] and "{" not in e["why"] for e in body["evidence"])
        overlap = next(s for s in body["plan"]["graph"] if s["call"] == "find_overlap")
        assert overlap["args"]["duration_min"] == 45
        ev_sorted = sorted(body["evidence"], key=canonical_bytes)
        assert body["plan"]["meta"]["evidence_hash"] == content_hash(ev_sorted)
        first = body["plan_id"]

        # consent recorded: T5 evidence appears (and consent changes are audited)
        alice.put("/v1/memory/prefs", json={"consent": {"calendar_insights": True}})
        r = alice.post("/v1/intents", json=_meeting([ALICE, "carol@example.com"]))
        assert r.status_code == 201, r.text
        assert "schedule_meeting.focus_time" in {e["key"] for e in r.json()["evidence"]}
        carol_plan = r.json()["plan_id"]

        # drop the preference and re-plan: a revision that has to ask for the duration
        r = alice.post(f"/v1/plans/{first}/replan", json={"drop": ["pref:default_meeting_length"]})
        assert r.status_code == 200, r.text
        assert [n["entity"] for n in r.json()["needs"]] == ["duration_min"]
        assert alice.post(f"/v1/plans/{first}/replan", json={"drop": []}).status_code == 422
        assert bob.post(f"/v1/plans/{first}/replan", json={"drop": ["x"]}).status_code == 404
        # dropping the work hours re-plans with a different evidence hash, revising the first
        r = alice.post(f"/v1/plans/{first}/replan", json={"drop": ["pref:work_hours"]})
        assert r.status_code == 201, r.text
        assert r.json()["revises"] == {"plan_id": first, "changed": ["evidence"]}
        assert r.json()["plan"]["meta"]["evidence_hash"] != body["plan"]["meta"]["evidence_hash"]

        # bob's own data that names alice, before her meeting is booked: his meeting with her
        # (its preview read her empty calendar on n8n), his chat about her
        r = bob.post("/v1/intents", json=_meeting([BOB, ALICE], duration_min=30))
        assert r.status_code == 201, r.text
        bob_meets_alice = r.json()["plan_id"]
        bob_chat = bob.post(
            "/v1/intents", json={"text": "schedule a meeting with Alice tomorrow afternoon"}
        ).json()["conversation_id"]

        # execute one plan so tokens, decisions, idempotency keys exist too
        slot = body["preview"]["normalized"]["steps"]["2"]["slots"][0]
        end = datetime.fromisoformat(slot["start"].replace("Z", "+00:00")) + timedelta(minutes=45)
        tok = alice.post(
            f"/v1/plans/{first}/gates/gate-A/approve",
            json={
                "choice": {"start": slot["start"], "end": end.isoformat().replace("+00:00", "Z")}
            },
        ).json()["token"]
        done = alice.post(f"/v1/plans/{first}/execute", json={"tokens": {"gate-A": tok}})
        assert done.status_code == 202, done.text
        record_history(
            api.db.engine,
            user_id=ALICE,
            plan_id=first,
            step=3,
            intent="schedule_meeting",
            key="duration_min",
            value=45,
            status="created",
            at=datetime.now(UTC),
        )
        with api.db.tx() as c:
            c.execute(
                text(
                    "INSERT INTO plan_library (plan_id, user_id, intent, text, created_at) "
                    "VALUES (:p, :u, 'schedule_meeting', 'sync with alice', now()) "
                    "ON CONFLICT DO NOTHING"  # PlanWriter may have indexed it already
                ),
                {"p": first, "u": ALICE},
            )
        bob_plan = bob.post("/v1/intents", json=_meeting([BOB])).json()["plan_id"]

        # chat turns: one conversation about carol, one not (the T1 store holds the text)
        chats = {}
        for key, said, status in (
            # the title is read from "about …": planned (45 minutes from her preference)
            ("carol", "schedule a meeting with Bob tomorrow afternoon about Carol's roadmap", 201),
            ("other", "schedule a meeting with Bob tomorrow afternoon", 200),  # asks the title
        ):
            r = alice.post("/v1/intents", json={"text": said})
            assert r.status_code == status, r.text
            chats[key] = r.json()["conversation_id"]
        assert _turns(api.db, chats["carol"]) and _turns(api.db, chats["other"])
        # a meeting of bob's with alice after hers is booked: its preview read her calendar
        # on n8n, with the event her plan wrote (which names her plan)
        r = bob.post("/v1/intents", json=_meeting([BOB, ALICE], duration_min=30))
        assert r.status_code == 201, r.text
        bob_reads_hers = r.json()["plan_id"]

        # export holds exactly the rows about alice, in every table: every row with a column
        # equal to her id or holding one of her plan ids (found by walking every column), and
        # nothing else — bob's rows stay out
        r = alice.get("/v1/memory/export")
        assert r.status_code == 200, r.text
        export = r.json()
        with api.db.tx() as c:
            mine = sorted(
                c.execute(
                    text("SELECT plan_id FROM plans WHERE user_id = :u"), {"u": ALICE}
                ).scalars()
            )
        plans = sorted(p["plan_id"] for p in export["tables"]["plans"])
        assert plans == mine and {first, carol_plan} <= set(plans) and bob_plan not in plans
        stored = _rows_about(api.db, ALICE, plans)
        exported = {
            t: {json.dumps(row, sort_keys=True) for row in rows}
            for t, rows in export["tables"].items()
            if rows
        }
        assert exported == stored
        for table in ("profile_prefs", "history_facts", "plan_library", "approval_tokens"):
            assert exported[table], table  # the set-up stored each of them
        assert not any(set(row) & _UNEXPORTED for rows in export["tables"].values() for row in rows)
        # the audit rows: by actor or one of her plans, by their sequence numbers
        with api.db.tx() as c:
            audit_seqs = set(
                c.execute(
                    text("SELECT seq FROM audit_log WHERE actor = :u OR plan_id = ANY(:p)"),
                    {"u": ALICE, "p": plans},
                ).scalars()
            )
            bobs = set(
                c.execute(
                    text("SELECT seq FROM audit_log WHERE plan_id = :p"), {"p": bob_plan}
                ).scalars()
            )
        # her turns are exported, bob's rows naming her are not (they are his: SPEC §4)
        turns = {t["conversation_id"] for t in export["tables"]["conversation_turns"]}
        assert turns == set(chats.values())
        assert bob_meets_alice not in json.dumps(export) and bob_chat not in json.dumps(export)
        assert not {bob_meets_alice, bob_reads_hers} & {
            p["plan_id"] for p in export["tables"]["plans"]
        }
        assert {a["seq"] for a in export["tables"]["audit_log"]} == audit_seqs
        assert bobs and not bobs & audit_seqs
        assert {"consent_changed", "plan_signed"} <= {
            a["kind"] for a in export["tables"]["audit_log"]
        }
        # n8n: a summary of every execution of her plans (their data stays in n8n)
        assert export["complete"] is True and export["runtimes"]["temporal"] is None
        runs = _executions(n8n, plans)
        # her executed plan's writes are kept; previews keep nothing (N8nRuntime SPEC "What n8n
        # keeps": read workflows save no execution)
        assert runs and _executions_holding(n8n, [carol_plan]) == 0
        listed = export["runtimes"]["n8n"]["executions"]
        assert {e["execution_id"]: e["workflow_name"] for e in listed} == runs
        assert all(e["started_at"] and e["status"] and e["workflow_id"] for e in listed)
        assert not set(_executions(n8n, [bob_plan])) & set(runs)

        # on n8n: bob's previews read alice's calendar (her event, her plan id in its UID) and
        # kept nothing of it
        bobs_own = _executions_blobs(n8n, bob_meets_alice)
        assert bobs_own == [] and _executions_blobs(n8n, bob_reads_hers) == []

        # forget one subject: no column anywhere mentions it, n8n's executions neither
        r = alice.post("/v1/memory/forget", json={"subject": "carol"})
        assert r.status_code == 200, r.text
        out = r.json()
        # the meeting with carol and the plan of the chat about her roadmap
        assert out["deleted"]["plans"] == 2 and out["deleted"]["contacts"] == 1, out
        assert out["deleted"]["conversation_turns"] >= 1 and out["deleted"]["conversations"] == 1
        assert "carol" not in json.dumps(out).lower()
        assert _holding(api.db, "carol", exact=False) == {}
        assert set(_executions(n8n, ["carol", carol_plan])) <= others
        assert _executions_holding(n8n, [carol_plan]) == 0
        assert alice.get(f"/v1/plans/{first}").status_code == 200  # the rest stays
        assert _turns(api.db, chats["carol"]) == [] and _turns(api.db, chats["other"])

        # forget everything: no column equals alice's id; bob keeps his; the chain verifies
        r = alice.post("/v1/memory/forget", json={"all": True})
        assert r.status_code == 200, r.text
        assert ALICE not in json.dumps(r.json())
        assert _holding(api.db, ALICE, exact=True) == {}
        for pid in plans:
            assert set(_holding(api.db, pid, exact=True)) <= {"audit_log.plan_id"}, pid
        assert _executions_holding(n8n, plans) == 0
        assert _turns(api.db, chats["other"]) == []
        assert alice.get("/v1/memory/prefs").status_code == 401  # the account is gone too
        assert bob.get(f"/v1/plans/{bob_plan}").status_code == 200
        # bob's own data naming alice is his and stays as it was: his plan with her as a
        # participant, his chat about her, his n8n executions that carried her address
        kept = bob.get(f"/v1/plans/{bob_meets_alice}")
        assert (
            kept.status_code == 200
            and ALICE in kept.json()["plan"]["intent"]["entities"]["participants"]
        )
        assert any("alice" in t.lower() for t in _turns(api.db, bob_chat))
        assert _executions_blobs(n8n, bob_meets_alice) == bobs_own
        left = _executions_blobs(n8n, bob_reads_hers)
        assert not any(p.lower() in e.lower() for e in left for p in plans)
        assert bob.get(f"/v1/plans/{bob_reads_hers}").status_code == 200
        assert bob.get("/v1/memory/prefs").json()["prefs"] == {"default_meeting_length": 20}
        with api.db.tx() as c:
            assert AuditLog(clock=lambda: datetime.now(UTC)).verify(c).ok
            forgotten = c.execute(
                text("SELECT actor, details FROM audit_log WHERE kind = 'memory_forgotten'")
            ).all()
        assert [f.actor for f in forgotten] == ["system:memory", "system:memory"]
        assert "carol" not in str(forgotten).lower() and ALICE not in str(forgotten)


def test_chat_does_not_ask_what_preferences_fill(api: ApiHarness) -> None:
    with api.client() as alice:
        text_ = "schedule a meeting with Alice and Bob tomorrow afternoon"
        asked = alice.post("/v1/intents", json={"text": text_}).json()
        assert {n["entity"] for n in asked["needs"]} == {"duration_min", "title"}
        alice.put("/v1/memory/prefs", json={"prefs": {"default_meeting_length": 45}})
        first = alice.post("/v1/intents", json={"text": text_}).json()
        assert [n["entity"] for n in first["needs"]] == ["title"]
        r = alice.post(
            "/v1/intents", json={"text": "called Sync", "conversation_id": first["conversation_id"]}
        )
        assert r.status_code == 201, r.text
        plan = r.json()
        overlap = next(s for s in plan["plan"]["graph"] if s["call"] == "find_overlap")
        assert overlap["args"]["duration_min"] == 45
        assert "duration_min" not in plan["plan"]["intent"]["entities"]  # filled, not said
        assert [e["source_ref"] for e in plan["evidence"]] == ["pref:default_meeting_length"]


def test_runtime_records_are_matched_by_whole_words() -> None:
    m = execution_matcher(["local", "01JDR8Z9Y0000000000000000A"])
    assert m.search('{"url": "http://localhost:8000"}') is None
    assert m.search('{"user": "local"}') and m.search('{"k": "01jdr8z9y0000000000000000a:3:ab"}')
    assert execution_matcher(["carol"]).search('{"to": "carol@example.com"}')
    assert execution_matcher(["a.b"]).search("axb") is None  # needles are literal


def test_forget_with_n8n_down_is_refused_whole_then_finishes(
    api: ApiHarness, n8n: N8nHandle
) -> None:
    """n8n stopped: the forget deletes nothing, says which store is pending and is audited
    without content; n8n back (same port and data): the same forget finishes everything."""
    others = _others_naming(n8n, "carol")
    with api.client() as alice:
        meeting = _meeting([ALICE, "carol@example.com"], duration_min=30)
        r = alice.post("/v1/intents", json=meeting)
        assert r.status_code == 201, r.text
        plan = r.json()["plan_id"]
        assert _executions_holding(n8n, [plan]) == 0  # its preview kept nothing on n8n

        port = urlsplit(n8n.base_url).port
        assert port is not None and stop(n8n.data_dir)
        try:
            r = alice.post("/v1/memory/forget", json={"subject": "carol"})
            assert r.status_code == 503, r.text
            problem = r.json()
            assert problem["code"] == "forget_incomplete", problem
            assert problem["pending"] == {"n8n": "n8n_unavailable"}, problem
            assert problem["erased"] == {"temporal_runs_deleted": None}  # no Temporal here
            assert problem["retry"].startswith("POST /v1/memory/forget again"), problem
            assert "carol" not in r.text.lower() and plan not in r.text
            # nothing was deleted: the plan and every row naming carol are still there
            assert alice.get(f"/v1/plans/{plan}").status_code == 200
            assert "plans.canonical" in _holding(api.db, "carol", exact=False)
            with api.db.tx() as c:
                rows = c.execute(
                    text(
                        "SELECT kind, actor, reason, details FROM audit_log "
                        "WHERE kind LIKE 'memory_forget%'"
                    )
                ).all()
            assert [(r.kind, r.actor, r.reason) for r in rows] == [
                ("memory_forget_incomplete", "system:memory", "n8n_unavailable")
            ]
            assert rows[0].details == {
                "scope": "subject",
                "erased": {"temporal_runs_deleted": None},
                "pending": {"n8n": "n8n_unavailable"},
            }
        finally:
            cache = Path(os.environ.get("COUNTERSIGN_CACHE_DIR") or Settings().cache_dir)
            start(install(cache), n8n.data_dir, port=port)  # the session's n8n, as it was

        r = alice.post("/v1/memory/forget", json={"subject": "carol"})
        assert r.status_code == 200, r.text
        assert r.json()["n8n_executions_deleted"] == 0 and r.json()["deleted"]["plans"] == 1
        assert _holding(api.db, "carol", exact=False) == {}
        assert set(_executions(n8n, ["carol", plan])) <= others
        assert _executions_holding(n8n, [plan]) == 0
        with api.db.tx() as c:
            assert AuditLog(clock=lambda: datetime.now(UTC)).verify(c).ok
            done = c.execute(
                text("SELECT details FROM audit_log WHERE kind = 'memory_forgotten'")
            ).scalar_one()
        assert done["erased"]["n8n_executions_deleted"] == r.json()["n8n_executions_deleted"]
