"""One ``APIRouter`` per resource (Api LLD, module map); ``create_app`` includes them in order."""

from . import audit, auth, codec, events, gates, health, intents, memory, pages, plans, registry

__all__ = [
    "audit",
    "auth",
    "codec",
    "events",
    "gates",
    "health",
    "intents",
    "memory",
    "pages",
    "plans",
    "registry",
]
