"""The HTTP API (FastAPI): JSON under ``/v1``, problems as RFC 9457, per-user auth, SSE events.

A thin edge over ``PlanService``: parse and validate the request, find the caller, call the
service, shape the answer. Every ``CountersignError`` becomes a problem document with the error's
stable code; a request body that does not match its schema is a 422 problem naming the field.
"""

from __future__ import annotations

import asyncio
import contextlib
import hmac
import html
import json
import logging
import re
import time
from collections import defaultdict, deque
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Annotated, Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from fastapi import Depends, FastAPI, Query, Request, Response
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from fastapi.staticfiles import StaticFiles
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from pydantic import BaseModel, ConfigDict, Field, JsonValue, field_validator
from sqlalchemy import text
from sse_starlette.sse import EventSourceResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from countersign.contextrag import ForgetRequest, MemoryWrite, PrefsUpdate
from countersign.durable import EncryptionCodec
from countersign.kernel import CountersignError, InputError, Needs, ascii_digits, format_utc
from countersign.steps import RegistryKind as Kind
from countersign.steps import RegistryStore, StepTransport

from .bodies import StrictJsonRoute
from .codec import CodecCors, CodecPayloads, decode_for, encode_for, from_wire, to_wire
from .errors import (
    AdminOnlyError,
    AuthError,
    BadCursorError,
    PlanNotFoundError,
    RateLimitedError,
    RegistryItemNotFoundError,
    TextNotSupportedError,
)
from .events import EventHub
from .problems import extras_for, problem, status_for
from .service import PlanService
from .users import Principal, UserStore

__all__ = ["ApiConfig", "create_app"]

PROBLEM_JSON = "application/problem+json"
SESSION_COOKIE = "cs_session"
CSRF_HEADER = "X-CSRF-Token"
CSRF_COOKIE = "cs_csrf"
_UNSAFE = {"POST", "PUT", "PATCH", "DELETE"}


_log = logging.getLogger("countersign.api")


@dataclass
class ApiConfig:
    """Service-level settings."""

    #: requests per key per minute (a sliding window; 0 = unlimited)
    rate_limit_per_min: int = 600
    #: checks reported by ``/healthz`` (name → async check returning a short status)
    health: dict[str, Callable[[], Awaitable[str]]] = field(default_factory=dict)
    #: the database URL the event stream LISTENs on (libpq form)
    listen_dsn: str | None = None
    #: keep-alive comment interval on event streams, seconds
    sse_ping_s: int = 15
    #: where registry edits are stored (None: the registry is read-only over the API)
    registry_store: RegistryStore | None = None
    #: connects to Temporal for durable plans (None: durable plans are refused)
    temporal_connect: Callable[[], Awaitable[Any]] | None = None
    #: seconds between passes that record durable runs ended outside Countersign (terminated
    #: in the Temporal UI, timed out) while the API runs; 0 = only at start and by ``countersign
    #: reconcile`` (``Settings.durable_reconcile_every_s`` under ``countersign up``)
    reconcile_every_s: float = 60.0
    #: where the chat page links a durable run: ``<this>/<workflow_id>`` (the Temporal Web UI's
    #: workflows page of the namespace); None = no link
    temporal_ui: str | None = None
    #: seals and opens Temporal payloads for the codec endpoint (``/codec/*``); None = this
    #: service seals nothing and the endpoint hands payloads back unchanged
    payload_codec: EncryptionCodec | None = None
    #: the one browser origin (the Temporal UI's, e.g. ``http://127.0.0.1:8233``) the codec
    #: routes answer CORS for, with credentials; None = no cross-origin caller
    codec_origin: str | None = None
    #: opens the step runtime for the app's lifetime (an n8n client); None = keep the service's
    runtime: Callable[[], contextlib.AbstractAsyncContextManager[StepTransport]] | None = None


#: a chat message that changes the conversation's last plan ("change it to april", "instead …")
_CHANGE = re.compile(r"^\s*(?:please\s+)?(?:change|instead|make\s+it|move\s+it|switch)\b", re.I)
_CHANGE_LEAD = re.compile(
    r"^\s*(?:please\s+)?(?:change|instead|make|move|switch)\b(?:\s+(?:it|the\s+\w+))?"
    r"(?:\s+(?:to|into))?",
    re.I,
)


class _Body(BaseModel):
    model_config = ConfigDict(extra="forbid")


