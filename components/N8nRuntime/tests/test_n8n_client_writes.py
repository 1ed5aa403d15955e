"""A write's webhook call is re-sent only while it provably never reached n8n (issue 10, hole 2).

Hypothesis draws what each attempt meets — a refused connect, a connect timeout, the 404 of a
webhook not registered yet (all: nothing ran), or a read timeout, a dropped connection, a 5xx, a
success (all: it may have run) — and the property is that at most one request that may have run
is ever made for a write, and that the error says whether anything was sent. Reads keep their
retries. ``httpx.MockTransport`` stands in for n8n: a real server cannot be made to produce these
failures in a chosen order.
"""

from __future__ import annotations

import asyncio

import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from countersign.n8n import N8nApiError, N8nClient, N8nUnavailableError

NOT_RUN = ("connect_error", "connect_timeout", "not_registered")
MAY_HAVE_RUN = ("read_timeout", "dropped", "500", "502", "503", "ok")


def _client(script: list[str], seen: list[str]) -> N8nClient:
    def handler(request: httpx.Request) -> httpx.Response:
        what = script[len(seen)] if len(seen) < len(script) else "ok"
        seen.append(what)
        if what == "connect_error":
            raise httpx.ConnectError("refused", request=request)
        if what == "connect_timeout":
            raise httpx.ConnectTimeout("connect timeout", request=request)
        if what == "read_timeout":
            raise httpx.ReadTimeout("read timeout", request=request)
        if what == "dropped":
            raise httpx.RemoteProtocolError("server disconnected", request=request)
        if what == "not_registered":
            return httpx.Response(404, json={"message": "webhook not registered"})
        if what == "ok":
            return httpx.Response(200, json={"ok": True})
        return httpx.Response(int(what), json={"message": "workflow failed"})

    return N8nClient(
        "http://n8n.test", "key", backoff_s=0.0, transport=httpx.MockTransport(handler)
    )


async def _call(script: list[str], *, write: bool) -> tuple[list[str], object]:
    seen: list[str] = []
    async with _client(script, seen) as c:
        try:
            out: object = await c.call_webhook("p", {"x": 1}, write=write)
        except (N8nUnavailableError, N8nApiError) as e:
            out = e
    return seen, out


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(NOT_RUN + MAY_HAVE_RUN), min_size=1, max_size=10))
def test_a_write_reaches_n8n_at_most_once(script: list[str]) -> None:
    seen, out = asyncio.run(_call(script, write=True))
    reached = [s for s in seen if s in MAY_HAVE_RUN]
    assert len(reached) <= 1, seen
    if reached and reached[0] != "ok":
        # the caller must learn that it may have run: never "nothing was sent"
        assert isinstance(out, N8nApiError) or (isinstance(out, N8nUnavailableError) and out.sent)
    if not reached:  # every attempt provably ran nothing
        assert isinstance(out, N8nUnavailableError | N8nApiError)
        assert not isinstance(out, N8nUnavailableError) or not out.sent
        assert not isinstance(out, N8nApiError) or out.status == 404


@settings(max_examples=100, deadline=None)
@given(st.lists(st.sampled_from(("read_timeout", "dropped", "500", "503")), min_size=1, max_size=3))
def test_a_read_is_retried_after_transient_failures(script: list[str]) -> None:
    seen, out = asyncio.run(_call(script, write=False))
    assert out == {"ok": True}
    assert len(seen) == len(script) + 1


@pytest.mark.parametrize("first", NOT_RUN)
def test_a_write_that_never_reached_n8n_is_retried(first: str) -> None:
    seen, out = asyncio.run(_call([first, first, "ok"], write=True))
    assert out == {"ok": True} and seen == [first, first, "ok"]


def test_the_api_key_goes_to_the_api_only_never_to_a_webhook_or_a_resume() -> None:
    """n8n stores a webhook call's headers in the execution's data: the key must not be there."""
    sent: list[tuple[str, str | None]] = []

    def handler(request: httpx.Request) -> httpx.Response:
        sent.append((request.url.path, request.headers.get("x-n8n-api-key")))
        return httpx.Response(200, json={"data": [], "nextCursor": None})

    async def go() -> None:
        async with N8nClient(
            "http://n8n.test", "secret-key", transport=httpx.MockTransport(handler)
        ) as c:
            await c.call_webhook("p", {"x": 1}, write=True)
            await c.resume("http://n8n.test/webhook-waiting/7", {"ok": True})
            await c.get_workflow("w1")

    asyncio.run(go())
    assert sent == [
        ("/webhook/p", None),
        ("/webhook-waiting/7", None),
        ("/api/v1/workflows/w1", "secret-key"),
    ]
