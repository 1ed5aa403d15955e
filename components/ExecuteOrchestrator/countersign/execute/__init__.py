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
from .orchestrator import ExecuteRefusedError, ExecuteReport, Executor

__all__ = [
    "Change",
    "ExecuteRefusedError",
    "ExecuteReport",
    "Executor",
    "StaleWorldError",
    "WriteSpec",
    "compensation_steps",
    "idempotency_key",
    "stale_changes",
    "write_specs",
]
