"""The fault switch of the sandbox HTTP providers (``/_sandbox/faults``): each armed answer is
what a client really receives — a status with its headers, a dropped connection — before or
after the provider acted; every request is counted; bad faults are refused by name."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import urlsplit

import httpx
import pytest

from countersign.sandbox.caldav import Radicale
from countersign.sandbox.core import ics_calendar
from countersign.sandbox.faultproxy import serve_fault_proxy
from countersign.sandbox.http import Served
from countersign.sandbox.shop import ShopSandbox, serve_shop
from countersign.sandbox.visa import serve_visa

ALICE = "alice@example.com"


@pytest.fixture
def shop() -> Iterator[Served[ShopSandbox]]:
    served = serve_shop()
    try:
        yield served
    finally:
        served.shutdown()


def _arm(url: str, *faults: dict[str, object]) -> httpx.Response:
    return httpx.post(f"{url}/_sandbox/faults", json={"faults": list(faults)}, timeout=5)


def _add(url: str) -> httpx.Response:
    return httpx.post(f"{url}/cart", json={"item": "cable-a", "quantity": 1}, timeout=5)


def test_a_status_with_retry_after_then_the_real_answer(shop: Served[ShopSandbox]) -> None:
    assert _arm(shop.url, {"status": 429, "retry_after": 2, "path": "/cart"}).status_code == 200
    r = _add(shop.url)
    assert r.status_code == 429 and r.headers["Retry-After"] == "2"
    assert r.json()["retry_after"] == 2 and r.json()["sandbox"] is True
    assert shop.state.cart == {}, "refused before acting"
    assert _add(shop.url).status_code == 200, "armed for one answer only"
    assert shop.faults.count("POST", "/cart") == 2 and len(shop.state.cart) == 1


@pytest.mark.parametrize("status", [503, 401, 409, 422])
def test_each_status_as_armed_times_and_path(shop: Served[ShopSandbox], status: int) -> None:
    _arm(shop.url, {"status": status, "times": 2, "method": "POST", "path": "/cart"})
    assert httpx.get(f"{shop.url}/search?q=x", timeout=5).status_code == 200, "other paths pass"
    assert [_add(shop.url).status_code for _ in range(3)] == [status, status, 200]


def test_act_then_fail_and_drop(shop: Served[ShopSandbox]) -> None:
    _arm(shop.url, {"status": 503, "act": True}, {"drop": True, "act": True}, {"drop": True})
    assert _add(shop.url).status_code == 503
    with pytest.raises(httpx.RemoteProtocolError):
        _add(shop.url)
    with pytest.raises(httpx.RemoteProtocolError):
        _add(shop.url)
    assert len(shop.state.cart) == 2, "the two that acted did; the plain drop did not"
    state = httpx.get(f"{shop.url}/_sandbox/faults", timeout=5).json()
    assert state["armed"] == [] and [s["fault"] for s in state["seen"]] == [
        {"status": 503, "act": True},
        {"drop": True, "act": True},
        {"drop": True},
    ]
    assert httpx.delete(f"{shop.url}/_sandbox/faults", timeout=5).json()["seen"] == []


@pytest.mark.parametrize(
    "bad",
    [{"status": 99}, {"status": "503"}, {"times": 0}, {"retry_after": -1}, {"colour": 1}, 5],
)
def test_a_bad_fault_is_refused(shop: Served[ShopSandbox], bad: object) -> None:
    r = httpx.post(f"{shop.url}/_sandbox/faults", json={"faults": [bad]}, timeout=5)
    assert r.status_code == 422 and r.json()["error"]
    assert shop.faults.armed == []


def test_the_visa_service_has_the_switch_too() -> None:
    visa = serve_visa()
    try:
        url = visa.url
        assert _arm(url, {"status": 401}).status_code == 200
        assert httpx.get(f"{url}/consulates/x/slots", timeout=5).status_code == 401
    finally:
        visa.shutdown()


def test_the_caldav_fault_proxy_passes_radicale_through_and_fails_as_armed(
    radicale: Radicale,
) -> None:
    radicale.make_calendar(ALICE)
    proxy = serve_fault_proxy(radicale.base_url)
    try:
        base = radicale.calendar_url(ALICE).replace(radicale.base_url, proxy.url)
        ics = ics_calendar("proxy-1", "20261201T100000Z", "20261201T110000Z", "Proxied")
        put = {"Content-Type": "text/calendar"}
        ok = httpx.put(f"{base}proxy-1.ics", content=ics, headers=put, timeout=5)
        assert ok.status_code in (201, 204), ok.text
        listed = httpx.request("PROPFIND", base, headers={"Depth": "1"}, timeout=5)
        assert listed.status_code == 207 and "proxy-1.ics" in listed.text
        _arm(proxy.url, {"status": 409, "method": "PUT"}, {"drop": True, "method": "PUT"})
        refused = httpx.put(f"{base}proxy-2.ics", content=ics, headers=put, timeout=5)
        assert refused.status_code == 409
        with pytest.raises(httpx.RemoteProtocolError):
            httpx.put(f"{base}proxy-3.ics", content=ics, headers=put, timeout=5)
        assert sorted(radicale.events(ALICE)) == ["proxy-1.ics"]
        assert proxy.faults.count("PUT", urlsplit(base).path + "proxy-2.ics") == 1
    finally:
        proxy.shutdown()
        for name in radicale.events(ALICE):
            httpx.delete(radicale.calendar_url(ALICE) + name, timeout=5)
