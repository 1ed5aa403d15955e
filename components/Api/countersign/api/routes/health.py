"""The service's own state: ``/healthz`` (each dependency) and ``/metrics`` (Prometheus)."""

from __future__ import annotations

import asyncio

from fastapi import APIRouter
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import generate_latest

from ..bodies import StrictJsonRoute
from ..deps import Config, Svc, Telemetry

__all__ = ["router"]

router = APIRouter(route_class=StrictJsonRoute)


@router.get("/healthz", tags=["service"])
async def healthz(svc: Svc, cfg: Config) -> JSONResponse:
    """Each dependency's state; 200 only when all are ok."""
    report: dict[str, str] = {}
    try:
        await asyncio.to_thread(svc.db.scalar, "SELECT 1")
        report["database"] = "ok"
    except Exception as e:
        report["database"] = f"down: {type(e).__name__}"
    for name, check in cfg.health.items():
        try:
            report[name] = await asyncio.wait_for(check(), timeout=3)
        except Exception as e:
            report[name] = f"down: {type(e).__name__}"
    ok = all(v == "ok" for v in report.values())
    return JSONResponse({"status": "ok" if ok else "degraded", **report}, 200 if ok else 503)


@router.get("/metrics", tags=["service"], response_class=PlainTextResponse)
def prometheus(metrics: Telemetry) -> PlainTextResponse:
    """Prometheus text format."""
    return PlainTextResponse(
        generate_latest(metrics.registry).decode(), media_type="text/plain; version=0.0.4"
    )
