"""``countersign stats``: the service-level view from the API's ``/metrics`` (Cli SPEC, stats).

``service_view`` is pure: Prometheus text in, the view out — preview and execute p95 (from the
``countersign_engine_seconds`` histogram, estimated inside the bucket as Prometheus'
``histogram_quantile`` does), errors by class (answers 5xx: the server's; 4xx: refused requests)
and by status, refusals by reason (the problem codes, and the chat's refusals by kind), and the
durable runs not ended (watchers). ``stats_cmd`` fetches the text and prints the view (or JSON).
Figures are since the API process started (its counters are in memory).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Annotated

import typer

__all__ = ["ServiceView", "p95", "render", "service_view", "stats_cmd"]


@dataclass
class ServiceView:
    """What ``countersign stats`` prints; latencies in milliseconds, None when nothing ran."""

    preview_p95_ms: float | None = None
    execute_p95_ms: float | None = None
    previews: int = 0
    executes: int = 0
    requests: int = 0
    errors_by_class: dict[str, int] = field(default_factory=dict)
    errors_by_status: dict[str, int] = field(default_factory=dict)
    refusals_by_reason: dict[str, int] = field(default_factory=dict)
    watchers: int | None = None
    durable_plans: int | None = None


def p95(buckets: list[tuple[float, float]], q: float = 0.95) -> float | None:
    """The ``q`` quantile of a cumulative histogram (``(upper bound, count)``, +Inf included),
    interpolated linearly inside its bucket; the highest finite bound when it falls in +Inf;
    None for an empty histogram."""
    buckets = sorted(buckets)
    total = buckets[-1][1] if buckets else 0
    if total <= 0:
        return None
    rank, lower, below = q * total, 0.0, 0.0
    for bound, count in buckets:
        if count >= rank:
            if math.isinf(bound):
                return lower
            inside = count - below
            return lower + (bound - lower) * ((rank - below) / inside if inside else 1.0)
        lower, below = bound, count
    return lower


def _samples(text: str) -> list[tuple[str, dict[str, str], float]]:
    from prometheus_client.parser import text_string_to_metric_families  # noqa: PLC0415

    return [
        (s.name, dict(s.labels), float(s.value))
        for family in text_string_to_metric_families(text)
        for s in family.samples
    ]


def service_view(text: str) -> ServiceView:
    """The view from one scrape of ``/metrics`` (module docstring).

    Raises:
        ValueError: the text is not Prometheus' text format.
    """
    view = ServiceView()
    engine: dict[str, list[tuple[float, float]]] = {"preview": [], "execute": []}
    statuses: Counter[str] = Counter()
    for name, labels, value in _samples(text):
        if name == "countersign_engine_seconds_bucket" and labels.get("action") in engine:
            engine[labels["action"]].append((float(labels["le"]), value))
        elif name == "countersign_http_request_seconds_count":
            statuses[labels.get("status", "?")] += int(value)
        elif name == "countersign_refusals_total" and value:
            view.refusals_by_reason[labels["code"]] = int(value)
        elif name == "countersign_chat_refusals_total" and value:
            reason = f"chat:{labels.get('kind')}:{labels.get('what')}"
            view.refusals_by_reason[reason] = int(value)
        elif name == "countersign_durable_running":
            if labels.get("kind") == "watcher":
                view.watchers = int(value)
            else:
                view.durable_plans = int(value)
    for action, buckets in engine.items():
        ms = p95(buckets)
        setattr(view, f"{action}_p95_ms", None if ms is None else round(ms * 1000, 1))
        setattr(view, f"{action}s", int(max((c for _, c in buckets), default=0)))
    view.requests = sum(statuses.values())
    view.errors_by_status = {s: n for s, n in sorted(statuses.items()) if s[:1] in "45" and n}
    for status, n in view.errors_by_status.items():
        kind = "server (5xx)" if status.startswith("5") else "refused (4xx)"
        view.errors_by_class[kind] = view.errors_by_class.get(kind, 0) + n
    view.refusals_by_reason = dict(sorted(view.refusals_by_reason.items(), key=lambda kv: -kv[1]))
    return view


def _ms(v: float | None, n: int) -> str:
    return "no runs yet" if v is None else f"{v:g} ms (p95 of {n})"


def _pairs(d: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in d.items()) or "none"


def render(view: ServiceView) -> str:
    """The view as the lines ``countersign stats`` prints."""
    durable = (
        "not reported"
        if view.watchers is None
        else f"{view.watchers} watching, {view.durable_plans or 0} other durable runs"
    )
    return "\n".join(
        [
            f"preview     {_ms(view.preview_p95_ms, view.previews)}",
            f"execute     {_ms(view.execute_p95_ms, view.executes)}",
            f"requests    {view.requests}",
            f"errors      {_pairs(view.errors_by_class)}"
            + (f" (by status: {_pairs(view.errors_by_status)})" if view.errors_by_status else ""),
            f"refusals    {_pairs(view.refusals_by_reason)}",
            f"watchers    {durable}",
        ]
    )


def stats_cmd(
    url: Annotated[
        str, typer.Option("--url", help="The API's base URL.")
    ] = "http://127.0.0.1:8000",
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object.")] = False,
) -> None:
    """Print the service-level view from the API's metrics: preview and execute p95, errors by
    class, refusals by reason, watchers."""
    import httpx  # noqa: PLC0415 - keeps `--help` fast

    from .exits import EXIT_REFUSED, fail  # noqa: PLC0415

    try:
        r = httpx.get(url.rstrip("/") + "/metrics", timeout=10)
        r.raise_for_status()
        view = service_view(r.text)
    except (httpx.HTTPError, ValueError) as e:
        fail(EXIT_REFUSED, f"stats: cannot read {url}/metrics: {type(e).__name__}: {e}")
    typer.echo(json.dumps(asdict(view)) if as_json else render(view))
