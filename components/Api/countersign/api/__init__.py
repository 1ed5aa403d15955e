"""Api: the HTTP service (FastAPI) over the engines — intents, plans, gates, execute, events (SSE),
audit, registry, health and metrics — with per-user keys and browser sessions."""

from .app import create_app
from .config import ApiConfig
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
from .events import EventHub
from .users import Principal, UserStore
from .wiring import Services, build_services

__all__ = [
    "AdminOnlyError",
    "ApiConfig",
    "ApiError",
    "AuthError",
    "BadCursorError",
    "EventHub",
    "PlanCancelledError",
    "PlanFinishedError",
    "PlanNotFoundError",
    "PlanState",
    "Principal",
    "RateLimitedError",
    "Services",
    "TextNotSupportedError",
    "UnknownUserError",
    "UserExistsError",
    "UserMismatchError",
    "UserStore",
    "build_services",
    "create_app",
    "fold_events",
]
