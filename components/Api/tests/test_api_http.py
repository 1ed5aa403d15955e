"""The HTTP API on the real stack: embedded Postgres, real n8n, Radicale (CalDAV), aiosmtpd (SMTP).

Served by uvicorn on a loopback port and called over HTTP as a front-end would: every endpoint's
success and refusal paths, the event stream (replay, live, resume with Last-Event-ID), and the
meeting use case from a structured intent to the event in the calendar.
"""

from __future__ import annotations

import asyncio
import json
import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import httpx
import pytest
from sqlalchemy import text

from countersign.api import UserStore, fold_events
from countersign.api.testing import ALICE, BOB, ApiHarness
from countersign.intake.llm import LitellmProposer
from countersign.intake.testing import FakeModel

pytestmark = pytest.mark.slow

Api = ApiHarness


def _window() -> tuple[str, str]:
    day = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
    start, end = day + timedelta(hours=13), day + timedelta(hours=18)
    return (start.strftime("%Y-%m-%dT%H:%M:%SZ"), end.strftime("%Y-%m-%dT%H:%M:%SZ"))


def _meeting(title: str = "Sync", **extra: Any) -> dict[str, Any]:
    start, end = _window()
    return {
        "intent": {
            "intent": "schedule_meeting",
            "entities": {
                "participants": [ALICE, BOB],
                "duration_min": 30,
                "title": title,
                "window_start": start,
                "window_end": end,
            },
            **extra,
        }
    }


def _problem(r: httpx.Response, status: int, code: str) -> dict[str, Any]:
    assert r.status_code == status, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    body: dict[str, Any] = r.json()
    assert body["code"] == code and body["type"].endswith("/" + code) and body["status"] == status
    return body


def _slot(preview: dict[str, Any]) -> dict[str, str]:
    slot = preview["normalized"]["steps"]["3"]["slots"][0]
    start = datetime.fromisoformat(slot["start"].replace("Z", "+00:00"))
    return {
        "start": slot["start"],
        "end": (start + timedelta(minutes=30)).isoformat().replace("+00:00", "Z"),
    }


def _sse(
    base: str, key: str, plan_id: str, *, last: int | None = None, follow: bool = False
) -> list[dict[str, Any]]:
    headers = {"Authorization": f"Bearer {key}"}
    if last is not None:
        headers["Last-Event-ID"] = str(last)
    out: list[dict[str, Any]] = []
    with httpx.stream(
        "GET",
        f"{base}/v1/plans/{plan_id}/events",
        params={"follow": str(follow).lower()},
        headers=headers,
        timeout=30,
    ) as r:
        assert r.status_code == 200, r.read()
        current: dict[str, Any] = {}
        for line in r.iter_lines():
            if line.startswith("id:"):
                current["id"] = int(line[3:].strip())
            elif line.startswith("event:"):
                current["event"] = line[6:].strip()
            elif line.startswith("data:"):
                current["data"] = json.loads(line[5:].strip())
            elif line == "" and current:
                out.append(current)
                current = {}
    return out


def test_no_credentials_are_401_problems(api: Api) -> None:
    with api.client(None) as c:
        _problem(c.get("/v1/plans"), 401, "unauthenticated")
        _problem(c.post("/v1/intents", json=_meeting()), 401, "unauthenticated")
        _problem(
            c.get("/v1/plans", headers={"Authorization": "Bearer cs_nope"}), 401, "unauthenticated"
        )
        _problem(c.get("/v1/plans", headers={"Authorization": "Basic abc"}), 401, "unauthenticated")
        assert c.get("/healthz").json()["database"] == "ok"
        assert c.get("/openapi.json").json()["info"]["title"] == "Countersign"


