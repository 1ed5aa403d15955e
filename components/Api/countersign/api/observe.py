"""The API's logs and traces of each request (Api SPEC, logs and traces).

``Observe`` is a pure ASGI middleware: for every HTTP request it binds ``plan_id`` (from a
``/v1/plans/{plan_id}/…`` path) to the structlog context, so every line logged while the
request runs (audit events, n8n calls, provider requests) carries it; opens the request's span
(continuing a caller's W3C ``traceparent``) when tracing is on; and logs one ``http.request``
line at the end: method, route template, status, latency_ms, plan_id. The path's query string is
never logged (a login link carries its token there).

``traced_client`` gives a Temporal client temporalio's ``TracingInterceptor`` when tracing is
on, so a durable plan's workflow and activities join the trace of the request that started them.
"""

from __future__ import annotations

import re
import time
from contextlib import nullcontext
from typing import Any

import structlog
from opentelemetry import propagate, trace
from temporalio.client import Client

from countersign.kernel.logs import get_logger
from countersign.kernel.tracing import tracer, tracing_enabled

__all__ = ["Observe", "plan_id_of", "traced_client"]

_LOG = get_logger("countersign.api")
_TRACER = tracer("countersign.api")
_PLAN_PATH = re.compile(r"^/v1/plans/([0-9A-HJKMNP-TV-Z]{26})(?:/|$)")


def plan_id_of(path: str) -> str | None:
    """The plan id a request's path names (``/v1/plans/{plan_id}…``), or None."""
    found = _PLAN_PATH.match(path)
    return found.group(1) if found else None


class Observe:
    """Pure ASGI middleware: the request's log line and span (module docstring)."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        plan_id = plan_id_of(scope["path"])
        bound = (
            structlog.contextvars.bound_contextvars(plan_id=plan_id) if plan_id else nullcontext()
        )
        with bound:
            if tracing_enabled():
                await self._traced(scope, receive, send, plan_id)
            else:
                await self._measured(scope, receive, send, plan_id, None)

    async def _traced(self, scope: Any, receive: Any, send: Any, plan_id: str | None) -> None:
        carrier = {
            k.decode("latin-1"): v.decode("latin-1")
            for k, v in scope.get("headers", ())
            if k in (b"traceparent", b"tracestate")
        }
        with _TRACER.start_as_current_span(
            f"{scope['method']} {scope['path']}",
            context=propagate.extract(carrier),
            kind=trace.SpanKind.SERVER,
        ) as span:
            if plan_id:
                span.set_attribute("countersign.plan_id", plan_id)
            await self._measured(scope, receive, send, plan_id, span)

    async def _measured(
        self, scope: Any, receive: Any, send: Any, plan_id: str | None, span: Any
    ) -> None:
        start, status = time.perf_counter(), [500]

        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            latency_ms = round((time.perf_counter() - start) * 1000, 1)
            if span is not None:
                span.update_name(f"{scope['method']} {route}")
                span.set_attribute("http.request.method", scope["method"])
                span.set_attribute("http.route", route)
                span.set_attribute("http.response.status_code", status[0])
                if status[0] >= 500:
                    span.set_status(trace.StatusCode.ERROR)
            (_LOG.warning if status[0] >= 500 else _LOG.info)(
                "http.request",
                method=scope["method"],
                route=route,
                status=status[0],
                latency_ms=latency_ms,
                plan_id=plan_id,
            )


async def traced_client(client: Client) -> Client:
    """``client`` with temporalio's ``TracingInterceptor`` when tracing is on (a worker built on
    it traces too); ``client`` itself otherwise, or when it has the interceptor already."""
    if not tracing_enabled():
        return client
    from temporalio.contrib.opentelemetry import TracingInterceptor  # noqa: PLC0415

    config = client.config()
    if any(isinstance(i, TracingInterceptor) for i in config["interceptors"]):
        return client  # connected with it already
    config["interceptors"] = [*config["interceptors"], TracingInterceptor()]
    return Client(**config)
