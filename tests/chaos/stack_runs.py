"""The use cases the stack chaos suite drives through the HTTP API (``tests/chaos/stack.py``): a
meeting (sentence → preview → approve → execute, the kill inside the execute) and the visa watcher
(a durable Temporal workflow: started, its slot found, gate-A approved, the kill inside the
booking), each run's invariants counted at the sandbox providers."""

from __future__ import annotations

import os
import random
import re
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

import httpx

from countersign.api.core import TERMINAL
from tests.chaos.stack import (
    MEETING_KILLS,
    SETTLE_DEADLINE_S,
    VISA_KILLS,
    Call,
    ChaosStack,
    StackRun,
    audit_ok,
    gate_status,
    kill_during,
    plan_state,
    post_setup,
    wait_settled,
)


# ---- the meeting -----------------------------------------------------------------------------------
@dataclass
class Meeting:
    """A meeting planned through an API, up to its approval."""

    user: str
    partner: str
    title: str
    plan_id: str
    uid: str
    token: str
    choice: dict[str, str]


def plan_meeting(s: ChaosStack, api: int, user: str, partner: str, title: str) -> Meeting:
    """Sentence → preview → approve on API ``api``."""
    with s.client(api, user) as c:
        first = post_setup(c, "/v1/intents", {"text": f"set up a meeting with {partner} tomorrow"})
        more = {"conversation_id": first.json()["conversation_id"]}
        body = post_setup(c, "/v1/intents", {"text": f"30 minutes, called {title}"} | more).json()
        plan_id = body["plan_id"]
        slot = body["preview"]["normalized"]["steps"]["3"]["slots"][0]
        end = datetime.fromisoformat(slot["start"].replace("Z", "+00:00")) + timedelta(minutes=30)
        choice = {"start": slot["start"], "end": end.strftime("%Y-%m-%dT%H:%M:%SZ")}
        token = c.post(f"/v1/plans/{plan_id}/gates/gate-A/approve", json={"choice": choice})
        graph = c.get(f"/v1/plans/{plan_id}").json()["plan"]["graph"]
    uid = str(graph[4]["args"]["uid"])
    return Meeting(user, partner, title, plan_id, uid, token.json()["token"], choice)


def execute_meeting(s: ChaosStack, api: int, m: Meeting, token: str | None = None) -> Call:
    def call() -> httpx.Response:
        with s.client(api, m.user, timeout_s=170) as c:
            body = {"tokens": {"gate-A": token or m.token}}
            return c.post(f"/v1/plans/{m.plan_id}/execute", json=body)

    return Call(call)


def meeting_effects(s: ChaosStack, m: Meeting) -> dict[str, tuple[int, int]]:
    """Per person: (events with the meeting's UID, mails with its title)."""
    mails = httpx.get(f"{s.urls['mailbox']}/messages", timeout=10).json()["messages"]
    out = {}
    for who in (m.user, m.partner):
        r = httpx.request(
            "PROPFIND", f"{s.urls['caldav']}/{who}/calendar/", headers={"Depth": "1"}, timeout=10
        )
        events = len(re.findall(re.escape(f"{m.uid}.ics") + "</", r.text))
        sent = sum(1 for x in mails if x["subject"] == m.title and x["to"] == who)
        out[who] = (events, sent)
    return out


def meeting_run(s: ChaosStack, seed: int, *, window_ms: int, user: str, partner: str) -> StackRun:
    """One run: plan and approve a meeting, execute it with one process SIGKILLed
    ``0..window_ms`` into the execute, start the process again, let the plan end (the stack's
    passes, then the person's finish or undo if asked), check the invariants."""
    rnd = random.Random(seed)
    run = StackRun(seed, "meeting", rnd.choice(MEETING_KILLS), rnd.randint(0, window_ms))
    api = {"api-1": 0, "api-2": 1}.get(run.process, rnd.randint(0, 1))
    t0 = time.monotonic()
    m = plan_meeting(s, api, user, partner, f"Chaos {seed} {os.urandom(3).hex()}")
    run.plan_id = m.plan_id
    kill_during(s, run, execute_meeting(s, api, m))
    state = wait_settled(s, user, m.plan_id, SETTLE_DEADLINE_S)
    run.person = _meeting_person(s, m, state)
    if run.person:
        state = wait_settled(s, user, m.plan_id, 60)
    run.final = str(state.get("status", "?"))
    run.violations = check_meeting(s, m, state)
    run.seconds = time.monotonic() - t0
    return run