def test_bad_bodies_are_named(api: Api) -> None:
    with api.client() as c:
        _problem(
            c.post("/v1/intents", json={"text": "meet bob", "intent": {}}),
            422,
            "text_not_supported",
        )
        _problem(c.post("/v1/intents", json={}), 422, "text_not_supported")
        _problem(c.post("/v1/intents", json={"intnet": {}}), 422, "invalid_request")
        body = _problem(
            c.post(
                "/v1/intents", content=b"{not json", headers={"content-type": "application/json"}
            ),
            422,
            "document_malformed",  # read by the strict loader (GLOBAL_SPEC §11a)
        )
        assert body["detail"]
        other = _meeting(user_id=BOB)
        assert BOB in _problem(c.post("/v1/intents", json=other), 422, "user_mismatch")["detail"]
        bad = _meeting()
        bad["intent"]["entities"]["duration_min"] = "soon"
        assert (
            "duration_min"
            in _problem(c.post("/v1/intents", json=bad), 422, "planning_error")["detail"]
        )
        _problem(c.get("/v1/plans/01ZZZZZZZZZZZZZZZZZZZZZZZZ"), 404, "plan_not_found")
        _problem(c.get("/v1/plans", params={"cursor": "!!"}), 422, "invalid_cursor")


def test_meeting_over_http_preview_approve_execute_once(api: Api) -> None:
    with api.client() as alice, api.client(BOB) as bob:
        r = alice.post("/v1/intents", json=_meeting())
        assert r.status_code == 201, r.text
        body = r.json()
        plan_id = body["plan_id"]
        assert body["gates"] == ["gate-A"] and body["preview"]["can_execute"], body
        assert body["plan"]["intent"]["user_id"] == ALICE
        assert api.events_in_calendar() == [] and api.smtp.messages == []  # preview never writes
        shown = alice.get(f"/v1/plans/{plan_id}").json()
        assert shown["status"] == "previewed" and shown["plan_hash"] == body["plan_hash"]
        # another user sees nothing of it
        _problem(bob.get(f"/v1/plans/{plan_id}"), 404, "plan_not_found")
        _problem(
            bob.post(f"/v1/plans/{plan_id}/gates/gate-A/approve", json={}), 404, "plan_not_found"
        )
        _problem(
            alice.post(f"/v1/plans/{plan_id}/gates/gate-Z/approve", json={}), 422, "invalid_input"
        )
        # execute without a token is refused; with one it writes once
        _problem(
            alice.post(f"/v1/plans/{plan_id}/execute", json={"tokens": {}}), 409, "execute_refused"
        )
        tok = alice.post(
            f"/v1/plans/{plan_id}/gates/gate-A/approve", json={"choice": _slot(body["preview"])}
        )
        assert tok.status_code == 200, tok.text
        token = tok.json()["token"]
        done = alice.post(f"/v1/plans/{plan_id}/execute", json={"tokens": {"gate-A": token}})
        assert done.status_code == 202, done.text
        assert done.json()["status"] == "completed"
        assert len(api.events_in_calendar()) == 1 and len(api.smtp.messages) == 2
        # the same token again: refused with its reason, nothing more written
        _problem(
            alice.post(f"/v1/plans/{plan_id}/execute", json={"tokens": {"gate-A": token}}),
            403,
            "token_reused",
        )
        assert len(api.events_in_calendar()) == 1 and len(api.smtp.messages) == 2
        assert len(api.radicale.events(BOB)) == 1  # the event is in every attendee's calendar
        shown = alice.get(f"/v1/plans/{plan_id}").json()
        assert {s["step"]: s["status"] for s in shown["steps"] if s["step"] >= 5} == {
            5: "succeeded",
            6: "succeeded",
            7: "succeeded",
            8: "succeeded",
        }
        assert shown["gates"][0]["status"] == "passed"  # approved, then its writes ran
        # PlanWriter recorded the finished plan: library counts and history, once (issue 15.5)
        entry = api.services.runtime.executor.plan_writer.library.get(plan_id)  # type: ignore[union-attr]
        # the gate's step and the four writes are done (the reads stay 'previewed'): one run
        assert entry is not None and entry.success_count == 1
        assert entry.failure_count == 0 and entry.last_used_at is not None
        # the next meeting request finds it as an exemplar
        lib = api.services.runtime.executor.plan_writer.library  # type: ignore[union-attr]
        assert [r.entry.plan_id for r in lib.retrieve(ALICE, "meeting with alice and bob")] == [
            plan_id
        ]
        # the event log says what happened, in order; resumable without loss or repeat
        events = _sse(api.base, api.keys[ALICE], plan_id)
        assert [e["id"] for e in events] == list(range(1, len(events) + 1))
        kinds = [e["event"] for e in events]
        assert kinds[0] == "plan_signed" and "preview_run" in kinds and "gate_approved" in kinds
        tail = _sse(api.base, api.keys[ALICE], plan_id, last=3)
        assert [e["id"] for e in tail] == [e["id"] for e in events[3:]]
        assert (
            fold_events([{**e["data"], "seq": e["id"]} for e in events]).status == shown["status"]
        )
        audit = alice.get("/v1/audit", params={"plan_id": plan_id}).json()["items"]
        assert len(audit) == len(events)
        _problem(alice.get("/v1/audit"), 403, "admin_only")
        _problem(bob.get("/v1/audit", params={"plan_id": plan_id}), 404, "plan_not_found")


