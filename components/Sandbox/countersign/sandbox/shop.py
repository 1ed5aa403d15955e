"""The sandbox shop behind the ``shop.sandbox`` connector (registry/connectors/shop.sandbox.yaml).

Labelled sandbox: no real shop can be reached from here. The HTTP contract the connector binds:

- ``GET /search?q=`` → ``{query, offers: [{item, title, price}]}``
- one cart per customer, as a real shop keeps one per account: ``customer`` (a query parameter
  on reads, a body field on writes; none: the anonymous customer) names it
- ``GET /cart?customer=`` → ``{customer, lines, total, cart_total}`` at today's prices
- ``POST /cart`` ``{item, quantity, customer}`` → the line ``{id, item, quantity, unit_price,
  cart_total}`` (404 for an unknown item)
- ``DELETE /cart/{line_id}`` → ``{cart_total}`` (line ids are unique across carts)
- ``POST /checkout`` ``{max_total, customer}`` → the order ``{id, total, lines}`` of that
  customer's cart; 409 when its total (prices read again at checkout) is over ``max_total``
- ``POST /orders/{id}/cancel`` → ``{id, cancelled: true}``
- ``GET /writes?key=`` → ``{key, method, path, answer}``: the write applied under that
  ``Idempotency-Key`` and the first answer it got (404: no write was applied under it; a refused
  write — 404, 409, 422 — changed nothing and is not kept). A read, for settling a write whose
  answer was lost (ExecuteOrchestrator's ``probes.shop_write``).

Writes honour ``Idempotency-Key``: a replayed key gets the first answer and changes nothing.
Beyond the contract: ``GET /`` (an HTML page with the sandbox banner, the prices, cart and
orders), ``GET /_sandbox/state`` and ``PUT /_sandbox/prices/{item}`` ``{price}`` (the price a
test changes to exercise the staleness check when the shop runs in another process).
"""

from __future__ import annotations

import copy
import threading
from dataclasses import dataclass, field
from typing import Any

from .core import render_page
from .http import Answer, JsonServer, Request, Served, page_or_admin

__all__ = ["ShopSandbox", "serve_shop"]

WHAT = "shop"


def _default_prices() -> dict[str, str]:
    return {"cable-a": "9.90", "cable-b": "12.50", "cable-c": "19.00"}


