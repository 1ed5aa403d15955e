"""Prometheus metrics of one app (its own registry): request latency by method, route template
and status; preview / execute latency inside the API; refusals by error code; chat messages
answered with a refusal by kind and what."""

from __future__ import annotations

import time
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

__all__ = ["Measure", "Metrics"]


class Metrics:
    """The app's collectors, in a registry of its own (``/metrics``)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.latency = Histogram(
            "countersign_http_request_seconds",
            "HTTP request latency",
            ["method", "route", "status"],
            registry=self.registry,
            buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
        )
        self.engine_latency = Histogram(
            "countersign_engine_seconds",
            "preview / execute latency inside the API",
            ["action"],
            registry=self.registry,
            buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
        self.refusals = Counter(
            "countersign_refusals_total",
            "refused requests by error code (token refusals among them)",
            ["code"],
            registry=self.registry,
        )

        self.chat_refusals = Counter(
            "countersign_chat_refusals_total",
            "chat messages answered with a refusal (never a plan), by kind and what",
            ["kind", "what"],
            registry=self.registry,
        )

    def chat_refusal(self, kind: str, what: str) -> None:
        """A chat message answered with a refusal (``cannot`` / ``hostile``, and what)."""
        self.chat_refusals.labels(kind, what).inc()

    def engine(self, action: str, seconds: float) -> None:
        """An engine's time inside a request (``preview``, ``execute``)."""
        self.engine_latency.labels(action).observe(seconds)


class Measure:
    """Pure ASGI middleware: request latency by method, route template and status."""

    def __init__(self, app: Any, histogram: Histogram) -> None:
        self.app, self.histogram = app, histogram

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start, status = time.perf_counter(), [500]

        async def sending(message: Any) -> None:
            if message["type"] == "http.response.start":
                status[0] = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, sending)
        finally:
            route = getattr(scope.get("route"), "path", "unmatched")
            self.histogram.labels(scope["method"], route, str(status[0])).observe(
                time.perf_counter() - start
            )
