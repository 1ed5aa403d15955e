"""Turn an HTTP Request binding (registry → BindingResolver) into one concrete HTTP request.

Durable steps run as Temporal activities, and the execute-time staleness re-check reads directly
(ExecuteOrchestrator SPEC, Executor step 4); both perform exactly the HTTP call the registry's
``n8n-nodes-base.httpRequest`` binding describes (method, URL, query, headers, body), with values
rendered by ``countersign.binding.render_data`` — the same bytes n8n would send
(tests/test_e2e_http_parity.py).
It sits in StepRunner so that both runtimes share the one request builder.

Every request sent here, and every call the step runtimes make to another process
(``observed``), is one log line (``latency_ms``, ``status``; the provider's host, never its path,
query or body) and, when tracing is on, one client span (StepRunner SPEC, logs and traces).
"""

from __future__ import annotations

import functools
import json
import ssl
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import quote, urlsplit

import httpx
from opentelemetry import trace

from countersign.binding import BoundNode
from countersign.kernel import BindingError, CountersignError, ascii_digits
from countersign.kernel.logs import get_logger, info_enabled
from countersign.kernel.tracing import tracer, tracing_enabled

__all__ = ["HttpCall", "asend", "default_tls", "http_call", "observed", "send"]

_LOG = get_logger("countersign.steps")
_TRACER = tracer("countersign.steps")


@functools.cache
def default_tls() -> ssl.SSLContext:
    """One default TLS context per process for every client made on a hot path: building one
    (what ``httpx.AsyncClient()`` does when given none) costs ~45 ms of CPU here, measured: the
    staleness re-check made a client per execute and paid it on every approval."""
    return ssl.create_default_context()


@dataclass(frozen=True)
class HttpCall:
    """A request ready to send."""

    method: str
    url: str
    params: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    content: str | None = None


def _value(node: BoundNode, data: Mapping[str, Any], path: str) -> Any:
    if path in data:
        return data[path]
    cur: Any = node.parameters
    for part in path.replace("]", "").replace("[", ".").split("."):
        if isinstance(cur, dict):
            cur = cur.get(part)
        elif isinstance(cur, list) and ascii_digits(part) and int(part) < len(cur):
            cur = cur[int(part)]
        else:
            return None
    return cur


def _pairs(node: BoundNode, data: Mapping[str, Any], group: str) -> dict[str, str]:
    entries = node.parameters.get(group, {})
    listed = entries.get("parameters") if isinstance(entries, dict) else None
    count = len(listed) if isinstance(listed, list) else 0
    count = max(
        count,
        1
        + max(
            (
                int(p.split("[")[1].split("]")[0])
                for p in data
                if p.startswith(f"{group}.parameters[")
            ),
            default=-1,
        ),
    )
    out: dict[str, str] = {}
    for i in range(count):
        name = _value(node, data, f"{group}.parameters[{i}].name")
        value = _value(node, data, f"{group}.parameters[{i}].value")
        if name is not None and value is not None:
            out[str(name)] = str(value)
    return out


def _as_n8n_json(text: str) -> str:
    """The body n8n's HTTP Request node sends for a JSON body: it parses the text and sends
    ``JSON.stringify`` of it (compact, non-ASCII as is, key order kept)."""
    try:
        value = json.loads(text)
    except ValueError:
        return text  # n8n sends text it cannot parse as it is
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def http_call(node: BoundNode, data: Mapping[str, Any]) -> HttpCall:
    """The request for a bound HTTP Request node and its rendered data values."""
    if node.node_type != "n8n-nodes-base.httpRequest":
        raise BindingError(f"step {node.step}: {node.node_type} is not an HTTP Request binding")
    method = str(_value(node, data, "method") or "GET").upper()
    url = _value(node, data, "url")
    if not isinstance(url, str) or not url.startswith(("http://", "https://")):
        raise BindingError(f"step {node.step}: no absolute URL for {node.uses}.{node.call}")
    params = _pairs(node, data, "queryParameters") if _value(node, data, "sendQuery") else {}
    headers = _pairs(node, data, "headerParameters") if _value(node, data, "sendHeaders") else {}
    content: str | None = None
    if _value(node, data, "sendBody"):
        if _value(node, data, "specifyBody") == "json":
            content = _as_n8n_json(str(_value(node, data, "jsonBody") or "{}"))
            headers.setdefault("Content-Type", "application/json")
        else:
            content = str(_value(node, data, "body") or "")
            ctype = _value(node, data, "rawContentType")
            if ctype:
                headers.setdefault("Content-Type", str(ctype))
    return HttpCall(method=method, url=url, params=params, headers=headers, content=content)


