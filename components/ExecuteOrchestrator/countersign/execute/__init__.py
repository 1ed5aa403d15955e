"""ExecuteOrchestrator: verified, gate-checked, idempotent execution of signed plans."""

from .core import (
    Change,
    StaleWorldError,
    WriteSpec,
    stale_changes,
    write_specs,
    writes_before_gate,
)
from .orchestrator import ExecuteRefusedError, ExecuteReport, Executor

__all__ = [
    "Change",
    "ExecuteRefusedError",
    "ExecuteReport",
    "Executor",
    "StaleWorldError",
    "WriteSpec",
    "stale_changes",
    "write_specs",
    "writes_before_gate",
]
