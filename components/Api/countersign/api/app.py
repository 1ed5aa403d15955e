"""The HTTP API (FastAPI): JSON under ``/v1``, problems as RFC 9457, per-user auth, SSE events.

``create_app`` only assembles: the services and settings on ``app.state``, the middleware, the
error handlers, the lifespan (step runtime, Temporal, the reconciler's passes, the event hub) and
one router per resource (``routes/``). Every ``CountersignError`` becomes a problem document with
the error's stable code; a request body that does not match its schema is a 422 problem naming the
field.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from fastapi.staticfiles import StaticFiles
from starlette.exceptions import HTTPException as StarletteHTTPException

from countersign.kernel import CountersignError

from .bodies import StrictJsonRoute
from .codec import CodecCors
from .config import ApiConfig
from .deps import RateLimiter
from .events import EventHub
from .metrics import Measure, Metrics
from .observe import Observe
from .openapi import document_problems
from .pages import STATIC
from .problems import extras_for, problem, status_for
from .responses import problem_response
from .routes import (
    audit,
    auth,
    codec,
    events,
    gates,
    health,
    intents,
    memory,
    pages,
    plans,
    settle,
)
from .routes import registry as registry_routes
from .services.pruning import PruneDesk
from .services.settle import SETTLE_EVERY_S, SettleDesk
from .users import UserStore
from .wiring import Services

__all__ = ["ApiConfig", "create_app"]


def create_app(services: Services, users: UserStore, config: ApiConfig | None = None) -> FastAPI:
    """The ASGI app over one composed set of services."""
    cfg = config or ApiConfig()
    app = FastAPI(
        title="Countersign",
        version="1",
        summary="Signed plans, read-only previews, approvals bound to the plan.",
        lifespan=_lifespan,
        # the request's span is Observe's: FastAPI's own would record the query (a login token)
        telemetry={"tracing": False},
    )
    # every JSON body is read by the strict loader before FastAPI validates it (GLOBAL_SPEC §11a)
    app.router.route_class = StrictJsonRoute
    metrics = Metrics()
    app.state.services, app.state.users, app.state.config = services, users, cfg
    app.state.limiter = RateLimiter(cfg.rate_limit_per_min, users)  # shared through Postgres
    app.state.hub = EventHub(cfg.listen_dsn) if cfg.listen_dsn else None
    app.state.metrics = metrics
    metrics.count_durable(services.events)  # watchers on /metrics (countersign stats)
    app.add_exception_handler(CountersignError, _countersign_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _validation)  # type: ignore[arg-type]
    app.add_exception_handler(StarletteHTTPException, _http)  # type: ignore[arg-type]
    app.add_middleware(Measure, histogram=metrics.latency)
    app.add_middleware(CodecCors, origin=cfg.codec_origin)
    app.add_middleware(Observe)  # outermost: the request's log line and span (Api SPEC)
    for module in (intents, plans, memory, gates, events, auth, settle):
        app.include_router(module.router)
    app.mount("/static", StaticFiles(directory=STATIC), name="static")
    for module in (pages, codec, audit, registry_routes, health):
        app.include_router(module.router)
    document_problems(app)
    return app


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    """Open the step runtime, connect Temporal (then record the runs that ended while the API
    was away, and schedule the reconciler's passes), start the event hub; undo on the way out."""
    services: Services = app.state.services
    cfg: ApiConfig = app.state.config
    hub: EventHub | None = app.state.hub
    async with contextlib.AsyncExitStack() as stack:
        if cfg.runtime is not None:
            services.runtime.use_transport(await stack.enter_async_context(cfg.runtime()))
        if cfg.temporal_connect is not None:
            client = await cfg.temporal_connect()
            services.runtime.use_temporal(client)
            reconciler = services.reconciler(client)
            # runs terminated from the Temporal UI while the API was away get their end
            # recorded (best effort: a failure here must not keep the API from starting)
            with contextlib.suppress(CountersignError):
                await reconciler.reconcile()
            if cfg.reconcile_every_s > 0:
                passes = asyncio.create_task(reconciler.passes(cfg.reconcile_every_s))
                stack.push_async_callback(_stop_task, passes)
        if cfg.runtime is not None and cfg.reconcile_every_s > 0:
            # interactive executes cut short (n8n or an API died mid-write) are settled from
            # evidence, at start and then every few seconds (ExecuteOrchestrator SPEC 10)
            loop = SettleDesk(services.runtime, services.views, services.events).loop()
            every = min(SETTLE_EVERY_S, cfg.reconcile_every_s)
            settling = asyncio.create_task(loop.passes(every))
            stack.push_async_callback(_stop_task, settling)
        if cfg.runtime is not None and cfg.prune_every_s > 0:
            # a write's n8n record goes once the write is settled (N8nRuntime "What n8n keeps")
            pruning = asyncio.create_task(PruneDesk(services.runtime).passes(cfg.prune_every_s))
            stack.push_async_callback(_stop_task, pruning)
        if hub is not None:
            await hub.start()
            stack.push_async_callback(hub.stop)
        yield


async def _stop_task(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


async def _countersign_error(request: Request, e: CountersignError) -> JSONResponse:
    status = status_for(e)
    metrics: Metrics = request.app.state.metrics
    metrics.refusals.labels(e.code).inc()
    headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
    return problem_response(
        status,
        problem(status, e.code, type(e).__doc__ or e.code, e.message, **extras_for(e)),
        headers,
    )


async def _validation(_: Request, e: RequestValidationError) -> JSONResponse:
    errors = [
        {"loc": [str(p) for p in err.get("loc", ())], "msg": str(err.get("msg", ""))}
        for err in e.errors()
    ]
    where = "; ".join(f"{'.'.join(x['loc'])}: {x['msg']}" for x in errors[:5])
    return problem_response(
        422, problem(422, "invalid_request", "The request is not valid", where, errors=errors)
    )


async def _http(_: Request, e: StarletteHTTPException) -> JSONResponse:
    code = {404: "not_found", 405: "method_not_allowed"}.get(e.status_code, "http_error")
    return problem_response(
        e.status_code, problem(e.status_code, code, str(e.detail), str(e.detail))
    )
