"""The shop probe (``execute.probes.shop_write``): settles a lost shop write from the shop's
record of what it applied under the write's idempotency key — never from the args alone, never
by sending the write again."""

from __future__ import annotations

import asyncio
from typing import Any

import httpx

from countersign.execute.probes import default_probes, shop_write
from countersign.kernel import PlanStep
from countersign.n8n import free_port
from countersign.registry import Registry
from countersign.sandbox import serve_shop

KEY = "01JPLANAAAAAAAAAAAAAAAAAAA:4:abc"
OTHER = "01JPLANBBBBBBBBBBBBBBBBBBB:4:abc"  # another plan, the same args


def _step(call: str, n: int) -> PlanStep:
    return PlanStep.model_validate(
        {"step": n, "mode": "interactive", "role": "Booker", "uses": "shop.sandbox"}
        | {"call": call, "args": {}, "after": [], "gate_id": None, "dry_run": False}
    )


ADD, BUY = _step("add_to_cart", 4), _step("purchase", 7)
ARGS = {"item": "cable-a", "quantity": 1, "customer": "alice@example.com"}


def _probe(step: PlanStep, base: str, key: str = KEY) -> tuple[str, Any]:
    return asyncio.run(shop_write(step, ARGS, {"shop_base_url": base}, key))


def _post(base: str, path: str, body: dict[str, Any], key: str) -> httpx.Response:
    return httpx.post(base + path, json=body, headers={"Idempotency-Key": key}, timeout=5)


def test_a_cart_add_applied_under_the_key_is_completed_with_the_line() -> None:
    with serve_shop() as shop:
        assert _post(shop.base_url, "/cart", ARGS, KEY).status_code == 200
        verdict, out = _probe(ADD, shop.base_url)
    assert verdict == "completed"
    assert out["id"] == "line-1" and out["item"] == "cable-a" and out["cart_total"] == "9.90"


def test_nothing_under_the_key_is_failed_even_when_another_plan_made_the_same_write() -> None:
    with serve_shop() as shop:
        _post(shop.base_url, "/cart", ARGS, OTHER)
        assert _probe(ADD, shop.base_url) == ("failed", None)
        assert len(shop.cart) == 1  # the probe read, it wrote nothing
        assert [a[0] for a in shop.arrivals] == ["POST", "GET"]


def test_a_refused_checkout_left_nothing_under_its_key() -> None:
    with serve_shop() as shop:
        _post(shop.base_url, "/cart", ARGS, OTHER)
        body = {"max_total": "5.00", "customer": "alice@example.com"}
        assert _post(shop.base_url, "/checkout", body, KEY).status_code == 409
        assert _probe(BUY, shop.base_url) == ("failed", None)
        body["max_total"] = "15.00"
        assert _post(shop.base_url, "/checkout", body, KEY).status_code == 200
        verdict, order = _probe(BUY, shop.base_url)
    assert verdict == "completed" and order["id"] == "order-1" and order["total"] == "9.90"


def test_what_the_probe_cannot_read_stays_unknown() -> None:
    with serve_shop() as shop:
        _post(shop.base_url, "/cart", ARGS, KEY)
        # no key (a caller that has none), another op's record, a shop without the read (its
        # 404 for an unknown route names no key), the shop down
        assert _probe(ADD, shop.base_url, key="") == ("unknown", None)
        assert _probe(BUY, shop.base_url) == ("unknown", None)
        assert _probe(ADD, shop.base_url + "/nowhere") == ("unknown", None)
        assert _probe(_step("view_cart", 5), shop.base_url) == ("unknown", None)
    assert _probe(ADD, f"http://127.0.0.1:{free_port()}") == ("unknown", None)
    assert _probe(ADD, "") == ("unknown", None)


def test_the_shop_writes_are_registered() -> None:
    probes = default_probes()
    assert probes["shop.sandbox.add_to_cart"] is shop_write
    assert probes["shop.sandbox.purchase"] is shop_write


def test_every_write_the_registry_calls_probed_has_a_probe(registry: Registry) -> None:
    """WorkflowBuilder drops n8n's progress saving for a write the registry calls ``probe``:
    its settling then relies on a probe, so each one must exist here (and a probe of a write the
    registry does not call probed, the sandbox's mailbox, is a bonus that changes nothing)."""
    probes = default_probes()
    probed = {
        f"{cid}.{name}"
        for cid, conn in registry.connectors.items()
        for name, op in conn.ops.items()
        if op.probe
    }
    assert probed == {"caldav.create_event", "shop.sandbox.add_to_cart", "shop.sandbox.purchase"}
    assert probed <= set(probes), sorted(probed - set(probes))
    assert not registry.op("smtp", "send").probe  # a real mail server cannot be read back