def _component(text: str) -> str:
    """How n8n's HTTP Request node encodes a query name or value (``qs``, RFC 3986): everything
    but ``A-Za-z0-9-._~`` percent-encoded, a space as %20."""
    return quote(text, safe="")


@contextmanager
def observed(event: str, **fields: str | int | bool | None) -> Iterator[dict[str, Any]]:
    """Around one call to another process: a client span named ``event`` (tracing on) and, at
    the end, one log line ``event`` with ``fields``, ``latency_ms`` and what the block put in
    the yielded dict (``status`` …); an exception is logged as ``status: error`` and its class
    (a ``CountersignError``'s code) and raised on."""
    out: dict[str, Any] = {}
    start = time.perf_counter()
    span = (
        _TRACER.start_as_current_span(event, kind=trace.SpanKind.CLIENT)
        if tracing_enabled()
        else None
    )
    current = span.__enter__() if span is not None else None
    failure: BaseException | None = None
    try:
        yield out
    except BaseException as e:
        failure = e
        out.update(
            status="error", error=e.code if isinstance(e, CountersignError) else type(e).__name__
        )
        raise
    finally:
        line = {k: v for k, v in {**fields, **out}.items() if v is not None}
        if current is not None and span is not None:
            for k, v in line.items():
                current.set_attribute(f"countersign.{k}", v)
            if failure is not None:
                current.set_status(trace.StatusCode.ERROR)
            span.__exit__(None, None, None)
        if info_enabled():
            _LOG.info(event, latency_ms=round((time.perf_counter() - start) * 1000, 1), **line)


def _provider(req: HttpCall) -> dict[str, str | int | bool | None]:
    return {"method": req.method, "host": urlsplit(req.url).netloc}


def send(
    req: HttpCall, *, timeout: float = 30.0, client: httpx.Client | None = None
) -> httpx.Response:
    """Send ``req`` once, with the bytes n8n's HTTP Request node would send (tests/
    test_e2e_http_parity.py): query parameters appended to the URL's own query, encoded as
    n8n does (RFC 3986: a space is %20, not +); httpx's ``params`` would replace the
    URL's query and encode differently. ``client``: a long-lived client to send through
    (``httpx.request`` builds a client and its TLS context per call, ~40 ms of CPU)."""
    with observed("provider.request", **_provider(req)) as out:
        if client is not None:
            r = client.request(
                req.method, _url(req), headers=req.headers, content=req.content, timeout=timeout
            )
        else:
            r = httpx.request(
                req.method, _url(req), headers=req.headers, content=req.content, timeout=timeout
            )
        out["status"] = r.status_code
        return r


async def asend(client: httpx.AsyncClient, req: HttpCall) -> httpx.Response:
    """``send`` on an async client (its connections are reused): the same bytes."""
    with observed("provider.request", **_provider(req)) as out:
        r = await client.request(req.method, _url(req), headers=req.headers, content=req.content)
        out["status"] = r.status_code
        return r


def _url(req: HttpCall) -> str:
    url = req.url
    if req.params:
        query = "&".join(f"{_component(k)}={_component(v)}" for k, v in req.params.items())
        url = f"{url}{'&' if '?' in url else '?'}{query}"
    return url
