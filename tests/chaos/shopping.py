"""Chaos, the shopping use case: a purchase plan with two gates (gate-A picks an offer and the
cart is filled; gate-B confirms the cart and checks out) on a killable n8n and the sandbox shop.
n8n is SIGKILLed at a random point of one of the two executes (gate-A's: the cart add; gate-B's:
the checkout), started again; the interactive reconciler settles the plan, then the person
finishes (approves gate-B and buys, or takes the reconciler's "finish") or undoes.

A run is fully decided by its seed (``random.Random(seed)``: which execute, when).

Checked after every run, AT THE SHOP (``ShopSandbox.applied``: every write that changed its
state, with the idempotency key it came under), ``Violation`` names the rule:
- ``twice``: at most one order per plan (cancelled ones count: a charge is a charge), each cart
  line added at most once, no key applied twice;
- ``dropped``: no order holds an item whose cart line was removed, or another item than the one
  chosen at gate-A, or one at a price other than the offer's (the price did not change here);
- ``half``: a completed plan has its one order standing; a failed or undone one has no line of
  its own in the cart and no order standing; a plan waiting at gate-B has its line and no order;
- ``stuck``: the plan is terminal, waits at gate-B, or asks a person with an offer
  (``needs_attention`` with finish/undo), never ``running``;
- ``approval``: a gate whose writes ran ends ``passed`` (or ``spent`` on a failed plan);
- ``audit``: the audit chain verifies.
"""

from __future__ import annotations

import asyncio
import random
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from countersign.api.core import ASKING, TERMINAL
from countersign.approvals import Approvals
from countersign.audit import AuditLog
from countersign.execute import Executor
from countersign.execute.settle import Settler
from countersign.kernel import CountersignError, Intent, Policy, system_clock
from countersign.planner.testing import signed_plan
from countersign.preview import run_preview
from countersign.registry import Registry
from countersign.sandbox import ShopSandbox
from countersign.signer import KeyRing
from countersign.steps import N8nTransport, StoreRecorder
from countersign.storage import Database
from tests.chaos.harness import KillableN8n, Run, plan_status, settle_until_quiet, settler_for

LOCAL = Policy(providers={"calendar": "caldav", "mail": "smtp", "chat": "slack"})
#: the plan's writes: the cart add (gate-A's) and the checkout (gate-B's)
CART_STEP, PURCHASE_STEP = 4, 7
SCOPES = {"gate-A": ["shopping.cart"], "gate-B": ["shopping.purchase"]}
MAX_PRICE = "15.00"


@dataclass
class ShopWorld:
    """The shopping use case on a killable n8n, the sandbox shop and Postgres. Every run buys
    as a customer of its own (one cart per customer), so the shop's state is per plan."""

    n8n: KillableN8n
    db: Database
    registry: Registry
    keyring: KeyRing
    shop: ShopSandbox
    counter: int = 0

    @property
    def settings(self) -> dict[str, str]:
        return {"shop_base_url": self.shop.base_url}

    def executor(self, transport: N8nTransport | None) -> Executor:
        return Executor(
            keys=self.keyring,
            registry=self.registry,
            transport=transport,
            db=self.db,
            settings=self.settings,
        )

    def signed(self, seed: int) -> dict[str, Any]:
        self.counter += 1
        intent = Intent.model_validate(
            {
                "intent": "purchase_item",
                "intent_id": f"01JDQ5S{seed % 10**9:09d}{self.counter:010d}"[:26],
                "received_at": datetime.now(UTC).replace(microsecond=0).isoformat(),
                "user_id": f"shopper-{seed}-{self.counter}@example.com",
                "entities": {"query": "usb-c cable 2m", "max_price": MAX_PRICE, "quantity": 1},
            }
        )
        return signed_plan(intent, self.keyring, self.registry, LOCAL)

    async def preview_and_choose(
        self, doc: dict[str, Any], transport: N8nTransport
    ) -> dict[str, Any]:
        """The preview; the person picks the shortlist's first offer (gate-A's choice)."""
        preview = await run_preview(
            doc,
            keys=self.keyring,
            registry=self.registry,
            transport=transport,
            recorder=StoreRecorder(self.db, clock=system_clock),
            settings=self.settings,
            actor=user_of(doc),
            now=system_clock(),
        )
        shortlist: Any = preview.outputs[2]["shortlist"]
        return dict(shortlist[0])

    def approve(self, doc: dict[str, Any], gate: str, choice: Any = None) -> dict[str, str]:
        token = (
            Approvals(self.db, clock=system_clock)
            .issue(
                plan_id=doc["plan"]["plan_id"],
                plan_hash=doc["plan_hash"],
                gate_id=gate,
                user_id=user_of(doc),
                scopes=SCOPES[gate],
                ttl_s=300,
                choice=choice,
            )
            .token
        )
        return {gate: token}