@dataclass
class ShopSandbox:
    """The shop's state (read by tests; ``prices`` and ``reprice_at_checkout`` set by them).
    ``arrivals`` records every request of the contract as ``(method, path, idempotency key)``;
    ``applied`` every write that changed the shop (``{op: add | remove | checkout | cancel, key,
    customer, line | order, ...}``: what a test counts effects by; a replay adds nothing)."""

    base_url: str = ""
    prices: dict[str, str] = field(default_factory=_default_prices)
    #: customer → line id → line
    carts: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)
    orders: dict[str, dict[str, Any]] = field(default_factory=dict)
    arrivals: list[tuple[str, str, str | None]] = field(default_factory=list)
    applied: list[dict[str, Any]] = field(default_factory=list)
    #: prices that change the moment a checkout arrives (the world moving under a write)
    reprice_at_checkout: dict[str, str] = field(default_factory=dict)
    _by_key: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: Idempotency-Key → the write applied under it (``GET /writes?key=``)
    _keyed: dict[str, dict[str, Any]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    _lines: int = 0

    @property
    def cart(self) -> dict[str, dict[str, Any]]:
        """Every customer's lines together (line ids are unique): what tests and the page read."""
        return {k: v for lines in self.carts.values() for k, v in lines.items()}

    def total(self, customer: str | None = None) -> str:
        """A cart's total at the current line prices (two decimals); all carts without one."""
        lines = self.cart if customer is None else self.carts.get(customer, {})
        cents = sum(
            round(float(line["unit_price"]) * 100) * line["quantity"] for line in lines.values()
        )
        return f"{cents / 100:.2f}"

    def route(self, req: Request) -> Answer:
        """The HTTP entry point (one request at a time)."""
        shared = page_or_admin(req, self._lock, self._page, self._admin)
        if shared is not None:
            return shared
        with self._lock:
            status, out = self.handle(
                req.method, req.path, dict(req.query), req.body, req.header("Idempotency-Key")
            )
        return Answer(status, out)

    def handle(
        self, method: str, path: str, query: dict[str, str], body: Any, key: str | None
    ) -> tuple[int, Any]:
        """One request of the contract: ``(status, JSON body)``."""
        self.arrivals.append((method, path, key))
        if not isinstance(body, dict):
            body = {}
        if method == "GET" and path == "/search":
            q = query.get("q", "")
            return 200, {
                "query": q,
                "offers": [
                    {"item": i, "title": f"{q} ({i})", "price": p}
                    for i, p in sorted(self.prices.items())
                ],
            }
        who = str(body.get("customer") or query.get("customer") or "anonymous")
        if method == "GET" and path == "/cart":
            return 200, self._cart(who)
        if method == "GET" and path == "/writes":
            return self._write_under(query.get("key", ""))
        if key is not None and key in self._by_key:  # a replay of a request already applied
            return 200, self._by_key[key]
        if method == "POST" and path == "/cart":
            status, out = self._add(who, body)
        elif method == "DELETE" and path.startswith("/cart/"):
            status, out = self._remove(who, path.rsplit("/", 1)[1])
        elif method == "POST" and path == "/checkout":
            status, out = self._checkout(who, body)
        elif method == "POST" and path.startswith("/orders/") and path.endswith("/cancel"):
            status, out = self._cancel(path.split("/")[2])
        else:
            return 404, {"error": f"no route {method} {path}"}
        if status == 200 and key is not None:
            self._by_key[key] = out
            first = copy.deepcopy(out)  # the answer as given (a later cancel marks the order)
            self._keyed[key] = {"key": key, "method": method, "path": path, "answer": first}
        if status == 200:
            self.applied.append(_effect(method, path, key, who, out))
        return status, out

    def _write_under(self, key: str) -> tuple[int, dict[str, Any]]:
        if key not in self._keyed:
            return 404, {"error": "no write applied under that key", "key": key}
        return 200, self._keyed[key]

    def _repriced(self, who: str) -> dict[str, dict[str, Any]]:
        """A customer's cart with every line at today's price."""
        cart = self.carts.setdefault(who, {})
        for held in cart.values():
            held["unit_price"] = self.prices[str(held["item"])]
        return cart

    def _cart(self, who: str) -> dict[str, Any]:
        lines = [dict(v) for v in self._repriced(who).values()]
        total = self.total(who)
        return {"customer": who, "lines": lines, "total": total, "cart_total": total}

    def _add(self, who: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        item = str(body.get("item"))
        if item not in self.prices:
            return 404, {"error": f"no item {item}"}
        self._lines += 1
        line: dict[str, Any] = {
            "id": f"line-{self._lines}",
            "item": item,
            "quantity": int(body.get("quantity", 1)),
            "unit_price": self.prices[item],
        }
        self.carts.setdefault(who, {})[line["id"]] = line
        return 200, {**line, "cart_total": self.total(who)}

    def _remove(self, who: str, line_id: str) -> tuple[int, dict[str, Any]]:
        owner = next((c for c, lines in self.carts.items() if line_id in lines), who)
        self.carts.get(owner, {}).pop(line_id, None)
        return 200, {"cart_total": self.total(owner)}

    def _checkout(self, who: str, body: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        # prices are read again at checkout: the cart total is what would be charged now
        self.prices.update(self.reprice_at_checkout)
        cart = self._repriced(who)
        try:
            limit = float(str(body.get("max_total")))
        except ValueError:
            return 422, {"error": "max_total must be a number"}
        if float(self.total(who)) > limit:
            return 409, {"error": "cart total over max_total", "total": self.total(who)}
        order_id = f"order-{len(self.orders) + 1}"
        order: dict[str, Any] = {
            "id": order_id,
            "customer": who,
            "total": self.total(who),
            "lines": [dict(v) for v in cart.values()],
        }
        self.orders[order_id] = order
        cart.clear()
        return 200, order

    def _cancel(self, oid: str) -> tuple[int, dict[str, Any]]:
        if oid not in self.orders:
            return 404, {"error": f"no order {oid}"}
        self.orders[oid]["cancelled"] = True
        return 200, {"id": oid, "cancelled": True}

    def _admin(self, req: Request) -> Answer:
        if req.method == "GET" and req.path == "/_sandbox/state":
            return Answer(
                200,
                {
                    "prices": self.prices,
                    "cart": list(self.cart.values()),
                    "orders": list(self.orders.values()),
                    "requests": len(self.arrivals),
                },
            )
        if req.method == "PUT" and req.path.startswith("/_sandbox/prices/"):
            item = req.path.rsplit("/", 1)[1]
            price = req.body.get("price") if isinstance(req.body, dict) else None
            try:
                value = f"{float(str(price)):.2f}"
            except ValueError:
                return Answer(422, {"error": f"price must be a number, got {price!r}"})
            self.prices[item] = value
            return Answer(200, {"item": item, "price": value})
        return Answer(404, {"error": f"no route {req.method} {req.path}"})

    def _page(self) -> str:
        rows = [{"item": i, "price": p, "in cart": ""} for i, p in sorted(self.prices.items())]
        for line in self.cart.values():
            for row in rows:
                if row["item"] == line["item"]:
                    row["in cart"] = str(line["quantity"])
        orders = ", ".join(
            f"{o['id']} ({o['total']}{', cancelled' if o.get('cancelled') else ''})"
            for o in self.orders.values()
        )
        rows.append({"item": "orders", "price": "", "in cart": orders or "none"})
        return render_page("Sandbox shop", WHAT, rows, ["item", "price", "in cart"])


def _effect(method: str, path: str, key: str | None, who: str, out: Any) -> dict[str, Any]:
    """What an applied write did, as ``ShopSandbox.applied`` keeps it."""
    body = out if isinstance(out, dict) else {}
    if path == "/cart":
        op = {"op": "add", "line": body.get("id"), "item": body.get("item")}
        return op | {"key": key, "customer": who, "unit_price": body.get("unit_price")}
    if path.startswith("/cart/"):
        return {"op": "remove", "line": path.rsplit("/", 1)[1], "key": key, "customer": who}
    if path == "/checkout":
        lines = [str(v.get("id")) for v in body.get("lines", [])]
        op = {"op": "checkout", "order": body.get("id"), "lines": lines}
        return op | {"key": key, "customer": who, "total": body.get("total")}
    return {"op": "cancel", "order": body.get("id"), "key": key, "customer": who, "path": path}


def serve_shop(
    shop: ShopSandbox | None = None, *, host: str = "127.0.0.1", port: int = 0
) -> Served[ShopSandbox]:
    """A sandbox shop on ``host:port`` (0: a free port), serving from a daemon thread until
    ``shutdown`` (or the end of a ``with`` block); ``base_url`` is set on the state."""
    state = shop if shop is not None else ShopSandbox()
    server = JsonServer(state.route, what=WHAT, host=host, port=port).start()
    state.base_url = server.url
    return Served(state, server)
