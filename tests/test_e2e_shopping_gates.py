"""Two gates with a write between them, on real n8n and a sandbox shop (issue 10, hole 8).

Gate-A picks an offer, the cart is filled; execution then stops at gate-B with a fresh view of
what gate-B guards (the cart line the write made, with the total), and continues when gate-B's
token arrives. A failed purchase undoes the cart line and reports what changed.
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from typing import Any

import pytest

from countersign.approvals import Approvals, TokenGateMismatchError
from countersign.execute import ExecuteRefusedError, Executor, StaleWorldError
from countersign.kernel import Intent, Policy, system_clock
from countersign.n8n import N8nClient, N8nHandle
from countersign.planner.testing import signed_plan
from countersign.preview import run_preview
from countersign.registry import Registry
from countersign.sandbox import ShopSandbox
from countersign.signer import KeyRing
from countersign.steps import N8nTransport, StoreRecorder
from countersign.storage import Database

LOCAL = Policy(providers={"calendar": "caldav", "mail": "smtp", "chat": "slack"})
USER = "alice@example.com"
_n = iter(range(1, 10_000))


def _signed(registry: Registry, keyring: KeyRing, max_price: str = "15.00") -> dict[str, Any]:
    n = next(_n)
    intent = Intent.model_validate(
        {
            "intent": "purchase_item",
            "intent_id": f"01JDQ3Z00000000000000{n:05d}",
            "received_at": datetime.now(UTC).replace(microsecond=0).isoformat(),
            "user_id": USER,
            "entities": {"query": "usb-c cable 2m", "max_price": max_price, "quantity": 1},
        }
    )
    return signed_plan(intent, keyring, registry, LOCAL)


def _token(
    db: Database, doc: dict[str, Any], gate: str, scopes: list[str], choice: Any = None
) -> str:
    return (
        Approvals(db, clock=system_clock)
        .issue(
            plan_id=doc["plan"]["plan_id"],
            plan_hash=doc["plan_hash"],
            gate_id=gate,
            user_id=USER,
            scopes=scopes,
            ttl_s=300,
            choice=choice,
        )
        .token
    )


def _flow(
    n8n: N8nHandle, db: Database, registry: Registry, keyring: KeyRing, shop: ShopSandbox, **kw: Any
) -> Any:
    settings = {"shop_base_url": shop.base_url}
    doc = _signed(registry, keyring, **kw)

    async def go() -> Any:
        async with N8nClient(n8n.base_url, n8n.api_key) as client:
            transport = N8nTransport(client)
            preview = await run_preview(
                doc,
                keys=keyring,
                registry=registry,
                transport=transport,
                recorder=StoreRecorder(db, clock=system_clock),
                settings=settings,
                actor=USER,
                now=system_clock(),
            )
            shortlist: Any = preview.outputs[2]["shortlist"]
            ex = Executor(
                keys=keyring, registry=registry, transport=transport, db=db, settings=settings
            )
            first = await ex.execute(
                doc,
                user_id=USER,
                tokens={"gate-A": _token(db, doc, "gate-A", ["shopping.cart"], shortlist[0])},
            )
            return doc, shortlist, first

    return asyncio.run(go())


async def _execute(
    n8n: N8nHandle,
    db: Database,
    registry: Registry,
    keyring: KeyRing,
    shop: ShopSandbox,
    doc: dict[str, Any],
    tokens: dict[str, str] | None = None,
) -> Any:
    async with N8nClient(n8n.base_url, n8n.api_key) as client:
        ex = Executor(
            keys=keyring,
            registry=registry,
            transport=N8nTransport(client),
            db=db,
            settings={"shop_base_url": shop.base_url},
        )
        return await ex.execute(doc, user_id=USER, tokens=tokens)


def test_execution_waits_at_gate_b_with_the_cart_in_view_then_purchases(
    n8n: N8nHandle, db: Database, registry: Registry, keyring: KeyRing, shop_sandbox: ShopSandbox
) -> None:
    doc, shortlist, first = _flow(n8n, db, registry, keyring, shop_sandbox)
    env = (n8n, db, registry, keyring, shop_sandbox, doc)
    assert shortlist[0]["item"] == "cable-a"
    assert first.status == "waiting" and first.waiting_gate == "gate-B"
    assert [(w.step, w.status) for w in first.wrappers] == [(4, "created")]
    cart_line = first.gate_preview["done"]["4"]
    assert cart_line["item"] == "cable-a" and cart_line["cart_total"] == "9.90"
    assert first.gate_preview["guards"] == [7]
    # gate-B reviews the cart as the shop holds it (step 5 reads it afresh), not the plan's idea
    assert first.gate_preview["reads"]["5"]["lines"][0]["item"] == "cable-a"
    assert first.gate_preview["reads"]["5"]["cart_total"] == "9.90"
    assert [a[:2] for a in shop_sandbox.arrivals if a[0] != "GET"] == [("POST", "/cart")]

    async def rest() -> None:
        # asking again without gate-B's token: still waiting, nothing sent
        again = await _execute(*env)
        assert again.status == "waiting" and again.waiting_gate == "gate-B"
        # gate-A's token for gate-B: refused before anything runs
        with pytest.raises(TokenGateMismatchError):
            await _execute(
                *env, {"gate-B": _token(db, doc, "gate-A", ["shopping.cart"], shortlist[0])}
            )
        done = await _execute(*env, {"gate-B": _token(db, doc, "gate-B", ["shopping.purchase"])})
        assert done.status == "completed"
        assert [(w.step, w.status) for w in done.wrappers] == [(7, "created")]
        with pytest.raises(ExecuteRefusedError):
            await _execute(*env)

    asyncio.run(rest())
    writes = [a[:2] for a in shop_sandbox.arrivals if a[0] != "GET"]
    assert writes == [("POST", "/cart"), ("POST", "/checkout")]
    assert [o["total"] for o in shop_sandbox.orders.values()] == ["9.90"]
    assert all(a[2] for a in shop_sandbox.arrivals if a[0] == "POST")  # every write carried a key


def test_a_price_change_before_gate_b_is_stale_and_names_old_and_new(
    n8n: N8nHandle, db: Database, registry: Registry, keyring: KeyRing, shop_sandbox: ShopSandbox
) -> None:
    """The price changes after the person saw gate-B's view: the purchase is refused as stale,
    the error names the old and new price, nothing more is written."""
    doc, _, first = _flow(n8n, db, registry, keyring, shop_sandbox)
    assert first.status == "waiting"
    shop_sandbox.prices["cable-a"] = "14.00"
    with pytest.raises(StaleWorldError) as info:
        asyncio.run(
            _execute(
                n8n,
                db,
                registry,
                keyring,
                shop_sandbox,
                doc,
                {"gate-B": _token(db, doc, "gate-B", ["shopping.purchase"])},
            )
        )
    changed = {c.step: c.summary()["changed"] for c in info.value.changes}
    old, new = changed[1]["offers"]
    assert "9.90" in repr(old) and "14.00" in repr(new)
    assert "9.90" in info.value.message and "14.00" in info.value.message
    assert [a[:2] for a in shop_sandbox.arrivals if a[0] != "GET"] == [("POST", "/cart")]


def test_a_refused_purchase_undoes_the_cart_and_says_what_changed(
    n8n: N8nHandle, db: Database, registry: Registry, keyring: KeyRing, shop_sandbox: ShopSandbox
) -> None:
    """The price rises the moment the purchase arrives: checkout refuses (409), the cart line
    the earlier gate's write made is removed (compensation), and the report names what changed
    in the reads the purchase depended on."""
    doc, _, first = _flow(n8n, db, registry, keyring, shop_sandbox)
    assert first.status == "waiting"
    shop_sandbox.reprice_at_checkout = {"cable-a": "16.00"}
    report = asyncio.run(
        _execute(
            n8n,
            db,
            registry,
            keyring,
            shop_sandbox,
            doc,
            {"gate-B": _token(db, doc, "gate-B", ["shopping.purchase"])},
        )
    )
    assert report.status == "failed"
    assert [(w.step, w.status) for w in report.wrappers] == [(7, "error")]
    assert report.compensated == [4]
    assert shop_sandbox.cart == {} and shop_sandbox.orders == {}
    writes = [a[:2] for a in shop_sandbox.arrivals if a[0] != "GET"]
    assert writes == [("POST", "/cart"), ("POST", "/checkout"), ("DELETE", "/cart/line-1")]
    changed = {c.step: c.summary()["changed"] for c in report.stale}
    old, new = changed[1]["offers"]
    assert "9.90" in repr(old) and "16.00" in repr(new)


def test_a_cart_over_the_budget_is_refused_before_gate_b(
    n8n: N8nHandle, db: Database, registry: Registry, keyring: KeyRing, shop_sandbox: ShopSandbox
) -> None:
    """The budget in the intent ("under 15 euros") holds at gate-B: the cart already held another
    line, so after gate-A's write it totals 22.40; gate-B's writes are refused before anything is
    sent (``over_budget``, naming the total and the limit), audited, nothing bought."""
    from sqlalchemy import text

    from countersign.steps import OverBudgetError

    shop_sandbox.carts.setdefault(USER, {})["line-0"] = {
        "id": "line-0",
        "item": "cable-b",
        "quantity": 1,
        "unit_price": "12.50",
    }
    doc, _, first = _flow(n8n, db, registry, keyring, shop_sandbox)
    assert first.status == "waiting" and first.waiting_gate == "gate-B"
    assert first.gate_preview["done"]["4"]["cart_total"] == "22.40"
    with pytest.raises(OverBudgetError, match=r"22\.40.*15\.00"):
        asyncio.run(
            _execute(
                n8n,
                db,
                registry,
                keyring,
                shop_sandbox,
                doc,
                {"gate-B": _token(db, doc, "gate-B", ["shopping.purchase"])},
            )
        )
    assert [a[:2] for a in shop_sandbox.arrivals if a[0] != "GET"] == [("POST", "/cart")]
    assert shop_sandbox.orders == {}
    with db.tx() as c:
        reasons = c.execute(
            text("SELECT reason FROM audit_log WHERE plan_id = :p AND kind = 'execute_refused'"),
            {"p": doc["plan"]["plan_id"]},
        ).scalars()
        assert "over_budget" in list(reasons)
