"""StepRunner: the floor under Preview, Execute and Durable — how one step's write is sent at
most once (the write protocol and its ``classify``), and how writes are undone."""

from .compensation import compensation_steps
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
    "Replay",
    "Ticket",
    "Verdict",
    "WriteDone",
    "WriteFailedError",
    "WriteProtocol",
    "classify",
    "compensation_steps",
    "idempotency_key",
]