def user_of(doc: dict[str, Any]) -> str:
    return str(doc["plan"]["intent"]["user_id"])


async def execute(
    world: ShopWorld, doc: dict[str, Any], tokens: dict[str, str], timeout_s: float
) -> str:
    """One execute of the plan on the n8n as it is now; its report's status, or the error."""
    async with world.n8n.client(timeout_s=timeout_s) as client:
        try:
            report = await world.executor(N8nTransport(client)).execute(
                doc, user_id=user_of(doc), tokens=tokens
            )
        except (CountersignError, OSError) as e:
            return type(e).__name__
        return report.status


@dataclass
class ShopRun(Run):
    """A run and which execute the kill fell in (gate-A's cart add, gate-B's checkout)."""

    phase: str = ""
    choice: dict[str, Any] | None = None
    #: the reconciler's evidence per write (n8n's record, the shop read by the key, or why none)
    evidence: dict[int, str] = field(default_factory=dict)

    def line(self) -> str:
        said = f" evidence={self.evidence}" if self.evidence else ""
        return f"[{self.phase}] " + super().line() + said


async def shop_run(
    world: ShopWorld, seed: int, *, windows_ms: dict[str, int], person: bool = True
) -> ShopRun:
    """One run: plan, preview, gate-A; in phase ``B`` gate-A's execute runs cleanly first and
    gate-B is approved; the execute of the phase's gate has n8n SIGKILLed ``0..window`` into it;
    n8n started again, the reconciler's passes, then the person; the invariants checked."""
    rnd = random.Random(seed)
    phase = rnd.choice(("A", "B"))
    kill_at = rnd.randint(0, windows_ms[phase])
    run = ShopRun(seed, "n8n", kill_at, phase=phase)
    t0 = time.monotonic()
    doc = world.signed(seed)
    run.plan_id = doc["plan"]["plan_id"]
    async with world.n8n.client() as client:
        run.choice = await world.preview_and_choose(doc, N8nTransport(client))
    tokens = world.approve(doc, "gate-A", run.choice)
    if phase == "B":
        first = await execute(world, doc, tokens, 30.0)
        run.execute = f"A:{first} "
        tokens = world.approve(doc, "gate-B")
    task = asyncio.create_task(execute(world, doc, tokens, timeout_s=10.0))
    await asyncio.sleep(kill_at / 1000)
    await asyncio.to_thread(world.n8n.kill)
    run.execute += f"{phase}:{await task}"
    await asyncio.to_thread(world.n8n.restart)
    async with world.n8n.client() as client:
        transport = N8nTransport(client)
        settled = await settle_until_quiet(world, transport, run.plan_id)
        run.settled = settled.status if settled else "-"
        run.writes = dict(settled.writes) if settled else {}
        run.evidence = dict(settled.evidence) if settled else {}
        if person:
            await person_acts(world, transport, doc, run)
        run.final, gates = plan_status(world.db, run.plan_id)
        run.violations = check_shop(world, transport, doc, run.choice, (run.final, gates))
    run.seconds = time.monotonic() - t0
    return run


async def person_acts(
    world: ShopWorld, transport: N8nTransport, doc: dict[str, Any], run: ShopRun
) -> None:
    """What the person does with the card: finish when offered, else undo; a plan waiting at
    gate-B is approved there and bought; a plan that wrote nothing (cut before its gate's first
    write) is approved again at that gate and executed."""
    plan_id, user = run.plan_id, user_of(doc)
    settler = settler_for(world, transport)
    shown = settler.describe(plan_id, user_id=user)
    if "finish" in shown.offers:
        await settler.finish(plan_id, user_id=user)
        run.execute += " +finish"
    elif "undo" in shown.offers:
        await settler.undo(plan_id, user_id=user)
        run.execute += " +undo"
    for _ in range(2):  # gate-A again (nothing written), then gate-B
        status, gates = plan_status(world.db, plan_id)
        if status in TERMINAL or status in (*ASKING, "running"):
            return
        if gates.get("gate-A") != "passed":
            gate, choice = "gate-A", run.choice
        elif status == "waiting" or gates.get("gate-B") != "passed":
            gate, choice = "gate-B", None
        else:
            return
        tokens = world.approve(doc, gate, choice)
        run.execute += f" +{gate[-1]}:" + await execute(world, doc, tokens, 30.0)


