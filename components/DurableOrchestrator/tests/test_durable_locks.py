"""The durable and the interactive runtimes contend for the same resource lock (issue 26 §2):
while the key a durable booking needs (``visa:<consulate>``) is held the way an interactive gate
holds it (``storage.ResourceLocks`` on the same database), the durable ``write_step`` waits and
books nothing; once released, it books exactly once (and a second call of the same step books
nothing more: the idempotency key).

Real Postgres, the sandbox visa service; the activity runs in temporalio's ActivityEnvironment.
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any

from temporalio.testing import ActivityEnvironment

from countersign.durable import DurableActivities, StepCall
from countersign.durable.testing import sandbox_fixture  # noqa: F401  (fixture)
from countersign.kernel import Intent, Plan, Policy, SignedPlan, system_clock
from countersign.planner import make_plan
from countersign.planner.testing import signed_plan
from countersign.registry import Registry
from countersign.sandbox import VisaSandbox
from countersign.signer import KeyRing
from countersign.storage import Database, ResourceLocks

LOCAL = Policy(providers={"calendar": "caldav", "mail": "smtp", "chat": "slack"})
KEY = "visa:lisbon"


def _signed(registry: Registry, keyring: KeyRing, n: int) -> dict[str, Any]:
    now = system_clock().replace(microsecond=0).isoformat().replace("+00:00", "Z")
    intent = Intent.model_validate(
        {
            "intent": "watch_visa_slots",
            "intent_id": f"01JDQ3Z0000000000000K{n:05d}",
            "received_at": now,
            "user_id": "alice@example.com",
            "entities": {
                "consulate": "lisbon",
                "date_from": "2027-03-01T00:00:00Z",
                "date_to": "2027-03-31T00:00:00Z",
                "notify_to": "alice@example.com",
            },
        }
    )
    plan = make_plan(intent, [], registry, LOCAL)
    assert isinstance(plan, Plan)
    assert plan.step(3).call == "book_slot"
    return signed_plan(plan, keyring)


def _book(acts: DurableActivities, doc: dict[str, Any]) -> Any:
    call = StepCall(
        signed=doc,
        user_id="alice@example.com",
        step=3,
        gate_id="gate-A",
        choice={"slot": "slot-1"},
    )
    return ActivityEnvironment().run(acts.write_step, call)


def _hold(db: Database, held: threading.Event, release: threading.Event) -> None:
    async def go() -> None:
        async with ResourceLocks(db).hold([KEY]):
            held.set()
            await asyncio.to_thread(release.wait, 30)

    asyncio.run(go())


def test_a_durable_write_waits_for_the_key_an_interactive_gate_holds(
    db: Database, registry: Registry, keyring: KeyRing, sandbox: VisaSandbox
) -> None:
    sandbox.fixed_slot = True
    acts = DurableActivities(
        db, keys=keyring, registry=registry, settings={"visa_base_url": sandbox.url}
    )
    doc = _signed(registry, keyring, 1)
    ActivityEnvironment().run(acts.verify_plan, SignedPlan.model_validate(doc))  # stores it
    held, release = threading.Event(), threading.Event()
    holder = threading.Thread(target=_hold, args=(db, held, release))
    holder.start()
    assert held.wait(10)
    out: dict[str, Any] = {}
    writer = threading.Thread(target=lambda: out.setdefault("r", _book(acts, doc)))
    writer.start()
    time.sleep(1.0)
    try:
        assert writer.is_alive() and sandbox.bookings == {}, "it waits while the key is held"
    finally:
        release.set()
        holder.join(10)
    writer.join(30)
    assert not writer.is_alive() and len(sandbox.bookings) == 1, sandbox.bookings
    assert _book(acts, doc) is not None and len(sandbox.bookings) == 1  # the key: once
