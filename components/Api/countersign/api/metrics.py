"""Prometheus metrics of one app (its own registry): request latency by method, route template
and status; preview / execute latency inside the API; refusals by error code; chat messages
answered with a refusal by kind and what; durable runs on Temporal not ended yet, by kind
(``watcher`` / ``plan``), read from the plan events at each scrape. ``countersign stats``
(Cli) reads the service-level view from these."""

from __future__ import annotations

import time
from collections.abc import Iterator
from typing import Any, Protocol

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["Measure", "Metrics", "OpenHandOffs"]


class OpenHandOffs(Protocol):
    """The plan events' view of hand-offs not ended (``PlanEvents.open_ones``)."""

    def open_ones(self, kind: str, *, until: str) -> list[dict[str, Any]]: ...


class _DurableRuns(Collector):
    """``countersign_durable_running{kind}``: runs handed to Temporal whose end is not recorded
    (a watcher's workflow id is ``watch-…``); nothing when the database does not answer."""

    def __init__(self, events: OpenHandOffs) -> None:
        self.events = events

    def collect(self) -> Iterator[Metric]:
        try:
            open_ = self.events.open_ones("handed_off", until="durable_finished")
        except Exception:  # a scrape must not fail with the database: the gauge is left out
            return
        kinds = {"watcher": 0, "plan": 0}
        for e in open_:
            details = e.get("details")
            wid = str(details.get("workflow_id", "")) if isinstance(details, dict) else ""
            kinds["watcher" if wid.startswith("watch-") else "plan"] += 1
        g = GaugeMetricFamily(
            "countersign_durable_running",
            "durable runs handed to Temporal and not ended, by kind (watcher, plan)",
            labels=["kind"],
        )
        for kind, n in kinds.items():
            g.add_metric([kind], n)
        yield g


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

    def count_durable(self, events: OpenHandOffs) -> None:
        """Report the durable runs not ended (watchers among them) from ``events`` at each
        scrape."""
        self.registry.register(_DurableRuns(events))

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
