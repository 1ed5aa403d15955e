"""StepRunner: the floor under Preview, Execute and Durable — verify before anything runs, the
one DAG scheduler (``run_dag``), one step on its runtime (``N8nStepRunner`` over a
``StepTransport``), the recorder, how one write is sent at most once (the write protocol and its
``classify``), how writes are undone, and the effective registry (the shipped folder plus API
edits, ``RegistryStore``: the API edits it, the durable worker follows it)."""

from .adapters import N8nTransport, StoreRecorder
from .budget import OverBudgetError, check_budget
from .choices import ChoiceError, GateOffer, ancestors, check_choice, gate_offer, offered_choices
from .compensation import compensation_steps
from .registry_store import Kind as RegistryKind
from .registry_store import RegistryStore
from .runner import (
    N8nStepRunner,
    PreparedStep,
    PreviewRefusedError,
    StepFailedError,
    StepTransport,
    run_dag,
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
)

__all__ = [
    "Attempt",
    "ChoiceError",
    "GateOffer",
    "N8nStepRunner",
    "N8nTransport",
    "OverBudgetError",
    "PlanExpiredError",
    "PlanNotCurrentError",
    "PreparedStep",
    "PreviewRefusedError",
    "RegistryChangedError",
    "RegistryKind",
    "RegistryStore",
    "Replay",
    "StepFailedError",
    "StepRecorder",
    "StepTransport",
    "StoreRecorder",
    "Ticket",
    "Verdict",
    "WriteDone",
    "WriteFailedError",
    "WriteProtocol",
    "ancestors",
    "check_budget",
    "check_choice",
    "check_current",
    "classify",
    "compensation_steps",
    "fingerprint",
    "gate_offer",
    "idempotency_key",
    "offered_choices",
    "run_dag",
    "verify_or_audit",
]
