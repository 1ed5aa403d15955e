"""n8n errors: our types for what the n8n runtime and its REST API answer."""

from __future__ import annotations

from countersign.kernel import CountersignError

__all__ = ["N8nApiError", "N8nError", "N8nInstallError", "N8nUnavailableError"]


class N8nError(CountersignError):
    """Something about n8n went wrong."""

    code = "n8n_error"


class N8nInstallError(N8nError):
    """Installing Node or n8n failed (the message points at the install log)."""

    code = "n8n_install_failed"


class N8nUnavailableError(N8nError):
    """n8n did not answer (not started, crashed, or still starting). Retryable."""

    code = "n8n_unavailable"
    retryable = True

    def __init__(self, message: str, *, sent: bool = True) -> None:
        super().__init__(message)
        #: False only when the request provably never left (connection refused / connect
        #: timeout): then a write guarded by the idempotency ledger had no effect.
        self.sent = sent


class N8nApiError(N8nError):
    """n8n answered with an error status; carries the status and a body excerpt (no secrets)."""

    code = "n8n_api_error"

    def __init__(self, operation: str, status: int, body: str) -> None:
        excerpt = " ".join(body.split())[:500]
        super().__init__(f"n8n {operation} answered {status}: {excerpt}")
        self.status = status
        self.body = excerpt

    @property
    def retryable(self) -> bool:  # type: ignore[override]
        """5xx may pass on retry; 4xx will not."""
        return self.status >= 500
