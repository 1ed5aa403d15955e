"""n8n runtime: pinned install in a cache folder, loopback process, bootstrap, async REST client."""

from .client import N8nClient
from .errors import N8nApiError, N8nError, N8nInstallError, N8nUnavailableError
from .runtime import (
    N8N_VERSION,
    N8nHandle,
    N8nInstall,
    Toolchain,
    check_lockfiles,
    deploy_fingerprints,
    free_port,
    handle_from,
    install,
    install_toolchain,
    installed_fingerprints,
    start,
    status,
    stop,
)

__all__ = [
    "N8N_VERSION",
    "N8nApiError",
    "N8nClient",
    "N8nError",
    "N8nHandle",
    "N8nInstall",
    "N8nInstallError",
    "N8nUnavailableError",
    "Toolchain",
    "check_lockfiles",
    "deploy_fingerprints",
    "free_port",
    "handle_from",
    "install",
    "install_toolchain",
    "installed_fingerprints",
    "start",
    "status",
    "stop",
]
