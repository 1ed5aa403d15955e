"""n8n runtime: pinned install in a cache folder, loopback process, bootstrap, async REST client."""

from . import runtime
from .client import N8nClient
from .errors import N8nApiError, N8nError, N8nInstallError, N8nUnavailableError
from .runtime import *  # noqa: F403  (its public names: runtime.__all__, listed once there)

__all__ = [
    "N8nApiError",
    "N8nClient",
    "N8nError",
    "N8nInstallError",
    "N8nUnavailableError",
]
__all__ += runtime.__all__