def _meeting_person(s: ChaosStack, m: Meeting, state: dict[str, Any]) -> str:
    """What a person does with the card: finish when offered, else undo; a plan that never
    wrote (its execute died before its first write; before it redeemed the token, the plan is
    still ``previewed``) is approved again and executed."""
    offers = state.get("offers") or []
    with s.client(0, m.user) as c:
        if offers:
            act = "finish" if "finish" in offers else "undo"
            r = c.post(f"/v1/plans/{m.plan_id}/{act}")
            return f"{act}:{r.status_code}"
        if state.get("status") in ("approved", "waiting", "previewed"):
            again = c.post(f"/v1/plans/{m.plan_id}/gates/gate-A/approve", json={"choice": m.choice})
            if again.status_code != 200:
                return f"approve-again:{again.status_code}"
            return "again:" + execute_meeting(s, 0, m, again.json()["token"]).join(180)
    return ""


def check_meeting(s: ChaosStack, m: Meeting, state: dict[str, Any]) -> list[str]:
    """The invariants after a meeting run (module docstring)."""
    bad: list[str] = []
    effects = meeting_effects(s, m)
    events = [e for e, _ in effects.values()]
    mails = [n for _, n in effects.values()]
    status = state.get("status")
    if max(events + mails) > 1:
        bad.append(f"twice: {effects}")
    if len(set(events)) > 1:
        bad.append(f"half: {effects}")
    if status not in TERMINAL and not state.get("offers"):
        bad.append(f"stuck: plan {status} after {SETTLE_DEADLINE_S:.0f} s, nothing offered")
    gate = gate_status(state, "gate-A")
    if status in TERMINAL and gate not in ("passed", "spent"):
        bad.append(f"approval: gate-A {gate} on a {status} plan")
    if status == "completed" and (events != [1, 1] or mails != [1, 1]):
        bad.append(f"log: completed but the providers hold {effects}")
    if status == "failed" and any(events):
        bad.append(f"log: failed but events stand {effects}")
    if said := audit_ok(s):
        bad.append(f"audit: {said}")
    return bad


# ---- the visa watcher ------------------------------------------------------------------------------
@dataclass
class Watcher:
    """A visa watcher started through an API, its slot found, waiting for gate-A."""

    user: str
    plan_id: str
    slot_id: str
    bookings: int
    mails: int


VISA_SENTENCE = "watch the lisbon consulate for a visa slot in march and mail me at {user}"
BOOKED = "Visa appointment booked"


def visa_state(s: ChaosStack) -> dict[str, Any]:
    out: dict[str, Any] = httpx.get(f"{s.urls['visa']}/_sandbox/state", timeout=10).json()
    return out


def booked_mails(s: ChaosStack, user: str) -> int:
    r = httpx.get(f"{s.urls['mailbox']}/messages", params={"to": user}, timeout=10)
    return sum(1 for m in r.json()["messages"] if m["subject"] == BOOKED)


