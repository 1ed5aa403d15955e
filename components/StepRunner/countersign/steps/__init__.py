"""StepRunner: the floor under Preview, Execute and Durable — how one step's write is sent at
most once (the write protocol and its ``classify``), and how writes are undone."""

from .compensation import compensation_steps
from .validity import PlanExpiredError, PlanNotCurrentError, RegistryChangedError, check_current
from .writes import (
    Attempt,
    Replay,
    Ticket,
    Verdict,
    WriteDone,
    WriteFailedError,
    WriteProtocol,
    classify,
    idempotency_key,
)

__all__ = [
    "Attempt",
    "PlanExpiredError",
    "PlanNotCurrentError",
    "RegistryChangedError",
    "Replay",
    "Ticket",
    "Verdict",
    "WriteDone",
    "WriteFailedError",
    "WriteProtocol",
    "check_current",
    "classify",
    "compensation_steps",
    "idempotency_key",
]
