"""ExecuteOrchestrator: verified, gate-checked, idempotent execution of signed plans."""

from .core import (
    Change,
    StaleWorldError,
    WriteSpec,
    compensation_steps,
    idempotency_key,
    stale_changes,
    write_specs,
)

__all__ = [
    "Change",
    "StaleWorldError",
    "WriteSpec",
    "compensation_steps",
    "idempotency_key",
    "stale_changes",
    "write_specs",
]