def test_live_events_arrive_and_resume(api: Api) -> None:
    with api.client() as alice:
        plan_id = alice.post("/v1/intents", json=_meeting("Live")).json()["plan_id"]
        seen: list[dict[str, Any]] = []
        stop = threading.Event()

        def listen() -> None:
            headers = {"Authorization": f"Bearer {api.keys[ALICE]}"}
            with httpx.stream(
                "GET", f"{api.base}/v1/plans/{plan_id}/events", headers=headers, timeout=30
            ) as r:
                current: dict[str, Any] = {}
                for line in r.iter_lines():
                    if line.startswith("id:"):
                        current["id"] = int(line[3:].strip())
                    elif line.startswith("event:"):
                        current["event"] = line[6:].strip()
                    elif line == "" and current:
                        seen.append(current)
                        current = {}
                    if stop.is_set():
                        return

        t = threading.Thread(target=listen, daemon=True)
        t.start()
        deadline = datetime.now(UTC) + timedelta(seconds=20)
        while len(seen) < 2 and datetime.now(UTC) < deadline:  # signed + previewed, replayed
            threading.Event().wait(0.05)
        before = len(seen)
        assert alice.post(f"/v1/plans/{plan_id}/cancel").json()["status"] == "cancelled"
        while len(seen) == before and datetime.now(UTC) < deadline:
            threading.Event().wait(0.05)
        stop.set()
        assert seen[-1]["event"] == "plan_cancelled"
        assert [e["id"] for e in seen] == list(range(1, len(seen) + 1))
        # a cancelled plan runs nothing more
        _problem(alice.post(f"/v1/plans/{plan_id}/preview"), 409, "plan_cancelled")
        assert alice.get(f"/v1/plans/{plan_id}").json()["status"] == "cancelled"


def test_list_is_newest_first_and_paginated(api: Api) -> None:
    with api.client() as alice, api.client(BOB) as bob:
        ids = [
            alice.post("/v1/intents", json=_meeting(f"P{i}")).json()["plan_id"] for i in range(3)
        ]
        page = alice.get("/v1/plans", params={"limit": 2}).json()
        assert [p["plan_id"] for p in page["items"]] == ids[::-1][:2]
        rest = alice.get("/v1/plans", params={"limit": 2, "cursor": page["next_cursor"]}).json()
        assert [p["plan_id"] for p in rest["items"]] == ids[:1] and rest["next_cursor"] is None
        assert bob.get("/v1/plans").json()["items"] == []


def test_tampered_stored_plan_is_refused(api: Api) -> None:
    with api.client() as alice:
        plan_id = alice.post("/v1/intents", json=_meeting("T")).json()["plan_id"]
        with api.db.tx() as c:
            row = c.execute(
                text("SELECT canonical FROM plans WHERE plan_id = :p"), {"p": plan_id}
            ).one()
            doc = json.loads(bytes(row.canonical))
            doc["graph"][4]["args"]["title"] = "Other"
            c.execute(
                text("UPDATE plans SET canonical = :b WHERE plan_id = :p"),
                {"b": json.dumps(doc).encode(), "p": plan_id},
            )
        _problem(alice.post(f"/v1/plans/{plan_id}/preview"), 403, "signature_hash_mismatch")
        _problem(
            alice.post(f"/v1/plans/{plan_id}/gates/gate-A/approve", json={}),
            403,
            "signature_hash_mismatch",
        )