def start_watcher(s: ChaosStack, api: int, user: str) -> Watcher:
    """Sentence → execute (handed to Temporal) → the slot the watcher found (audit)."""
    with s.client(api, user) as c:
        body = post_setup(c, "/v1/intents", {"text": VISA_SENTENCE.format(user=user)}).json()
        plan_id = body["plan_id"]
        before, mails = len(visa_state(s)["bookings"]), booked_mails(s, user)
        httpx.post(f"{s.urls['visa']}/_sandbox/slots", timeout=10)
        started = post_setup(c, f"/v1/plans/{plan_id}/execute", {"tokens": {}})
        if started.json().get("status") != "handed_off":
            raise RuntimeError(f"the watcher was not handed off: {started.text[:300]}")
        end = time.monotonic() + 90
        while time.monotonic() < end:
            items = c.get("/v1/audit", params={"plan_id": plan_id}).json()["items"]
            found = [e for e in items if e["kind"] == "watcher_polled" and e["status"] == "found"]
            if found:
                slot = str(found[-1]["details"]["found"]["slots"][0]["id"])
                return Watcher(user, plan_id, slot, before, mails)
            time.sleep(1.0)
    raise RuntimeError(f"the watcher {plan_id} found no slot within 90 s")


def approve_watcher(s: ChaosStack, api: int, w: Watcher) -> Call:
    def call() -> httpx.Response:
        with s.client(api, w.user, timeout_s=170) as c:
            body = {"choice": {"slot": {"id": w.slot_id}}}
            return c.post(f"/v1/plans/{w.plan_id}/gates/gate-A/approve", json=body)

    return Call(call)


def visa_run(s: ChaosStack, seed: int, *, window_ms: int, user: str) -> StackRun:
    """One run: a watcher started, its slot found, gate-A approved with one process SIGKILLed
    ``0..window_ms`` after the approval was sent (the booking runs on a durable worker); the
    process started again, the run let to end on Temporal; the invariants checked."""
    rnd = random.Random(seed)
    run = StackRun(seed, "visa", rnd.choice(VISA_KILLS), rnd.randint(0, window_ms))
    api = {"api-1": 0, "api-2": 1}.get(run.process, rnd.randint(0, 1))
    t0 = time.monotonic()
    w = start_watcher(s, api, user)
    run.plan_id = w.plan_id
    kill_during(s, run, approve_watcher(s, api, w))
    if not run.request.startswith("200"):  # the approval died with the request: was it kept?
        time.sleep(5.0)
        if gate_status(plan_state(s, user, w.plan_id), "gate-A") not in ("passed", "spent"):
            # not recorded: the watcher still waits for it, the person approves again
            run.person = "approve-again:" + approve_watcher(s, 0, w).join(120)
    state = wait_settled(s, user, w.plan_id, SETTLE_DEADLINE_S)
    run.final = str(state.get("status", "?"))
    run.violations = check_visa(s, w, state)
    if run.final not in ("completed", "failed", "cancelled"):
        with s.client(0, user) as c:  # the next run's watcher must not meet this one
            c.post(f"/v1/plans/{w.plan_id}/cancel")
    run.seconds = time.monotonic() - t0
    return run


def check_visa(s: ChaosStack, w: Watcher, state: dict[str, Any]) -> list[str]:
    """At most one booking (of the run's slot), one confirmation; a completed run booked and
    mailed once; the plan terminal; the approval passed; the audit chain whole."""
    bad: list[str] = []
    bookings = visa_state(s)["bookings"]
    ours = [b for b in bookings if _slot_id(b) == w.slot_id]
    mails = booked_mails(s, w.user) - w.mails
    status = state.get("status")
    if len(bookings) - w.bookings > 1 or len(ours) > 1 or mails > 1:
        bad.append(
            f"twice: {len(bookings) - w.bookings} bookings, {len(ours)} of the slot, {mails} mails"
        )
    if status not in TERMINAL and not state.get("offers"):
        bad.append(f"stuck: plan {status} after {SETTLE_DEADLINE_S:.0f} s, nothing offered")
    if status == "completed" and (len(ours) != 1 or mails != 1):
        bad.append(f"log: completed with {len(ours)} bookings of its slot and {mails} mails")
    gate = gate_status(state, "gate-A")
    if status == "completed" and gate != "passed":
        bad.append(f"approval: gate-A {gate} on a completed watcher")
    if said := audit_ok(s):
        bad.append(f"audit: {said}")
    return bad


def _slot_id(booking: dict[str, Any]) -> str:
    slot = booking.get("slot")
    return str(slot.get("id") if isinstance(slot, dict) else slot)
