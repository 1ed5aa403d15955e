"""StepRunner: the floor under Preview, Execute and Durable — verify before anything runs, the
one DAG scheduler (``run_dag``), one step on its runtime (``N8nStepRunner`` over a
``StepTransport`` for n8n, ``DirectSender`` for HTTP and SMTP from this process), the recorder,
how one write is sent at most once (the write protocol and its ``classify``), and the one
write-and-undo sequence both runtimes run (``write_once``, ``undo_writes``)."""

from .adapters import N8nTransport, StoreRecorder
from .budget import OverBudgetError, check_budget
from .choices import ChoiceError, GateOffer, ancestors, check_choice, gate_offer, offered_choices
from .compensation import compensation_step, compensation_steps, original_of
from .direct import DirectSend, DirectSender
from .gates import gate_scopes, guarding_gate
from .locks import lock_keys, step_lock_key
from .policy import policy_refusal
from .runner import (
    N8nStepRunner,
    PreparedStep,
    PreviewRefusedError,
    StepFailedError,
    StepTransport,
    run_dag,
)
from .sequence import (
    StepMarks,
    UndoStatus,
    Write,
    WriteRuntime,
    no_marks,
    step_output,
    undo_writes,
    write_once,
)
from .validity import PlanExpiredError, PlanNotCurrentError, RegistryChangedError, check_current
from .verify import StepRecorder, fingerprint, verify_or_audit
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
    ledger_result,
    natural_key,
)

__all__ = [
    "Attempt",
    "ChoiceError",
    "DirectSend",
    "DirectSender",
    "GateOffer",
    "N8nStepRunner",
    "N8nTransport",
    "OverBudgetError",
    "PlanExpiredError",
    "PlanNotCurrentError",
    "PreparedStep",
    "PreviewRefusedError",
    "RegistryChangedError",
    "Replay",
    "StepFailedError",
    "StepMarks",
    "StepRecorder",
    "StepTransport",
    "StoreRecorder",
    "Ticket",
    "UndoStatus",
    "Verdict",
    "Write",
    "WriteDone",
    "WriteFailedError",
    "WriteProtocol",
    "WriteRuntime",
    "ancestors",
    "check_budget",
    "check_choice",
    "check_current",
    "classify",
    "compensation_step",
    "compensation_steps",
    "fingerprint",
    "gate_offer",
    "gate_scopes",
    "guarding_gate",
    "idempotency_key",
    "ledger_result",
    "lock_keys",
    "natural_key",
    "no_marks",
    "offered_choices",
    "original_of",
    "policy_refusal",
    "run_dag",
    "step_lock_key",
    "step_output",
    "undo_writes",
    "verify_or_audit",
    "write_once",
]