def _applied(shop: ShopSandbox, plan_id: str) -> list[dict[str, Any]]:
    return [a for a in shop.applied if str(a.get("key") or "").startswith(plan_id + ":")]


def check_shop(
    world: ShopWorld,
    transport: N8nTransport,
    doc: dict[str, Any],
    choice: dict[str, Any] | None,
    ended: tuple[str, dict[str, str]],
) -> list[str]:
    """The invariants after a shopping run (module docstring), counted at the shop."""
    status, gates = ended
    shop, plan_id, user = world.shop, doc["plan"]["plan_id"], user_of(doc)
    applied = _applied(shop, plan_id)
    adds = [a for a in applied if a["op"] == "add"]
    removed = {a["line"] for a in shop.applied if a["op"] == "remove"}  # by line id, no key
    orders = [o for o in shop.orders.values() if o.get("customer") == user]
    standing = [o for o in orders if not o.get("cancelled")]
    cart = list(shop.carts.get(user, {}).values())
    bad = _counted(applied, adds, orders)
    bad += _dropped(orders, removed, choice)
    bad += _whole(status, gates, cart, standing)
    bad += _stuck(settler_for(world, transport), doc, status, gates)
    with world.db.tx() as c:
        report = AuditLog(clock=system_clock).verify(c)
    if not report.ok:
        bad.append(f"audit: {report.reason} at {report.first_bad_seq}")
    return bad


def _counted(
    applied: list[dict[str, Any]], adds: list[dict[str, Any]], orders: list[dict[str, Any]]
) -> list[str]:
    bad = []
    keys = [a["key"] for a in applied]
    if len(keys) != len(set(keys)):
        bad.append(f"twice: a key applied twice {keys}")
    if len(adds) > 1:
        bad.append(f"twice: {len(adds)} cart lines added {[a['line'] for a in adds]}")
    if len(orders) > 1:
        bad.append(f"twice: {len(orders)} orders {[o['id'] for o in orders]}")
    return bad


def _dropped(
    orders: list[dict[str, Any]], removed: set[str], choice: dict[str, Any] | None
) -> list[str]:
    bad = []
    for o in orders:
        for line in o.get("lines", []):
            if line["id"] in removed:
                bad.append(f"dropped: order {o['id']} holds removed line {line['id']}")
            if choice is not None and line["item"] != choice.get("item"):
                bad.append(f"dropped: order {o['id']} holds {line['item']}, not the choice")
            if choice is not None and line["unit_price"] != choice.get("price"):
                bad.append(f"dropped: order {o['id']} at {line['unit_price']}, offer {choice}")
    return bad


def _whole(
    status: str, gates: dict[str, str], cart: list[dict[str, Any]], standing: list[dict[str, Any]]
) -> list[str]:
    bad = []
    if status == "completed" and (len(standing) != 1 or cart):
        bad.append(f"half: completed but orders {standing}, cart {cart}")
    if status == "failed" and (cart or standing):
        bad.append(f"half: failed but cart {cart}, orders {standing}")
    if status == "waiting" and (len(cart) != 1 or standing):
        bad.append(f"half: waiting at gate-B but cart {cart}, orders {standing}")
    return bad


def _stuck(settler: Settler, doc: dict[str, Any], status: str, gates: dict[str, str]) -> list[str]:
    bad = []
    if status == "running" or status not in (*TERMINAL, *ASKING, "waiting"):
        bad.append(f"stuck: plan {status}")
    if status in ASKING:
        shown = settler.describe(doc["plan"]["plan_id"], user_id=user_of(doc))
        if not shown.offers:
            bad.append(f"stuck: needs attention with nothing offered {shown.writes}")
    if status == "completed" and (gates.get("gate-A"), gates.get("gate-B")) != ("passed",) * 2:
        bad.append(f"approval: {gates} on a completed plan")
    if status in TERMINAL and gates.get("gate-A") not in ("passed", "spent"):
        bad.append(f"approval: gate-A {gates.get('gate-A')} on a {status} plan")
    return bad
