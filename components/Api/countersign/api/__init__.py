"""Api: the HTTP service (FastAPI) over the engines — intents, plans, gates, execute, events (SSE),
audit, registry, health and metrics — with per-user keys and browser sessions."""

from .app import ApiConfig, create_app
from .core import PlanState, fold_events
from .errors import (
    AdminOnlyError,
    ApiError,
    AuthError,
    BadCursorError,
    PlanCancelledError,
    PlanFinishedError,
    PlanNotFoundError,
    RateLimitedError,
    TextNotSupportedError,
    UnknownUserError,
    UserExistsError,
    UserMismatchError,
)
from .events import EventHub, EventLog
from .service import PlanService
from .users import Principal, UserStore

__all__ = [
    "AdminOnlyError",
    "ApiConfig",
    "ApiError",
    "AuthError",
    "BadCursorError",
    "EventHub",
    "EventLog",
    "PlanCancelledError",
    "PlanFinishedError",
    "PlanNotFoundError",
    "PlanService",
    "PlanState",
    "Principal",
    "RateLimitedError",
    "TextNotSupportedError",
    "UnknownUserError",
    "UserExistsError",
    "UserMismatchError",
    "UserStore",
    "create_app",
    "fold_events",
]
