"""The failure taxonomy from real answers (issue 26 §3): the sandbox shop is told to fail in each
way (its fault switch, ``/_sandbox/faults``), the purchase plan's cart write runs on real n8n, and
each class leads to its action — a 429 is waited out and sent again (its ``Retry-After``), an
answer that may have been acted on (503, a dropped connection) is never sent again (counted at the
provider), 401 and 422 ask the person, 409 re-plans, a refused port is what it is. Every failure
is on the plan's event stream as ``step_failure`` with its class and action."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Iterator
from datetime import UTC, datetime
from typing import Any

import httpx
import pytest

from countersign.approvals import Approvals
from countersign.audit import AuditLog
from countersign.execute import ExecuteReport, Executor
from countersign.kernel import Intent, Policy, system_clock
from countersign.kernel.process import free_port
from countersign.n8n import N8nClient, N8nHandle
from countersign.planner.testing import signed_plan
from countersign.preview import run_preview
from countersign.registry import Registry
from countersign.sandbox import ShopSandbox
from countersign.sandbox.http import Served
from countersign.sandbox.shop import serve_shop
from countersign.signer import KeyRing
from countersign.steps import N8nTransport, StepFailedError, StoreRecorder
from countersign.storage import Database, OutcomeUnknownError

pytestmark = pytest.mark.slow

LOCAL = Policy(providers={"calendar": "caldav", "mail": "smtp", "chat": "slack"})
USER = "alice@example.com"
_n = iter(range(1, 10_000))
CART = ("POST", "/cart")


@pytest.fixture
def shop() -> Iterator[Served[ShopSandbox]]:
    served = serve_shop()
    try:
        yield served
    finally:
        served.shutdown()


def _signed(registry: Registry, keyring: KeyRing) -> dict[str, Any]:
    n = next(_n)
    intent = Intent.model_validate(
        {
            "intent": "purchase_item",
            "intent_id": f"01JDQ3Z1000000000000{n:06d}",
            "received_at": datetime.now(UTC).replace(microsecond=0).isoformat(),
            "user_id": USER,
            "entities": {"query": "usb-c cable 2m", "max_price": "15.00", "quantity": 1},
        }
    )
    return signed_plan(intent, keyring, registry, LOCAL)


def _token(db: Database, doc: dict[str, Any], choice: Any) -> str:
    return (
        Approvals(db, clock=system_clock)
        .issue(
            plan_id=doc["plan"]["plan_id"],
            plan_hash=doc["plan_hash"],
            gate_id="gate-A",
            user_id=USER,
            scopes=["shopping.cart"],
            ttl_s=300,
            choice=choice,
        )
        .token
    )


def _arm(url: str, *faults: dict[str, Any]) -> None:
    r = httpx.post(f"{url}/_sandbox/faults", json={"faults": list(faults)}, timeout=5)
    assert r.status_code == 200, r.text


def _run(
    n8n: N8nHandle,
    db: Database,
    registry: Registry,
    keyring: KeyRing,
    shop: Served[ShopSandbox],
    *faults: dict[str, Any],
    write_url: str | None = None,
    again: bool = False,
    before: Callable[[], None] | None = None,
) -> tuple[dict[str, Any], ExecuteReport | BaseException, BaseException | None]:
    """Preview the purchase plan, arm ``faults``, execute gate-A (the cart write); with
    ``again``, execute once more with a new token. The plan, what the first execute gave, and
    what the second raised."""
    doc = _signed(registry, keyring)

    async def go() -> tuple[ExecuteReport | BaseException, BaseException | None]:
        async with N8nClient(n8n.base_url, n8n.api_key) as client:
            transport = N8nTransport(client)
            preview = await run_preview(
                doc,
                keys=keyring,
                registry=registry,
                transport=transport,
                recorder=StoreRecorder(db, clock=system_clock),
                settings={"shop_base_url": shop.url},
                actor=USER,
                now=system_clock(),
            )
            choice = preview.outputs[2]["shortlist"][0]
            if faults:
                _arm(shop.url, *faults)
            ex = Executor(
                keys=keyring,
                registry=registry,
                transport=transport,
                db=db,
                settings={"shop_base_url": write_url or shop.url},
                policy=LOCAL,
            )
            first: ExecuteReport | BaseException
            if before is not None:
                before()
            try:
                first = await ex.execute(
                    doc, user_id=USER, tokens={"gate-A": _token(db, doc, choice)}
                )
            except Exception as e:
                first = e
            second: BaseException | None = None
            if again:
                try:
                    await ex.execute(doc, user_id=USER, tokens={"gate-A": _token(db, doc, choice)})
                except Exception as e:
                    second = e
            return first, second

    first, second = asyncio.run(go())
    return doc, first, second


def _events(db: Database, doc: dict[str, Any], kind: str) -> list[dict[str, Any]]:
    with db.tx() as c:
        rows = AuditLog(clock=system_clock).rows(c, plan_id=doc["plan"]["plan_id"])
    return [r for r in rows if r["kind"] == kind]


def test_rate_limited_waits_its_retry_after_and_sends_again(
    n8n: N8nHandle, db: Database, registry: Registry, keyring: KeyRing, shop: Served[ShopSandbox]
) -> None:
    fault = {"status": 429, "retry_after": 1, "method": "POST", "path": "/cart"}
    doc, report, _ = _run(n8n, db, registry, keyring, shop, fault)
    assert isinstance(report, ExecuteReport), report
    assert report.status == "waiting" and report.waiting_gate == "gate-B"
    assert shop.faults.count(*CART) == 2, "sent once more after the 429"
    assert len(shop.state.cart) == 1, "one line: the 429 did nothing, the retry did"
    (retry,) = _events(db, doc, "step_retry")
    assert retry["details"]["class"] == "rate_limited" and retry["details"]["wait_s"] == 1
    assert retry["step"] == 4 and _events(db, doc, "step_failure") == []


def test_a_write_that_may_have_happened_is_never_sent_again(
    n8n: N8nHandle, db: Database, registry: Registry, keyring: KeyRing, shop: Served[ShopSandbox]
) -> None:
    """503 after the shop acted: transient for a read, but for a write the ledger says unknown —
    no retry now, none on a second execute (counted at the provider)."""
    fault = {"status": 503, "act": True, "method": "POST", "path": "/cart", "times": 5}
    doc, first, second = _run(n8n, db, registry, keyring, shop, fault, again=True)
    assert isinstance(first, OutcomeUnknownError), first
    assert isinstance(second, OutcomeUnknownError), second
    assert shop.faults.count(*CART) == 1, "an unknown write is never sent again"
    assert len(shop.state.cart) == 1, "it did happen: the answer was lost"
    failures = _events(db, doc, "step_failure")
    assert failures and {f["details"]["class"] for f in failures} == {"unknown_outcome"}
    assert {f["status"] for f in failures} == {"ask"} and _events(db, doc, "step_retry") == []


def test_a_dropped_connection_is_an_unknown_outcome_never_resent(
    n8n: N8nHandle, db: Database, registry: Registry, keyring: KeyRing, shop: Served[ShopSandbox]
) -> None:
    fault = {"drop": True, "act": True, "method": "POST", "path": "/cart"}
    doc, first, _ = _run(n8n, db, registry, keyring, shop, fault)
    assert isinstance(first, OutcomeUnknownError), first
    assert shop.faults.count(*CART) == 1
    (failure,) = _events(db, doc, "step_failure")
    assert failure["details"]["class"] == "unknown_outcome" and failure["status"] == "ask"


@pytest.mark.parametrize(
    ("status", "cls", "action"),
    [(401, "auth", "ask"), (422, "validation", "ask"), (409, "conflict", "replan")],
)
def test_a_refusal_leads_to_its_action_without_a_second_send(
    n8n: N8nHandle,
    db: Database,
    registry: Registry,
    keyring: KeyRing,
    shop: Served[ShopSandbox],
    status: int,
    cls: str,
    action: str,
) -> None:
    fault = {"status": status, "method": "POST", "path": "/cart", "times": 3}
    doc, report, _ = _run(n8n, db, registry, keyring, shop, fault)
    assert isinstance(report, ExecuteReport), report
    assert report.status == "failed" and report.failure is not None
    assert report.failure["class"] == cls and report.failure["action"] == action
    assert report.failure["step"] == 4 and report.failure["status"] == status
    assert shop.faults.count(*CART) == 1, "a refusal the table does not retry is sent once"
    assert shop.state.cart == {}
    (failure,) = _events(db, doc, "step_failure")
    assert failure["status"] == action and failure["details"]["class"] == cls
    assert failure["reason"] and "{" not in failure["reason"]  # plain words


def test_transient_is_retried_with_backoff_then_asked(
    n8n: N8nHandle, db: Database, registry: Registry, keyring: KeyRing, shop: Served[ShopSandbox]
) -> None:
    """408 (the shop timed the request out before acting): the ledger says failed, so it is
    sent again with a doubling backoff, three sends in all; then the person is asked."""
    fault = {"status": 408, "method": "POST", "path": "/cart", "times": 3}
    doc, report, _ = _run(n8n, db, registry, keyring, shop, fault)
    assert isinstance(report, ExecuteReport), report
    assert report.status == "failed" and report.failure is not None
    assert (report.failure["class"], report.failure["action"]) == ("transient", "ask")
    assert report.failure["sends"] == 3 and shop.faults.count(*CART) == 3
    waits = [r["details"]["wait_s"] for r in _events(db, doc, "step_retry")]
    assert waits == [0.5, 1.0]


def test_transient_then_success(
    n8n: N8nHandle, db: Database, registry: Registry, keyring: KeyRing, shop: Served[ShopSandbox]
) -> None:
    fault = {"status": 408, "method": "POST", "path": "/cart", "times": 1}
    _, report, _ = _run(n8n, db, registry, keyring, shop, fault)
    assert isinstance(report, ExecuteReport) and report.status == "waiting", report
    assert shop.faults.count(*CART) == 2 and len(shop.state.cart) == 1


def test_a_refused_port_is_provider_down_read_again_then_asked(
    n8n: N8nHandle, db: Database, registry: Registry, keyring: KeyRing, shop: Served[ShopSandbox]
) -> None:
    """Nobody listens on the shop's port at execute: the re-check read before the write is
    refused (provider_down), read again with a capped backoff (1 s, 2 s), then the person is
    asked; nothing is written."""
    port = free_port()
    doc, first, _ = _run(n8n, db, registry, keyring, shop, write_url=f"http://127.0.0.1:{port}")
    assert isinstance(first, StepFailedError), first
    waits = [r["details"]["wait_s"] for r in _events(db, doc, "step_retry")]
    assert waits == [1.0, 2.0]
    (failure,) = _events(db, doc, "step_failure")
    assert failure["details"]["class"] == "provider_down" and failure["status"] == "ask"
    assert "cannot be reached" in failure["reason"]
    assert shop.faults.count(*CART) == 0 and shop.state.cart == {}


def test_a_provider_back_within_the_backoff_is_written_once(
    n8n: N8nHandle, db: Database, registry: Registry, keyring: KeyRing, shop: Served[ShopSandbox]
) -> None:
    """The shop's port refuses, then the shop comes back on it during the backoff: the read
    succeeds on a later try and the write is sent once."""
    port = free_port()
    back: list[Served[ShopSandbox]] = []
    timer = threading.Timer(1.5, lambda: back.append(serve_shop(port=port)))
    try:  # back 1.5 s after the execute starts: its first read is refused, a later one is not
        doc, report, _ = _run(
            n8n,
            db,
            registry,
            keyring,
            shop,
            write_url=f"http://127.0.0.1:{port}",
            before=timer.start,
        )
    finally:
        timer.cancel()
        if timer.ident is not None:
            timer.join()
        for b in back:
            b.shutdown()
    assert isinstance(report, ExecuteReport) and report.status == "waiting", report
    assert [r["details"]["class"] for r in _events(db, doc, "step_retry")] == [
        "provider_down"
    ] * len(_events(db, doc, "step_retry"))
    assert _events(db, doc, "step_retry") and back and back[0].faults.count(*CART) == 1