class IntentRequest(BaseModel):
    """``{"intent": {...}}`` (structured); ``{"text": ...}`` is reserved for chat."""

    model_config = ConfigDict(extra="forbid")
    intent: dict[str, JsonValue] | None = None
    text: str | None = Field(default=None, max_length=4000)
    conversation_id: str | None = Field(default=None, max_length=64)
    #: the person's IANA time zone for chat text ("tomorrow afternoon" is theirs; the chat page
    #: sends the browser's); unset = the service's
    tz: str | None = Field(default=None, max_length=64)

    @field_validator("tz")
    @classmethod
    def _tz_exists(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                ZoneInfo(v)
            except (ZoneInfoNotFoundError, ValueError) as e:
                raise ValueError(f"unknown IANA time zone {v!r}") from e
        return v


class ApproveRequest(_Body):
    choice: JsonValue = None


class RejectRequest(_Body):
    reason: str | None = Field(default=None, max_length=500)


class ReviseRequest(_Body):
    #: the entities to change (``null`` drops an optional one); the rest stay as signed
    entities: dict[str, Any] = Field(min_length=1, max_length=32)


class ReplanRequest(_Body):
    #: the ``source_ref`` of each evidence item to leave out (as the card lists them)
    drop: list[Annotated[str, Field(min_length=1, max_length=256)]] = Field(
        min_length=1, max_length=64
    )


class ExecuteRequest(_Body):
    tokens: dict[str, Annotated[str, Field(min_length=1, max_length=2048)]] = Field(
        default_factory=dict
    )


class Problem(BaseModel):
    """An RFC 9457 problem document."""

    type: str
    title: str
    status: int
    detail: str
    code: str
    errors: list[dict[str, Any]] | None = None


#: problem statuses each kind of operation can answer (documented in the OpenAPI schema)
_AUTHED = (401, 403, 404, 409, 422, 429, 503)


def _document_problems(app: FastAPI) -> None:
    """Every operation documents the problem+json answers it can give (schemathesis checks it)."""
    base = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        doc = base()
        doc.setdefault("components", {}).setdefault("schemas", {})["Problem"] = (
            Problem.model_json_schema()
        )
        ref = {"$ref": "#/components/schemas/Problem"}
        for path, ops in doc.get("paths", {}).items():
            for op in ops.values():
                responses = op.setdefault("responses", {})
                responses.pop("422", None)
                public = path in {"/healthz", "/metrics"}
                if path == "/healthz":
                    responses["503"] = {
                        "description": "a dependency is down (each one's state in the body)",
                        "content": {"application/json": {"schema": {"type": "object"}}},
                    }
                for status in () if public else _AUTHED:
                    responses[str(status)] = {
                        "description": "a problem (RFC 9457)",
                        "content": {"application/problem+json": {"schema": ref}},
                    }
                if not public:
                    op["security"] = [{"bearer": []}]
        doc["components"]["securitySchemes"] = {
            "bearer": {"type": "http", "scheme": "bearer"},
        }
        app.openapi_schema = doc
        return doc

    app.openapi = openapi  # type: ignore[method-assign]


class _Measure:
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


STATIC = Path(__file__).parent / "static"
_CHAT = """
<section aria-label="conversation"><div id="log" aria-live="polite"></div>
<form id="say" autocomplete="off"><label for="text" class="meta">Message</label>
<input id="text" name="text" placeholder="find 30 minutes with Alice and Bob next week" required>
<button type="submit">Send</button></form></section>
<section aria-label="your plans"><h2>Your plans</h2><ul id="plans"></ul></section>
<p class="meta"><a href="/memory">Preferences and consent</a></p>
"""

_MEMORY = """
<section aria-label="preferences" id="memory"><h2>Preferences</h2>
<p class="meta">What the planner may use when you ask for something. Values are JSON
(<code>30</code>, <code>"https://meet.example/me"</code>, <code>{"start": "09:00", "end": "17:00"}</code>).</p>
<table id="prefs"><thead><tr><th>preference</th><th>value</th><th></th></tr></thead><tbody></tbody></table>
<form id="pref-add" autocomplete="off"><label>name <input id="pref-key" required
pattern="[a-z][a-z0-9_.]{0,127}" placeholder="default_meeting_length"></label>
<label>value <input id="pref-value" required placeholder="30"></label>
<button type="submit">Save preference</button></form>
<h2>Consent</h2>
<p class="meta">Private content (T5) is used only for a purpose you have granted.</p>
<ul id="consent"></ul>
<form id="consent-add" autocomplete="off"><label>purpose <input id="consent-purpose" required
pattern="[a-z][a-z0-9_.\\-]{0,63}" placeholder="mail_insights"></label>
<button type="submit">Grant</button></form>
<h2>Your data</h2>
<p><a href="/v1/memory/export" download="countersign-export.json">Export everything (JSON)</a></p>
<form id="forget-subject" autocomplete="off"><label>forget a subject <input id="subject"
minlength="3" required placeholder="carol"></label><button type="submit">Forget it</button></form>
<p id="memory-status" class="meta" aria-live="polite"></p>
<p class="meta"><a href="/">Back to the chat</a></p></section>
"""


def _page(
    body: str,
    *,
    who: str | None = None,
    plan_id: str | None = None,
    status: int = 200,
    temporal_ui: str | None = None,
    memory: bool = False,
) -> Response:
    user = f"<span class='meta'>signed in as {html.escape(who)}</span>" if who else ""
    data = f" data-plan='{html.escape(plan_id)}'" if plan_id else ""
    if temporal_ui and who:
        data += f" data-temporal-ui='{html.escape(temporal_ui)}'"
    script = (
        f"<script src='/static/{'memory' if memory else 'chat'}.js' defer></script>" if who else ""
    )
    page = (
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        "<title>Countersign</title><link rel='stylesheet' href='/static/chat.css'>"
        f"{script}</head><body{data}><header><h1>Countersign</h1>{user}</header>"
        f"<main>{body}</main></body></html>"
    )
    return Response(page, status_code=status, media_type="text/html; charset=utf-8")


def _json_response(
    body: Any, *, status: int = 200, headers: dict[str, str] | None = None
) -> Response:
    return Response(
        status_code=status,
        headers=headers,
        content=json.dumps(
            body, ensure_ascii=False, separators=(",", ":"), default=_default
        ).encode(),
        media_type="application/json",
    )


def _default(value: Any) -> Any:
    if hasattr(value, "isoformat"):
        return format_utc(value)
    raise TypeError(f"{type(value).__name__} is not JSON")


class _RateLimiter:
    def __init__(self, per_min: int) -> None:
        self.per_min = per_min
        self.hits: dict[str, deque[float]] = defaultdict(deque)

    def allow(self, who: str) -> bool:
        if self.per_min <= 0:
            return True
        now = time.monotonic()
        q = self.hits[who]
        while q and q[0] <= now - 60:
            q.popleft()
        if len(q) >= self.per_min:
            return False
        q.append(now)
        return True


def _problem_response(
    status: int, body: dict[str, Any], headers: dict[str, str] | None = None
) -> JSONResponse:
    return JSONResponse(body, status_code=status, media_type=PROBLEM_JSON, headers=headers)


async def caller(request: Request) -> Principal:
    """The authenticated caller: a Bearer key, or a session cookie (+ CSRF header on writes)."""
    return _authenticate(request, csrf=True)


async def codec_caller(request: Request) -> Principal:
    """The caller of a codec route: as :func:`caller`, but a session cookie needs no CSRF header
    (the Temporal UI cannot send it) and the body must be ``application/json`` instead — a type a
    foreign page can only send after a CORS preflight, which only the UI's origin passes; the
    routes change nothing but the audit log."""
    kind = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if kind != "application/json":
        raise InputError(f"a codec request's body must be application/json, not {kind or 'none'}")
    return _authenticate(request, csrf=False)


def _authenticate(request: Request, *, csrf: bool) -> Principal:
    users: UserStore = request.app.state.users
    limiter: _RateLimiter = request.app.state.limiter
    header = request.headers.get("authorization")
    if header:
        scheme, _, key = header.partition(" ")
        if scheme.lower() != "bearer" or not key.strip():
            raise AuthError("Authorization must be 'Bearer <api key>'")
        who = users.by_key(key.strip())
    elif (session := request.cookies.get(SESSION_COOKIE)) is not None:
        who = users.by_session(session)
        if csrf and request.method in _UNSAFE:
            sent = request.headers.get(CSRF_HEADER, "")
            if not who.csrf or not hmac.compare_digest(sent, who.csrf):
                raise AuthError(f"cookie-authenticated {request.method} needs {CSRF_HEADER}")
    else:
        raise AuthError("no credentials: send 'Authorization: Bearer <api key>'")
    if not limiter.allow(who.user_id):
        raise RateLimitedError(f"more than {limiter.per_min} requests a minute")
    return who


Caller = Annotated[Principal, Depends(caller)]
CodecCaller = Annotated[Principal, Depends(codec_caller)]


async def _reconcile_passes(service: PlanService, every_s: float) -> None:
    """While the API runs: every ``every_s`` seconds, record the end of durable runs that closed
    outside Countersign since the pass before (Terminate runs no workflow code). Each pass looks
    back three intervals (at least a minute) so a run whose close reaches Temporal's visibility
    late is still seen; a run already recorded is skipped. A failed pass is logged and the next
    one tries again."""
    last = datetime.now(UTC)
    while True:
        await asyncio.sleep(every_s)
        now = datetime.now(UTC)
        since = last - timedelta(seconds=max(3 * every_s, 60.0))
        try:
            await service.reconcile_durable(closed_since=since)
        except Exception:  # the loop must outlive a failed pass
            _log.warning("a durable reconcile pass failed; the next one retries", exc_info=True)
        else:
            last = now


async def _stop_task(task: asyncio.Task[None]) -> None:
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task


def create_app(service: PlanService, users: UserStore, config: ApiConfig | None = None) -> FastAPI:
    """The ASGI app over one composed service."""
    cfg = config or ApiConfig()
    hub = EventHub(cfg.listen_dsn) if cfg.listen_dsn else None
    limiter = _RateLimiter(cfg.rate_limit_per_min)
    metrics = CollectorRegistry()
    latency = Histogram(
        "countersign_http_request_seconds",
        "HTTP request latency",
        ["method", "route", "status"],
        registry=metrics,
        buckets=(0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10),
    )
    engine_latency = Histogram(
        "countersign_engine_seconds",
        "preview / execute latency inside the API",
        ["action"],
        registry=metrics,
        buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
    )
    refusals = Counter(
        "countersign_refusals_total",
        "refused requests by error code (token refusals among them)",
        ["code"],
        registry=metrics,
    )

    @asynccontextmanager
    async def lifespan(_: FastAPI) -> AsyncIterator[None]:
        async with contextlib.AsyncExitStack() as stack:
            if cfg.runtime is not None:
                service.use_transport(await stack.enter_async_context(cfg.runtime()))
            if cfg.temporal_connect is not None:
                service.use_temporal(await cfg.temporal_connect())
                # runs terminated from the Temporal UI while the API was away get their end
                # recorded (best effort: a failure here must not keep the API from starting)
                with contextlib.suppress(CountersignError):
                    await service.reconcile_durable()
                if cfg.reconcile_every_s > 0:
                    passes = asyncio.create_task(_reconcile_passes(service, cfg.reconcile_every_s))
                    stack.push_async_callback(_stop_task, passes)
            if hub is not None:
                await hub.start()
                stack.push_async_callback(hub.stop)
            yield

    app = FastAPI(
        title="Countersign",
        version="1",
        summary="Signed plans, read-only previews, approvals bound to the plan.",
        lifespan=lifespan,
    )
    # every JSON body is read by the strict loader before FastAPI validates it (GLOBAL_SPEC §11a)
    app.router.route_class = StrictJsonRoute

    app.state.users = users
    app.state.limiter = limiter

    # ---- errors --------------------------------------------------------------------------------
    @app.exception_handler(CountersignError)
    async def _countersign_error(_: Request, e: CountersignError) -> JSONResponse:
        status = status_for(e)
        refusals.labels(e.code).inc()
        headers = {"WWW-Authenticate": "Bearer"} if status == 401 else None
        return _problem_response(
            status,
            problem(status, e.code, type(e).__doc__ or e.code, e.message, **extras_for(e)),
            headers,
        )

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, e: RequestValidationError) -> JSONResponse:
        errors = [
            {"loc": [str(p) for p in err.get("loc", ())], "msg": str(err.get("msg", ""))}
            for err in e.errors()
        ]
        where = "; ".join(f"{'.'.join(x['loc'])}: {x['msg']}" for x in errors[:5])
        return _problem_response(
            422, problem(422, "invalid_request", "The request is not valid", where, errors=errors)
        )

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, e: StarletteHTTPException) -> JSONResponse:
        code = {404: "not_found", 405: "method_not_allowed"}.get(e.status_code, "http_error")
        return _problem_response(
            e.status_code, problem(e.status_code, code, str(e.detail), str(e.detail))
        )

    app.add_middleware(_Measure, histogram=latency)
    app.add_middleware(CodecCors, origin=cfg.codec_origin)

    # ---- plans ---------------------------------------------------------------------------------
    @app.post(
        "/v1/intents",
        status_code=201,
        tags=["plans"],
        response_model=dict[str, Any],
        responses={200: {"description": "more input is needed: {needs, intent}"}},
    )
    async def post_intent(body: IntentRequest, who: Caller) -> Response:
        """Plan a structured intent (``{"intent": {...}}``), sign and store it, and preview it
        (read-only); or understand chat text (``{"text": ..., "conversation_id"?}``): a plan when
        the text says enough, else the questions still open, or what this service can do."""
        if body.text is not None:
            if body.intent is not None:
                raise TextNotSupportedError("send either text or a structured intent, not both")
            return await converse(body.text, who.user_id, body.conversation_id, body.tz)
        if body.intent is None:
            raise TextNotSupportedError(
                'send a structured intent as {"intent": {...}} or chat text as {"text": ...}'
            )
        status, out, engine_ms = await propose(body.intent, who.user_id)
        return _json_response(
            out,
            status=status,
            # the engines' share of this request (plan, sign, store, preview), for clients and
            # the benchmark that measures what the API adds around them
            headers={"Server-Timing": f"engine;dur={engine_ms:.2f}"},
        )

    async def propose(
        intent_body: dict[str, Any], user_id: str, *, drop: list[str] | None = None
    ) -> tuple[int, dict[str, Any], float]:
        intent = service.intent_from(intent_body, user_id)
        started = time.perf_counter()
        out, evidence = await asyncio.to_thread(
            lambda: service.plan_with_evidence(intent, user_id, exclude=drop or ())
        )
        used = [e.to_json() for e in evidence]
        if isinstance(out, Needs):
            needs = {
                "needs": [n.to_json() for n in out.needs],
                "intent": out.intent,
                "evidence": used,
            }
            return 200, needs, (time.perf_counter() - started) * 1000
        plan_id = out["plan"]["plan_id"]
        preview: dict[str, Any] | None = None
        preview_error: dict[str, Any] | None = None
        start = time.perf_counter()
        try:
            preview = await service.preview(plan_id, user_id)
        except CountersignError as e:
            status = status_for(e)
            preview_error = problem(status, e.code, type(e).__doc__ or e.code, e.message)
        engine_latency.labels("preview").observe(time.perf_counter() - start)
        gates = sorted({s["gate_id"] for s in out["plan"]["graph"] if s.get("gate_id")})
        body = {
            "plan_id": plan_id,
            **out,
            "preview": preview,
            "preview_error": preview_error,
            "gates": gates,
            # what ContextRAG gave the planner (its hash is the signed plan's meta.evidence_hash)
            "evidence": used,
        }
        return 201, body, (time.perf_counter() - started) * 1000

    async def revise_plan(
        parent: str, changes: dict[str, Any], user_id: str
    ) -> tuple[int, dict[str, Any]]:
        body = await asyncio.to_thread(service.revision_body, parent, user_id, changes)
        status, out, _ = await propose(body, user_id)
        if out.get("plan_id"):
            await asyncio.to_thread(
                service.revised, parent, out["plan_id"], user_id, sorted(changes)
            )
            out["revises"] = {"plan_id": parent, "changed": sorted(changes)}
        return status, out

    async def converse(
        text: str, user_id: str, conversation_id: str | None, tz: str | None
    ) -> Response:
        conv = await asyncio.to_thread(service.conversations.open, conversation_id, user_id)
        zone = tz or service.tz
        if conv.intent is None and conv.plan_id and _CHANGE.match(text):
            # "change it to april": a revision of the conversation's last plan (signed anew)
            parent = service.document(conv.plan_id, user_id)["plan"]
            # what follows "change it (to)" is read as a request of the same intent: "to april"
            # reads as "in april", "to porto" as "in porto"
            rest = _CHANGE_LEAD.sub("", text).strip()
            changes: dict[str, Any] = {}
            for said_text in (rest, f"in {rest}"):
                said = service.intake.understand(
                    said_text,
                    received_at=service.clock(),
                    tz=zone,
                    contacts=service.contacts,
                    intent=parent["intent"]["intent"],
                    known={},
                )
                changes = {e.entity: said.entities[e.entity] for e in said.explained}
                if changes:
                    break
            if changes:
                status, out = await revise_plan(conv.plan_id, changes, user_id)
                answer = {"conversation_id": conv.conversation_id, "understood_by": "intake", **out}
                if out.get("plan_id"):
                    conv.plan_id = out["plan_id"]
                summary = (
                    f"Here is {conv.plan_id}, revising {out['revises']['plan_id']} "
                    f"({', '.join(out['revises']['changed'])})."
                    if out.get("revises")
                    else "More is needed."
                )
                await asyncio.to_thread(
                    service.conversations.record, conv, text, answer, summary=summary
                )
                return _json_response(answer, status=status)
        u = service.understand(text, conv, tz=zone)
        reply: dict[str, Any] = {
            "conversation_id": conv.conversation_id,
            "intent": u.intent,
            "confidence": round(u.confidence, 3),
            "understood_by": u.source,
            "entities": u.entities,
            "explained": [
                {"entity": e.entity, "value": e.value, "words": e.words} for e in u.explained
            ],
        }
        status = 200
        needs = list(u.needs)
        if u.intent is not None and needs:
            # what the person's preferences fill is not asked for (ContextRAG evidence)
            filled = await asyncio.to_thread(
                service.filled_by_memory, u.intent, u.entities, zone, user_id
            )
            needs = [n for n in needs if n.entity not in filled]
        if u.intent is None and not u.needs:
            reply["can_do"] = u.can_do
            summary = "I can: " + "; ".join(u.can_do)
        elif needs:
            reply["needs"] = [
                {"entity": n.entity, "question": n.question, "options": n.options} for n in needs
            ]
            summary = " ".join(n.question for n in needs)
            conv.intent, conv.entities = u.intent, dict(u.entities)
        else:
            status, out, _ = await propose(
                {
                    "intent": u.intent,
                    "entities": u.entities,
                    "tz": zone,
                    "context_budget": service.chat_context_budget,
                },
                user_id,
            )
            reply |= out
            conv.intent, conv.entities = None, {}  # the next message starts a new request
            conv.plan_id = out.get("plan_id")
            summary = f"Here is the plan {conv.plan_id}." if conv.plan_id else "More is needed."
        await asyncio.to_thread(service.conversations.record, conv, text, reply, summary=summary)
        return _json_response(reply, status=status)

    @app.get("/v1/conversations/{conversation_id}", tags=["plans"])
    def get_conversation(conversation_id: str, who: Caller) -> dict[str, Any]:
        """A conversation: its turns and what it has settled so far."""
        return service.conversations.show(conversation_id, who.user_id)

    @app.get("/v1/plans", tags=["plans"])
    def list_plans(
        who: Caller,
        limit: Annotated[int, Query(ge=1, le=100)] = 20,
        cursor: Annotated[str | None, Query(max_length=200)] = None,
    ) -> dict[str, Any]:
        """The caller's plans, newest first (cursor-paginated)."""
        return service.list(who.user_id, limit=limit, cursor=cursor)

    @app.get("/v1/plans/{plan_id}", tags=["plans"], response_model=dict[str, Any])
    async def get_plan(plan_id: str, who: Caller) -> Response:
        """The signed plan, its status, per-step status and results, and its gates."""
        # one statement on the read pool: cheaper in the loop than a hop to a worker thread
        return _json_response(service.show(plan_id, who.user_id))

    @app.get("/v1/plans/{plan_id}/receipts", tags=["plans"], response_model=dict[str, Any])
    def get_receipts(plan_id: str, who: Caller) -> Response:
        """The plan's approval receipts as a bundle that verifies offline (``countersign
        receipts verify``): the signed plan, every gate decision signed, a signed head, keys."""
        name = f"receipts-{plan_id}.json"
        disposition = {"Content-Disposition": f'attachment; filename="{name}"'}
        return _json_response(service.receipts(plan_id, who.user_id), headers=disposition)

    @app.post("/v1/plans/{plan_id}/revise", status_code=201, tags=["plans"])
    async def revise(plan_id: str, body: ReviseRequest, who: Caller) -> Response:
        """A revision: the plan's intent with these entities changed, planned, signed and
        previewed as a new plan that names the one it revises. Executing the revision (for a
        watcher: starting it) cancels the plan it revises."""
        status, out = await revise_plan(plan_id, body.entities, who.user_id)
        return _json_response(out, status=201 if status == 201 else status)

    @app.post("/v1/plans/{plan_id}/replan", status_code=201, tags=["plans"])
    async def replan(plan_id: str, body: ReplanRequest, who: Caller) -> Response:
        """Plan the same request again without the evidence items named in ``drop`` (the card's
        "drop and re-plan"): a revision — a new signed plan naming the one it revises."""
        intent_body = await asyncio.to_thread(service.replan_body, plan_id, who.user_id)
        status, out, _ = await propose(intent_body, who.user_id, drop=body.drop)
        if out.get("plan_id"):
            await asyncio.to_thread(
                service.revised, plan_id, out["plan_id"], who.user_id, ["evidence"]
            )
            out["revises"] = {"plan_id": plan_id, "changed": ["evidence"]}
        out["dropped"] = sorted(set(body.drop))
        return _json_response(out, status=status)

    # ---- memory (ContextRAG SPEC §3) -------------------------------------------------------------
    @app.get("/v1/memory/prefs", tags=["memory"])
    def get_prefs(who: Caller) -> dict[str, Any]:
        """The caller's preferences and consent per purpose."""
        return service.memory.prefs(who.user_id)

    @app.put("/v1/memory/prefs", tags=["memory"])
    def put_prefs(body: PrefsUpdate, who: Caller) -> dict[str, Any]:
        """Set preferences (``null`` removes one) and grant (``true``) or revoke (``false``)
        consent per purpose; consent changes are audited (purposes only)."""
        out = service.memory.put_prefs(who.user_id, body.to_json())
        if body.consent:
            with service.db.tx() as c:
                service.audit.append(
                    c,
                    {
                        "kind": "consent_changed",
                        "status": "ok",
                        "actor": who.user_id,
                        "details": {"consent": dict(sorted(body.consent.items()))},
                    },
                )
        return out

    @app.post("/v1/memory/facts", status_code=201, tags=["memory"])
    def post_facts(body: MemoryWrite, who: Caller) -> dict[str, Any]:
        """Store facts (T2–T5; T5 derived scalars under a consent purpose) and contacts."""
        return service.memory.add(who.user_id, body.to_json())

    @app.post("/v1/memory/forget", tags=["memory"])
    async def forget(body: ForgetRequest, who: Caller) -> dict[str, Any]:
        """Forget everything about the caller (``{"all": true}``: the account too) or one
        subject: the Temporal runs and n8n executions of their plans first, then every table
        and the audit log (redacted); audited without the forgotten content. A runtime that
        is down: 503 ``forget_incomplete`` with nothing deleted — the same request again
        finishes."""
        return await service.forget(who.user_id, body.to_json())

    @app.get("/v1/memory/export", tags=["memory"])
    async def export(who: Caller) -> Response:
        """One JSON document with everything stored about the caller: their rows in every table
        and a summary of their n8n executions and Temporal runs."""
        return _json_response(await service.export(who.user_id))

    @app.post("/v1/plans/{plan_id}/preview", tags=["plans"])
    async def preview(plan_id: str, who: Caller) -> dict[str, Any]:
        """Run the read-only preview again."""
        start = time.perf_counter()
        try:
            return await service.preview(plan_id, who.user_id)
        finally:
            engine_latency.labels("preview").observe(time.perf_counter() - start)

    @app.post("/v1/plans/{plan_id}/gates/{gate_id}/approve", tags=["gates"])
    async def approve(
        plan_id: str, gate_id: str, who: Caller, body: ApproveRequest | None = None
    ) -> dict[str, Any]:
        """Approve a gate: a short-lived, single-use token bound to this plan, gate and caller;
        a plan running on Temporal gets it at once (its ``approve_gate`` update)."""
        return await service.approve(
            plan_id, gate_id, who.user_id, choice=body.choice if body else None
        )

    @app.post("/v1/plans/{plan_id}/gates/{gate_id}/reject", tags=["gates"])
    async def reject(
        plan_id: str, gate_id: str, who: Caller, body: RejectRequest | None = None
    ) -> dict[str, Any]:
        """Reject a gate: nothing it guards will run."""
        return await service.reject(
            plan_id, gate_id, who.user_id, reason=body.reason if body else None
        )

    @app.post("/v1/plans/{plan_id}/execute", status_code=202, tags=["plans"])
    async def execute(plan_id: str, body: ExecuteRequest, who: Caller) -> dict[str, Any]:
        """Execute with gate tokens; progress is on the event stream."""
        start = time.perf_counter()
        try:
            report = await service.execute(plan_id, who.user_id, body.tokens)
        finally:
            engine_latency.labels("execute").observe(time.perf_counter() - start)
        return {
            "plan_id": report.plan_id,
            "status": report.status,
            "results": [w.to_json() for w in report.wrappers],
            "compensated": report.compensated,
            "workflow_id": report.workflow_id,
            "waiting_gate": report.waiting_gate,
            "gate_preview": report.gate_preview,
            "events": f"/v1/plans/{plan_id}/events",
        }

    @app.post("/v1/plans/{plan_id}/cancel", tags=["plans"])
    async def cancel(plan_id: str, who: Caller) -> dict[str, Any]:
        """Cancel the plan: nothing more of it runs (a running watcher is told to stop)."""
        return await service.cancel(plan_id, who.user_id)

    @app.get(
        "/v1/plans/{plan_id}/events",
        tags=["plans"],
        response_class=EventSourceResponse,
        responses={200: {"content": {"text/event-stream": {}}}},
    )
    async def events(
        plan_id: str,
        who: Caller,
        request: Request,
        follow: bool = True,
    ) -> EventSourceResponse:
        """The plan's events as Server-Sent Events: replayed from the log, then live; resumable
        with ``Last-Event-ID`` (ids are the per-plan sequence)."""
        service.document(plan_id, who.user_id)  # 404 for another user's plan
        raw = request.headers.get("last-event-id", "0").strip() or "0"
        if not ascii_digits(raw) or len(raw) > 9:
            raise BadCursorError(f"Last-Event-ID {raw[:20]!r} is not an event id of this plan")
        after = int(raw)

        async def stream() -> AsyncIterator[dict[str, Any]]:
            nonlocal after
            while True:
                if hub is not None and follow:
                    async with hub.waiter(plan_id) as woke:
                        rows = await asyncio.to_thread(service.events.since, plan_id, after)
                        if not rows:
                            if await request.is_disconnected():
                                return
                            with contextlib.suppress(TimeoutError):
                                await asyncio.wait_for(woke.wait(), timeout=cfg.sse_ping_s)
                            continue
                else:
                    rows = await asyncio.to_thread(service.events.since, plan_id, after)
                for r in rows:
                    after = int(r["seq"])
                    yield {"id": str(after), "event": r["kind"], "data": _event_json(r)}
                if not follow and len(rows) < 500:
                    return

        return EventSourceResponse(stream(), ping=cfg.sse_ping_s)

    # ---- browser sessions ------------------------------------------------------------------------
    @app.get("/login", tags=["service"], include_in_schema=False)
    def login(token: Annotated[str, Query(min_length=10, max_length=200)]) -> Response:
        """Spend a one-time login link (``countersign up`` prints it): sets an HttpOnly,
        SameSite=Strict session cookie and a readable CSRF cookie, then goes to the chat page."""
        session, csrf = users.redeem_link(token)
        response = Response(status_code=303, headers={"Location": "/"})
        response.set_cookie(
            SESSION_COOKIE, session, httponly=True, samesite="strict", max_age=12 * 3600, path="/"
        )
        # the page reads this one and echoes it in X-CSRF-Token on every write
        response.set_cookie(CSRF_COOKIE, csrf, httponly=False, samesite="strict", path="/")
        return response

    app.mount("/static", StaticFiles(directory=STATIC), name="static")

    def signed_in(request: Request) -> str | None:
        session = request.cookies.get(SESSION_COOKIE)
        if session:
            with contextlib.suppress(AuthError):
                return users.by_session(session).user_id
        return None

    @app.get("/", include_in_schema=False)
    def home(request: Request) -> Response:
        """The chat page for a signed-in person; otherwise how to sign in."""
        who = signed_in(request)
        if who is None:
            return _page(
                "<p>Not signed in: open the login link <code>countersign up</code> printed "
                "(or run <code>countersign login-link</code>).</p>"
                "<p>The API: <a href='/docs'>/docs</a>.</p>"
            )
        return _page(_CHAT, who=who, temporal_ui=cfg.temporal_ui)

    @app.get("/memory", include_in_schema=False)
    def memory_page(request: Request) -> Response:
        """The preferences and consent page."""
        who = signed_in(request)
        if who is None:
            return _page("<p>Not signed in.</p>", status=401)
        return _page(_MEMORY, who=who, memory=True)

    @app.get("/plans/{plan_id}", include_in_schema=False)
    def card_page(plan_id: str, request: Request) -> Response:
        """One plan's card at its own URL (the owner's only: another's is not found)."""
        who = signed_in(request)
        if who is None:
            return _page("<p>Not signed in.</p>", status=401)
        service.document(plan_id, who)  # 404 problem for another user's plan
        return _page(_CHAT, who=who, plan_id=plan_id, temporal_ui=cfg.temporal_ui)

    @app.get("/v1/me", tags=["service"])
    def me(who: Caller) -> dict[str, Any]:
        """Who the credentials belong to."""
        return {"user_id": who.user_id, "admin": who.admin, "via": who.via}

    # ---- the Temporal UI's codec endpoint (Api SPEC §codec) ------------------------------------
    def owns_plan(user_id: str) -> Callable[[str], bool]:
        def owns(plan_id: str) -> bool:
            try:
                service.document(plan_id, user_id)
            except PlanNotFoundError:
                return False
            return True

        return owns

    @app.post("/codec/decode", tags=["codec"], response_model=CodecPayloads)
    def codec_decode(body: CodecPayloads, who: CodecCaller) -> dict[str, Any]:
        """Open the Temporal payloads the caller may read (their own runs'; admins: all); any
        other stays sealed, and that refusal is audited (``codec_decode_refused``)."""
        payloads, refused = decode_for(
            who, from_wire(body), cfg.payload_codec, owns_plan=owns_plan(who.user_id)
        )
        if refused:
            owners = sorted({r["owner"] for r in refused})
            with service.db.tx() as c:
                service.audit.append(
                    c,
                    {
                        "kind": "codec_decode_refused",
                        "status": "refused",
                        "actor": who.user_id,
                        "reason": f"{len(refused)} Temporal payload(s) of another person "
                        "left sealed",
                        "details": {
                            "owners": owners[:20],
                            "workflows": sorted({r["workflow_id"] for r in refused})[:20],
                            "payloads": len(refused),
                        },
                    },
                )
        return to_wire(payloads)

    @app.post("/codec/encode", tags=["codec"], response_model=CodecPayloads)
    def codec_encode(body: CodecPayloads, who: CodecCaller) -> dict[str, Any]:
        """Seal payloads as the caller's (what the Temporal UI sends into a run)."""
        return to_wire(encode_for(who, from_wire(body), cfg.payload_codec))

    # ---- audit, registry, health, metrics ------------------------------------------------------
    @app.get("/v1/audit", tags=["audit"])
    def audit(
        who: Caller,
        plan_id: Annotated[str | None, Query(max_length=26)] = None,
        limit: Annotated[int, Query(ge=1, le=1000)] = 200,
    ) -> dict[str, Any]:
        """Audit rows of one of the caller's plans (admins: any plan, or all rows)."""
        if plan_id is None and not who.admin:
            raise AdminOnlyError("give plan_id (only an admin reads the whole audit log)")
        if plan_id is not None and not who.admin:
            service.document(plan_id, who.user_id)
        with service.db.tx() as c:
            rows = service.audit.rows(c, plan_id=plan_id, limit=limit)
        return {"items": [_jsonable(r) for r in rows]}

    @app.get("/v1/registry", tags=["registry"])
    def registry(who: Caller) -> dict[str, Any]:
        """The registry this service plans against: its version, connectors and intents."""
        reg = service.registry
        return {
            "version": reg.version,
            "connectors": sorted(reg.connectors),
            "intents": sorted(reg.intents),
        }

    @app.get("/v1/registry/{kind}/{name}", tags=["registry"])
    def registry_file(kind: Kind, name: str, who: Caller) -> dict[str, Any]:
        """One connector or intent as the service plans with it, and its API revision."""
        reg = service.registry
        table: Mapping[str, Any] = reg.connectors if kind == "connectors" else reg.intents
        item = table.get(name)
        if item is None:
            raise RegistryItemNotFoundError(f"no {kind[:-1]} {name[:64]!r} in the registry")
        store = cfg.registry_store
        return {
            "kind": kind,
            "name": name,
            "revision": store.revision(kind, name) if store else 0,
            "registry_version": reg.version,
            "document": item.to_json(),
        }

    @app.put("/v1/registry/{kind}/{name}", tags=["registry"])
    def put_registry_file(
        kind: Kind, name: str, document: dict[str, JsonValue], who: Caller
    ) -> dict[str, Any]:
        """Replace one connector or intent (admins only): validated with the registry's own
        errors, stored as a new revision; plans signed before are refused from now on."""
        if not who.admin:
            raise AdminOnlyError("only an admin edits the registry")
        store = cfg.registry_store
        if store is None:
            raise AdminOnlyError("this service's registry is read-only")
        reg = store.put(kind, name, document, author=who.user_id)
        service.use_registry(reg)
        return {
            "kind": kind,
            "name": name,
            "revision": store.revision(kind, name),
            "registry_version": reg.version,
        }

    @app.get("/healthz", tags=["service"])
    async def healthz() -> JSONResponse:
        """Each dependency's state; 200 only when all are ok."""
        report: dict[str, str] = {}
        try:
            await asyncio.to_thread(_db_ping, service)
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

    @app.get("/metrics", tags=["service"], response_class=PlainTextResponse)
    def prometheus() -> PlainTextResponse:
        """Prometheus text format."""
        return PlainTextResponse(
            generate_latest(metrics).decode(), media_type="text/plain; version=0.0.4"
        )

    _document_problems(app)
    return app


def _db_ping(service: PlanService) -> None:
    with service.db.tx() as c:
        c.execute(text("SELECT 1"))


def _jsonable(row: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in row.items():
        if hasattr(v, "isoformat"):
            out[k] = format_utc(v)
        else:
            out[k] = v
    return out


def _event_json(row: dict[str, Any]) -> str:
    return json.dumps(_jsonable(row), separators=(",", ":"), sort_keys=True)
