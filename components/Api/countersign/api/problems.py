"""Errors as RFC 9457 ``application/problem+json``: one stable ``type`` per error code.

The HTTP status comes from the nearest class in ``_STATUS`` along the error's MRO, so a new
subclass inherits a sensible status; ``type`` is ``/problems/<code>`` (its stable identity) and
``code`` repeats it for programs that switch on it. Nothing else of the exception (no traceback,
no token) reaches the body.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from countersign.approvals import ApprovalError, GateDecidedError
from countersign.execute import ExecuteRefusedError, PolicyRefusedError, StaleWorldError
from countersign.kernel import (
    CountersignError,
    DocumentError,
    DuplicateKeyError,
    InputError,
    KeyRingError,
    PlanningError,
    SignatureError,
)
from countersign.n8n import N8nError
from countersign.planlibrary import EmbeddingError
from countersign.steps import ChoiceError, OverBudgetError, PlanNotCurrentError
from countersign.storage import (
    InProgressError,
    OutcomeUnknownError,
    PlanConflictError,
    ResourceBusyError,
    StorageError,
)
from countersign.storage.errors import StorageConstraintError

from .errors import (
    AdminOnlyError,
    AuthError,
    ConversationNotFoundError,
    DurableUpdateError,
    ForgetIncompleteError,
    PlanCancelledError,
    PlanFinishedError,
    PlanNotFoundError,
    RateLimitedError,
    RegistryItemNotFoundError,
)

__all__ = ["PROBLEM_BASE", "extras_for", "problem", "status_for"]

PROBLEM_BASE = "/problems/"

_STATUS: list[tuple[type[CountersignError], int]] = [
    (AuthError, 401),
    (AdminOnlyError, 403),
    (RateLimitedError, 429),
    (PlanNotFoundError, 404),
    (ConversationNotFoundError, 404),
    (RegistryItemNotFoundError, 404),
    (InputError, 422),
    (PlanningError, 422),
    (SignatureError, 403),
    (ApprovalError, 403),
    (GateDecidedError, 409),
    (InProgressError, 409),
    (ResourceBusyError, 409),
    (PlanConflictError, 409),
    (StorageConstraintError, 409),
    (PlanNotCurrentError, 409),
    (PlanCancelledError, 409),
    (PlanFinishedError, 409),
    (DurableUpdateError, 409),
    (PolicyRefusedError, 403),
    (ExecuteRefusedError, 409),
    (StaleWorldError, 409),
    (OverBudgetError, 409),
    (OutcomeUnknownError, 409),
    (ForgetIncompleteError, 503),
    (KeyRingError, 503),
    (N8nError, 503),
    (EmbeddingError, 503),  # the embedder is missing or down: the service, not the request
    (StorageError, 503),
]


def status_for(error: CountersignError) -> int:
    """The HTTP status for an error (409 for a refusal nothing more specific covers)."""
    for cls in type(error).__mro__:
        for known, status in _STATUS:
            if cls is known:
                return status
    return 503 if error.retryable else 409


#: error class → the members its problem document adds (the first class along the list that the
#: error is an instance of: a duplicate key before any other malformed document)
_EXTRAS: list[tuple[type[CountersignError], Callable[[Any], dict[str, Any]]]] = [
    (DuplicateKeyError, lambda e: {"key": e.key, "path": e.path}),
    (DocumentError, lambda e: {"path": e.path} if e.path else {}),
    (StaleWorldError, lambda e: {"changes": [c.summary() for c in e.changes]}),
    (ChoiceError, lambda e: {"gate_id": e.gate_id, "field": e.field}),
    (ResourceBusyError, lambda e: {"resource": e.key}),
    (
        OverBudgetError,
        lambda e: {"budget": {"step": e.step, "limit": e.limit, "total": e.total}},
    ),
    (
        ForgetIncompleteError,
        lambda e: {
            "pending": e.pending,
            "erased": e.erased,
            "retry": "POST /v1/memory/forget again with the same body to finish",
        },
    ),
]


def extras_for(error: CountersignError) -> dict[str, Any]:
    """Members a problem document adds for its error class: ``changes`` (each read that moved
    since the preview, with old and new values per field) for ``stale_world``; ``budget`` (the step,
    its limit and the total now) for ``over_budget``; ``gate_id`` and ``field`` (what was wrong
    with the choice) for ``choice_invalid``; ``pending`` (store → error code), ``erased``
    (counts so far) and ``retry`` for ``forget_incomplete``; ``key`` and ``path`` for
    ``document_duplicate_key``, ``path`` (when known) for ``document_malformed``."""
    for cls, extras in _EXTRAS:
        if isinstance(error, cls):
            return extras(error)
    return {}


def problem(status: int, code: str, title: str, detail: str, **extra: Any) -> dict[str, Any]:
    """A problem document."""
    return {
        "type": PROBLEM_BASE + code,
        "title": title,
        "status": status,
        "detail": detail,
        "code": code,
        **extra,
    }