def test_concurrent_executes_write_once(api: Api) -> None:
    with api.client() as alice:
        body = alice.post("/v1/intents", json=_meeting("Race")).json()
        plan_id, slot = body["plan_id"], _slot(body["preview"])
        tokens = [
            alice.post(f"/v1/plans/{plan_id}/gates/gate-A/approve", json={"choice": slot}).json()[
                "token"
            ]
            for _ in range(2)
        ]

    async def both() -> list[httpx.Response]:
        async with httpx.AsyncClient(
            base_url=api.base, timeout=60, headers={"Authorization": f"Bearer {api.keys[ALICE]}"}
        ) as c:
            return list(
                await asyncio.gather(
                    *(
                        c.post(f"/v1/plans/{plan_id}/execute", json={"tokens": {"gate-A": t}})
                        for t in tokens
                    )
                )
            )

    answers = asyncio.run(both())
    assert any(r.status_code == 202 for r in answers), [r.text for r in answers]
    assert len(api.events_in_calendar()) == 1 and len(api.smtp.messages) == 2


def test_metrics_and_health(api: Api) -> None:
    with api.client() as c:
        c.get("/v1/plans")
        text_ = c.get("/metrics").text
        assert "countersign_http_request_seconds_bucket" in text_
        assert 'route="/v1/plans"' in text_
        assert c.get("/healthz").status_code == 200


def test_registry_edit_refuses_plans_signed_before(api: Api) -> None:
    with api.client() as alice, api.client("root") as root:
        body = alice.post("/v1/intents", json=_meeting("Before")).json()
        plan_id = body["plan_id"]
        caldav = alice.get("/v1/registry/connectors/caldav").json()
        assert caldav["revision"] == 0 and caldav["document"]["id"] == "caldav"
        doc = caldav["document"]
        doc["description"] = doc["description"] + " (edited)"
        _problem(alice.put("/v1/registry/connectors/caldav", json=doc), 403, "admin_only")
        # invalid: named with the registry's own error (file and field); nothing stored
        bad = {**doc, "ops": {**doc["ops"], "nope": {"description": "x"}}}
        problem = _problem(
            root.put("/v1/registry/connectors/caldav", json=bad), 422, "registry_invalid"
        )
        assert "nope" in problem["detail"]
        _problem(root.put("/v1/registry/connectors/smtp", json=doc), 422, "invalid_input")
        _problem(alice.get("/v1/registry/connectors/nothing"), 404, "registry_item_not_found")
        assert (
            alice.get("/v1/registry").json()["version"] == body["plan"]["meta"]["registry_version"]
        )
        edited = root.put("/v1/registry/connectors/caldav", json=doc)
        assert edited.status_code == 200, edited.text
        assert edited.json()["revision"] == 1
        assert edited.json()["registry_version"] != body["plan"]["meta"]["registry_version"]
        # the plan signed before the edit never runs against the new definitions
        _problem(alice.post(f"/v1/plans/{plan_id}/preview"), 409, "registry_changed")
        tok = alice.post(
            f"/v1/plans/{plan_id}/gates/gate-A/approve", json={"choice": _slot(body["preview"])}
        )
        if tok.status_code == 200:
            _problem(
                alice.post(
                    f"/v1/plans/{plan_id}/execute", json={"tokens": {"gate-A": tok.json()["token"]}}
                ),
                409,
                "registry_changed",
            )
        assert api.events_in_calendar() == []
        # a plan made now is signed against the new version and runs
        fresh = alice.post("/v1/intents", json=_meeting("After")).json()
        assert fresh["plan"]["meta"]["registry_version"] == edited.json()["registry_version"]
        assert fresh["preview"]["can_execute"]
        assert alice.get("/v1/registry/connectors/caldav").json()["revision"] == 1


