"""The sandbox shop's record of applied writes: ``GET /writes?key=`` (what a lost write's probe
reads) and ``ShopSandbox.applied`` (what chaos tests count effects by)."""

from __future__ import annotations

import httpx

from countersign.sandbox import serve_shop

WHO = "alice@example.com"


def test_writes_are_kept_by_key_once_and_refusals_are_not() -> None:
    with serve_shop() as shop:
        base = shop.base_url
        add = {"item": "cable-a", "quantity": 1, "customer": WHO}
        for _ in range(2):  # a replay answers the first answer and applies nothing
            r = httpx.post(f"{base}/cart", json=add, headers={"Idempotency-Key": "k1"})
            assert r.json()["id"] == "line-1"
        over = {"max_total": "1.00", "customer": WHO}
        assert (
            httpx.post(f"{base}/checkout", json=over, headers={"Idempotency-Key": "k2"}).status_code
            == 409
        )
        ok = {"max_total": "15.00", "customer": WHO}
        order = httpx.post(f"{base}/checkout", json=ok, headers={"Idempotency-Key": "k3"}).json()
        assert httpx.post(f"{base}/orders/{order['id']}/cancel").status_code == 200
        kept = httpx.get(f"{base}/writes", params={"key": "k1"})
        assert kept.status_code == 200
        assert {
            k: v for k, v in kept.json().items() if k in ("key", "method", "path", "answer")
        } == {
            "key": "k1",
            "method": "POST",
            "path": "/cart",
            "answer": {
                "id": "line-1",
                "item": "cable-a",
                "quantity": 1,
                "unit_price": "9.90",
                "cart_total": "9.90",
            },
        }
        refused = httpx.get(f"{base}/writes", params={"key": "k2"})
        assert refused.status_code == 404 and refused.json()["key"] == "k2"
        first = httpx.get(f"{base}/writes", params={"key": "k3"}).json()["answer"]
        assert (first["id"], first["total"], "cancelled" in first) == ("order-1", "9.90", False)
    assert [(a["op"], a["key"]) for a in shop.applied] == [
        ("add", "k1"),
        ("checkout", "k3"),
        ("cancel", None),
    ]
    assert shop.applied[1]["lines"] == ["line-1"] and shop.applied[1]["total"] == "9.90"
