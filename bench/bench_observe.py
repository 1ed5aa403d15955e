"""Benchmark: what logs and traces cost per call (issue 27 §2; GLOBAL_SPEC §8e).

CPU time per operation, in one process, of what the code adds around each call to another
process and each API request, against the same operation without it:

- ``observed`` (StepRunner: every n8n call and provider request) — logs at ``warning`` (dropped:
  a library use), at ``info`` to a null stream (the API's default), and with tracing on (a
  provider and a span processor whose exporter keeps nothing);
- ``Observe`` (the API's middleware) around a trivial ASGI app, tracing off and on;
- one audit row's log line (``_log_appended``).

Tracing can be turned on once per process (OpenTelemetry keeps one provider), so every
"tracing off" figure is taken first. Run: ``.venv/bin/python bench/bench_observe.py [--n 20000]``.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
from common import machine
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from countersign.api.observe import Observe
from countersign.audit.store import PreparedEntry, _log_appended
from countersign.kernel.logs import configure_logging
from countersign.kernel.tracing import traces_to
from countersign.steps.http import observed


class _Null(io.StringIO):
    def write(self, s: str) -> int:
        return len(s)


class _Drop(SpanExporter):
    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.SUCCESS


def _per_op_us(fn: Callable[[], Any], n: int) -> float:
    for _ in range(min(n, 1000)):
        fn()
    best = float("inf")
    for _ in range(3):
        t0 = time.process_time()
        for _ in range(n):
            fn()
        best = min(best, time.process_time() - t0)
    return best / n * 1e6


def _observed() -> None:
    with observed("n8n.call", webhook="cs-abc", write=True, plan_id="01PLAN", step=3) as out:
        out["status"] = "ok"


def _bare() -> None:
    out: dict[str, Any] = {}
    out["status"] = "ok"


_ENTRY = PreparedEntry(
    {
        "kind": "step_finished",
        "plan_id": "01PLAN",
        "step": 3,
        "op": "calendar.create_event",
        "status": "ok",
        "reason": None,
        "latency_ms": 41,
        "retries": 0,
        "details": '{"gate_id":"gate-A"}',
    },
    "0" * 64,
)


async def _app(scope: Any, receive: Any, send: Any) -> None:
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": b""})


def _asgi(app: Any, n: int) -> float:
    scope = {"type": "http", "method": "POST", "path": "/v1/plans/01JCZ3ABCDEFGHJKMNPQRSTVWX/x"}

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b""}

    async def send(_: Any) -> None:
        return None

    async def run() -> float:
        for _ in range(1000):
            await app(scope, receive, send)
        t0 = time.process_time()
        for _ in range(n):
            await app(scope, receive, send)
        return (time.process_time() - t0) / n * 1e6

    return asyncio.run(run())


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000)
    n = ap.parse_args().n
    print(machine())
    rows: list[tuple[str, float]] = [("bare call", _per_op_us(_bare, n))]
    configure_logging("warning")
    rows.append(("observed, logs dropped (warning), tracing off", _per_op_us(_observed, n)))
    rows.append(("audit row line, dropped", _per_op_us(lambda: _log_appended([_ENTRY], 7), n)))
    configure_logging("info", stream=_Null())
    rows.append(("observed, logged (info), tracing off", _per_op_us(_observed, n)))
    rows.append(("audit row line, logged", _per_op_us(lambda: _log_appended([_ENTRY], 7), n)))
    rows.append(("ASGI request, bare app", _asgi(_app, n)))
    rows.append(("ASGI request, Observe, tracing off", _asgi(Observe(_app), n)))
    with traces_to(_Drop()):
        rows.append(("observed, logged, tracing on", _per_op_us(_observed, n)))
        rows.append(("ASGI request, Observe, tracing on", _asgi(Observe(_app), n)))
    for name, us in rows:
        print(f"{name:48s} {us:8.1f} µs CPU")


if __name__ == "__main__":
    main()