def test_login_link_sets_a_session_and_writes_need_csrf(api: Api) -> None:
    users = UserStore(api.db, clock=lambda: datetime.now(UTC))
    link = users.login_link(ALICE)
    with httpx.Client(base_url=api.base, timeout=30) as browser:
        # the link's page spends nothing; its button POSTs the token (issue 26 §5)
        assert browser.get("/login", params={"token": link}).status_code == 200
        assert "set-cookie" not in browser.get("/login", params={"token": link}).headers
        r = browser.post("/login", data={"token": link})
        assert r.status_code == 303 and r.headers["location"] == "/"
        cookie = r.headers.get_list("set-cookie")
        assert any(
            "cs_session=" in c and "HttpOnly" in c and "SameSite=strict" in c for c in cookie
        ), cookie
        assert browser.get("/v1/me").json() == {"user_id": ALICE, "admin": False, "via": "session"}
        # a write without the CSRF header is refused; with it, it goes through
        _problem(browser.post("/v1/intents", json=_meeting("csrf")), 401, "unauthenticated")
        ok = browser.post(
            "/v1/intents",
            json=_meeting("csrf"),
            headers={"X-CSRF-Token": browser.cookies["cs_csrf"]},
        )
        assert ok.status_code == 201, ok.text
        # a link works once
        _problem(httpx.post(f"{api.base}/login", data={"token": link}), 401, "unauthenticated")
    # revoking the user ends the session
    users.revoke(ALICE)
    with httpx.Client(base_url=api.base, timeout=30) as c:
        _problem(
            c.get("/v1/plans", headers={"Authorization": f"Bearer {api.keys[ALICE]}"}),
            401,
            "unauthenticated",
        )


def test_chat_text_asks_then_plans(api: Api) -> None:
    with api.client() as alice, api.client(BOB) as bob:
        first = alice.post(
            "/v1/intents",
            json={"text": "schedule a meeting with Alice and Bob tomorrow afternoon"},
        )
        assert first.status_code == 200, first.text
        reply = first.json()
        cid = reply["conversation_id"]
        assert reply["intent"] == "schedule_meeting"
        assert {n["entity"] for n in reply["needs"]} == {"duration_min", "title"}
        assert {e["entity"]: e["words"] for e in reply["explained"]}["participants"] == "Alice, Bob"
        second = alice.post(
            "/v1/intents", json={"text": "30 minutes, called Sync", "conversation_id": cid}
        )
        assert second.status_code == 201, second.text
        plan = second.json()
        assert plan["gates"] == ["gate-A"] and plan["preview"]["can_execute"], plan
        assert plan["plan"]["intent"]["entities"]["title"] == "Sync"
        shown = alice.get(f"/v1/conversations/{cid}").json()
        assert [t["role"] for t in shown["turns"]] == ["person", "assistant"] * 2
        assert shown["plan_id"] == plan["plan_id"]
        _problem(bob.get(f"/v1/conversations/{cid}"), 404, "conversation_not_found")
        _problem(
            bob.post("/v1/intents", json={"text": "hi", "conversation_id": cid}),
            404,
            "conversation_not_found",
        )
        nothing = alice.post("/v1/intents", json={"text": "tell me a joke"}).json()
        assert nothing["can_do"] and nothing["intent"] is None


def test_chat_text_is_read_in_the_callers_time_zone(api: Api) -> None:
    """ "tomorrow afternoon" is the person's afternoon: the browser's zone comes with the text,
    lands in the signed intent, and moves the window; an unknown zone is named."""
    said = "schedule a 30 minute meeting with Alice and Bob tomorrow afternoon called Zones"
    with api.client() as alice:
        starts = {}
        for tz in ("UTC", "Pacific/Auckland"):
            r = alice.post("/v1/intents", json={"text": said, "tz": tz})
            assert r.status_code == 201, r.text
            intent = r.json()["plan"]["intent"]
            assert intent["tz"] == tz
            starts[tz] = intent["entities"]["window_start"]
        assert starts["UTC"] != starts["Pacific/Auckland"]
        assert "T13:00:00" in starts["UTC"]  # the afternoon starts at 13:00 local
        bad = _problem(
            alice.post("/v1/intents", json={"text": said, "tz": "Mars/Olympus"}),
            422,
            "invalid_request",
        )
        assert "Mars/Olympus" in json.dumps(bad) and "tz" in json.dumps(bad)


