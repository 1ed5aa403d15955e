"""What the routes depend on (``Depends``): the caller and the app's parts.

The caller is a Bearer key, or a session cookie — with the CSRF header on writes — counted
against a sliding per-user rate limit (Api SPEC, who is calling). The services, the settings,
the event hub and the metrics are the app's (``app.state``, set once by ``create_app``).
"""

from __future__ import annotations

import contextlib
import hmac
import time
from collections import defaultdict, deque
from collections.abc import Callable
from typing import Annotated

from fastapi import Depends, Request

from countersign.kernel import InputError

from .config import ApiConfig
from .errors import AuthError, RateLimitedError
from .events import EventHub
from .metrics import Metrics
from .users import Principal, UserStore
from .wiring import Services

__all__ = [
    "CSRF_COOKIE",
    "CSRF_HEADER",
    "SESSION_COOKIE",
    "Caller",
    "CodecCaller",
    "Config",
    "Hub",
    "RateLimiter",
    "Svc",
    "Telemetry",
    "Users",
    "caller",
    "codec_caller",
    "signed_in",
]

SESSION_COOKIE = "cs_session"
CSRF_HEADER = "X-CSRF-Token"
CSRF_COOKIE = "cs_csrf"
_UNSAFE = {"POST", "PUT", "PATCH", "DELETE"}


class RateLimiter:
    """``per_min`` requests a minute per user (0 = unlimited).

    With ``users`` (whose store has the connection pool) the count is shared by every API
    process on the database: two wall-clock minute counters, the previous one weighted by how
    much of it still lies inside the last 60 s (a sliding window's usual estimate, exact at the
    minute's edges; one statement per request). Without, a sliding log in this process."""

    def __init__(
        self,
        per_min: int,
        users: UserStore | None = None,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.per_min, self.clock = per_min, clock
        self.users = users if users is not None and users.reads is not None else None
        self.hits: dict[str, deque[float]] = defaultdict(deque)

    @property
    def shared(self) -> bool:
        return self.users is not None

    def allow(self, who: str) -> bool:
        """Count one request of ``who``; False when over the limit."""
        if self.per_min <= 0:
            return True
        if self.users is not None:
            now = self.clock()
            minute, into = divmod(now, 60.0)
            current, before = self.users.count_request(who, int(minute))
            return before * (1.0 - into / 60.0) + current <= self.per_min
        t = time.monotonic()
        q = self.hits[who]
        while q and q[0] <= t - 60:
            q.popleft()
        if len(q) >= self.per_min:
            return False
        q.append(t)
        return True


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
    limiter: RateLimiter = request.app.state.limiter
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


def signed_in(request: Request) -> str | None:
    """The user of the request's session cookie, if it holds a live one (the HTML pages)."""
    session = request.cookies.get(SESSION_COOKIE)
    if session:
        users: UserStore = request.app.state.users
        with contextlib.suppress(AuthError):
            return users.by_session(session).user_id
    return None


def _services(request: Request) -> Services:
    services: Services = request.app.state.services
    return services


def _users(request: Request) -> UserStore:
    users: UserStore = request.app.state.users
    return users


def _config(request: Request) -> ApiConfig:
    config: ApiConfig = request.app.state.config
    return config


def _hub(request: Request) -> EventHub | None:
    hub: EventHub | None = request.app.state.hub
    return hub


def _metrics(request: Request) -> Metrics:
    metrics: Metrics = request.app.state.metrics
    return metrics


Caller = Annotated[Principal, Depends(caller)]
CodecCaller = Annotated[Principal, Depends(codec_caller)]
Svc = Annotated[Services, Depends(_services)]
Users = Annotated[UserStore, Depends(_users)]
Config = Annotated[ApiConfig, Depends(_config)]
Hub = Annotated[EventHub | None, Depends(_hub)]
Telemetry = Annotated[Metrics, Depends(_metrics)]
