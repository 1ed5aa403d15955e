"""ExecuteOrchestrator: verified, gate-checked, idempotent execution of signed plans."""

from .core import (
    Change,
    StaleWorldError,
    WriteSpec,
    stale_changes,
    write_specs,
    writes_before_gate,
)
from .orchestrator import DurableStarter, ExecuteStores, Executor
from .state import ExecuteRefusedError, ExecuteReport, PolicyRefusedError

__all__ = [
    "Change",
    "DurableStarter",
    "ExecuteRefusedError",
    "ExecuteReport",
    "ExecuteStores",
    "Executor",
    "PolicyRefusedError",
    "StaleWorldError",
    "WriteSpec",
    "stale_changes",
    "write_specs",
    "writes_before_gate",
]