def test_stale_preview_says_what_changed_and_a_fresh_approval_writes(api: Api) -> None:
    """Bob's calendar changes between the preview and the execute: the execute is refused as
    ``stale_world`` with each changed read's old and new values (what the card shows); a fresh
    preview and a fresh approval then write once."""
    with api.client() as alice:
        body = alice.post("/v1/intents", json=_meeting("Stale")).json()
        plan_id = body["plan_id"]
        slot = _slot(body["preview"])
        token = alice.post(
            f"/v1/plans/{plan_id}/gates/gate-A/approve", json={"choice": slot}
        ).json()["token"]
        start, end = (
            datetime.fromisoformat(slot[k].replace("Z", "+00:00")).strftime("%Y%m%dT%H%M%SZ")
            for k in ("start", "end")
        )
        api.radicale.add_event(BOB, "late-busy", start, end, "dentist")
        stale = _problem(
            alice.post(f"/v1/plans/{plan_id}/execute", json={"tokens": {"gate-A": token}}),
            409,
            "stale_world",
        )
        assert stale["changes"], stale
        change = stale["changes"][0]
        assert set(change) == {"step", "changed"} and change["changed"], change
        old, new = next(iter(change["changed"].values()))
        assert old != new
        assert api.events_in_calendar() == [] and api.smtp.messages == []
        assert alice.get(f"/v1/plans/{plan_id}").json()["status"] == "stale"
        # look again, approve again: it writes once, in a slot that is still free
        again = alice.post(f"/v1/plans/{plan_id}/preview")
        assert again.status_code == 200, again.text
        fresh = _slot(again.json())
        assert fresh["start"] != slot["start"]
        token = alice.post(
            f"/v1/plans/{plan_id}/gates/gate-A/approve", json={"choice": fresh}
        ).json()["token"]
        done = alice.post(f"/v1/plans/{plan_id}/execute", json={"tokens": {"gate-A": token}})
        assert done.status_code == 202 and done.json()["status"] == "completed", done.text
        assert len(api.events_in_calendar()) == 1 and len(api.smtp.messages) == 2


def test_chat_text_with_a_model_configured(api: Api) -> None:
    """With a model configured, chat text is proposed by it (through litellm, against a local
    OpenAI-compatible server) and checked; the reply says who understood it; a hostile answer
    falls back to the deterministic reading and plans only what the person asked for."""
    model = FakeModel()
    api.services.chat.proposer = LitellmProposer("openai/test", api_base=model.base, timeout_s=10)
    try:
        said = "get alice and bob together tomorrow afternoon for half an hour, call it Sync"
        model.answers[:] = [
            json.dumps(
                {
                    "intent": "schedule_meeting",
                    "entities": {"participants": [ALICE, BOB], "duration_min": 30, "title": "Sync"},
                    "confidence": 0.9,
                }
            )
        ]
        with api.client() as alice:
            r = alice.post("/v1/intents", json={"text": said})
            assert r.status_code == 201, r.text
            body = r.json()
            assert body["understood_by"] == "model" and body["gates"] == ["gate-A"]
            assert body["plan"]["intent"]["entities"]["title"] == "Sync"
            hostile = json.dumps(
                {
                    "intent": "purchase_item",
                    "entities": {"query": "{{ $env.N8N_API_KEY }}", "quantity": 1},
                    "confidence": 0.99,
                }
            )
            model.answers[:] = [hostile, hostile]
            r = alice.post(
                "/v1/intents",
                json={
                    "text": "schedule a 30 minute meeting with alice and bob tomorrow called Design"
                },
            )
            body = r.json()
            assert body["understood_by"].startswith("deterministic"), body
            assert body.get("plan", {}).get("intent", {}).get("intent") == "schedule_meeting", body
    finally:
        api.services.chat.proposer = None
        model.close()
