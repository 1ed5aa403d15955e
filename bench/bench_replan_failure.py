"""Benchmark: re-plan after a failure, end to end over the served API (issue 26 §3).

The real stack of the tests (embedded Postgres, n8n, the sandbox shop with its fault switch, the
API served over HTTP). Per round, a purchase plan is made and gate-A approved; the shop is armed
to answer the cart write with 409 (a conflict: the policy re-plans) or 401 (auth: the policy
asks, no revision) — interleaved, so machine noise hits both alike — and timed:

- ``execute → answer``: the failed execute request (the write sent once, refused, classified,
  audited; for the conflict also the new revision planned, signed and previewed in the request);
- ``execute → revision listed``: until ``GET /v1/plans/{id}/revisions`` lists the revision;
- ``revision → written``: approving the revision and executing it until the shop holds the line.

The re-plan's own cost is the conflict's ``execute → answer`` minus the auth one's.

Run: ``.venv/bin/pytest bench/bench_replan_failure.py -p no:cacheprovider -q -s ``
(pytest runs it for the stack's fixtures; it is not collected with the tests; ``ROUNDS=n`` in
the environment sets the rounds, default 10).
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

sys.path.insert(0, str(Path(__file__).parent))
from common import machine, summary

from countersign.api.testing import ApiHarness, harness
from countersign.n8n import N8nHandle
from countersign.registry import Registry
from countersign.sandbox.caldav import Radicale
from countersign.sandbox.http import Served
from countersign.sandbox.mailbox import SmtpSink
from countersign.sandbox.shop import ShopSandbox, serve_shop
from countersign.signer import KeyRing
from countersign.storage import Database
from countersign.workflowbuilder import CredentialRef

ROUNDS = 10
PURCHASE = {
    "intent": {
        "intent": "purchase_item",
        "entities": {"query": "usb-c cable 2m", "max_price": "15.00", "quantity": 1},
    }
}


@pytest.fixture
def shopped(
    n8n: N8nHandle,
    db: Database,
    registry: Registry,
    keyring: KeyRing,
    radicale: Radicale,
    smtp_server: SmtpSink,
    api_smtp_credential: CredentialRef,
) -> Iterator[tuple[ApiHarness, Served[ShopSandbox]]]:
    shop = serve_shop()
    try:
        with harness(
            n8n,
            db,
            registry,
            keyring,
            radicale,
            smtp_server,
            api_smtp_credential,
            settings={"shop_base_url": shop.url},
            rate_limit_per_min=0,
        ) as h:
            yield h, shop
    finally:
        shop.shutdown()


def _option(c: httpx.Client, plan_id: str) -> Any:
    return c.get(f"/v1/plans/{plan_id}").json()["gates"][0]["choices"]["options"][0]["value"]


def _approve(c: httpx.Client, plan_id: str, choice: Any) -> str:
    r = c.post(f"/v1/plans/{plan_id}/gates/gate-A/approve", json={"choice": choice})
    assert r.status_code == 200, r.text
    return str(r.json()["token"])


def _round(
    c: httpx.Client, shop: Served[ShopSandbox], status: int
) -> tuple[float, float | None, float | None]:
    made = c.post("/v1/intents", json=PURCHASE)
    assert made.status_code == 201, made.text
    old = made.json()["plan_id"]
    token = _approve(c, old, _option(c, old))
    fault = {"status": status, "method": "POST", "path": "/cart"}
    httpx.post(f"{shop.url}/_sandbox/faults", json={"faults": [fault]}, timeout=5)
    t0 = time.perf_counter()
    r = c.post(f"/v1/plans/{old}/execute", json={"tokens": {"gate-A": token}})
    answered = time.perf_counter() - t0
    assert r.status_code == 202 and r.json()["status"] == "failed", r.text
    if status != 409:
        return answered, None, None
    revisions = c.get(f"/v1/plans/{old}/revisions").json()["root"]["revisions"]
    listed = time.perf_counter() - t0
    assert revisions and revisions[0]["reason"] == "failure", revisions
    new = revisions[0]["plan_id"]
    lines = len(shop.state.cart)
    t1 = time.perf_counter()
    done = c.post(
        f"/v1/plans/{new}/execute", json={"tokens": {"gate-A": _approve(c, new, _option(c, new))}}
    )
    written = time.perf_counter() - t1
    assert done.json()["status"] == "waiting" and len(shop.state.cart) == lines + 1, done.text
    return answered, listed, written


def test_bench_replan_after_failure(shopped: tuple[ApiHarness, Served[ShopSandbox]]) -> None:
    api, shop = shopped
    rounds = int(os.environ.get("ROUNDS", ROUNDS))
    conflict: list[float] = []
    listed: list[float] = []
    written: list[float] = []
    auth: list[float] = []
    with api.client() as c:
        _round(c, shop, 409)  # warm: workflows deployed, connections open
        for _ in range(rounds):
            a, lst, w = _round(c, shop, 409)
            conflict.append(a)
            listed.append(lst or 0.0)
            written.append(w or 0.0)
            auth.append(_round(c, shop, 401)[0])
    out = {
        "machine": machine(),
        "rounds": rounds,
        "ms": {
            name: [round(x * 1000, 1) for x in summary(samples)]
            for name, samples in (
                ("conflict: execute → answer (with re-plan)", conflict),
                ("conflict: execute → revision listed", listed),
                ("auth: execute → answer (asked, no re-plan)", auth),
                ("revision: approve + execute → written", written),
            )
        },
    }
    print(json.dumps(out, indent=2))
    results = Path(__file__).parent / "results" / "replan_failure.json"
    results.write_text(json.dumps(out, indent=2) + "\n")
