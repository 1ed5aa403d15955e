"""The write protocol: the one way any runtime sends a write (GLOBAL_SPEC §13 inv. 4, at most
once).

    claim ─► (prepare) ─► mark sent ─► send once ─► classify ─► complete | fail | unknown ─► audit

Both runtimes call it: interactive execution (a write as an n8n step workflow) and durable
execution (a Temporal activity). What a runtime supplies is the send, reported as an ``Attempt``;
what the attempt means is decided here, by ``classify``, and nowhere else:

- ``not_sent`` — the request provably never reached the runtime or the provider (connection
  refused, a webhook that answered 404 because it was not registered yet, a request that could
  not even be built). Ledger ``failed``: the same key may be claimed and sent again.
- ``answered`` with a provider status: 2xx → ``completed``; 409/412 on an op whose idempotency is
  a natural key → ``completed`` (the provider already has it: deduplicated); any other 4xx →
  ``failed`` (refused, nothing happened); 5xx → ``unknown`` (the provider may have acted).
- ``refused`` — a non-HTTP provider refused before accepting anything (e.g. SMTP 5xx at RCPT).
- ``lost`` — anything after the request may have arrived: a read timeout, a dropped connection,
  a 5xx from the runtime itself, an exception nobody classified. Ledger ``unknown``: nothing more
  is sent under that key until reconciliation (the provider, the runtime's execution record or a
  person says what happened).

A runtime never re-sends a write on its own; re-sending is only ever a new claim of a key the
ledger says is ``failed``. What a failure *is* (transient, rate limited, auth, conflict, …) and
what follows it is ``steps.failures`` and the policy's failure table: ``WriteFailedError`` carries
the attempt it was decided on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from sqlalchemy import Connection

from countersign.kernel import CountersignError, content_hash
from countersign.registry import Operation
from countersign.storage import IdempotencyLedger, OutcomeUnknownError

__all__ = [
    "Attempt",
    "Replay",
    "Ticket",
    "Verdict",
    "WriteDone",
    "WriteFailedError",
    "WriteProtocol",
    "classify",
    "idempotency_key",
    "ledger_result",
    "natural_key",
]

Verdict = Literal["completed", "deduplicated", "failed", "unknown"]


def idempotency_key(plan_id: str, step: int, args: Mapping[str, Any]) -> str:
    """``plan_id:step:arg_hash`` — the key every write of a step carries (GLOBAL_SPEC)."""
    return f"{plan_id}:{step}:{content_hash(dict(args))}"


@dataclass(frozen=True)
class Attempt:
    """What happened to the one send of a write, as its runtime saw it."""

    kind: Literal["answered", "refused", "not_sent", "lost"]
    #: the provider's status when ``answered`` (HTTP; SMTP reply codes go as ``refused``)
    status: int | None = None
    #: the provider's (normalized) answer
    output: Any = None
    #: what happened, for the ledger and the audit (no secrets, no person content)
    detail: str = ""
    #: the provider's answer headers a runtime passes on (``Retry-After``; names any case)
    headers: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def not_sent(cls, detail: str) -> Attempt:
        """The request provably never left (safe to send again under the same key)."""
        return cls("not_sent", detail=detail)

    @classmethod
    def lost(cls, detail: str) -> Attempt:
        """The request may have arrived and we do not know what it did."""
        return cls("lost", detail=detail)


def classify(attempt: Attempt, *, natural_key: bool = False) -> Verdict:
    """What an attempt means for its idempotency key (the module docstring's table)."""
    if attempt.kind != "answered":  # not_sent / refused: nothing happened; lost: may have
        return "unknown" if attempt.kind == "lost" else "failed"
    status = attempt.status
    # no status: a non-HTTP provider accepted it
    if status is None or 200 <= status < 300:
        return "completed"
    if status in (409, 412) and natural_key:
        return "deduplicated"
    # 4xx: refused, nothing happened; 5xx, 1xx, 3xx or nonsense: the provider may have acted
    return "failed" if 400 <= status < 500 else "unknown"


def natural_key(op: Operation) -> bool:
    """Whether the op's idempotency is the provider's natural key (a 409/412 then means the
    provider already has it: ``deduplicated``)."""
    return op.idempotency is not None and op.idempotency.via == "natural_key"


def ledger_result(attempt: Attempt, verdict: Verdict) -> dict[str, Any]:
    """What the ledger keeps of an attempt that ``completed`` (or was ``deduplicated``): the
    provider's answer, its status and the provider's id for what was created, where it says one
    (later steps and reconciliation refer to it)."""
    out = attempt.output
    return {
        "output": out,
        "status": attempt.status,
        "deduplicated": verdict == "deduplicated",
        "id": out.get("id") if isinstance(out, Mapping) else None,
    }


class WriteFailedError(CountersignError):
    """A write was refused by its provider or never sent; its key is ``failed`` (may be sent
    again under a new approval)."""

    code = "write_failed"

    def __init__(
        self, step: int, reason: str, *, sent: bool, attempt: Attempt | None = None
    ) -> None:
        super().__init__(f"step {step} failed: {reason}")
        self.step = step
        self.reason = reason
        self.sent = sent
        #: the attempt the verdict was decided on (``steps.failures`` classifies it)
        self.attempt = attempt
        #: how many times the write was sent under its key before this failure (a runtime that
        #: retries a ``failed`` key counts them)
        self.sends = 1


@dataclass(frozen=True)
class Ticket:
    """A claimed write, ready to send."""

    key: str
    plan_id: str
    step: int
    op: str
    actor: str
    natural_key: bool
    started: float


@dataclass(frozen=True)
class Replay:
    """The write already completed under this key: its stored result (nothing is sent)."""

    key: str
    result: Any


@dataclass(frozen=True)
class WriteDone:
    """A write that completed now (or was deduplicated by the provider's natural key)."""

    key: str
    verdict: Verdict
    result: dict[str, Any] = field(default_factory=dict)


AuditSink = Callable[[dict[str, Any]], None]
#: appends one audit row inside the caller's transaction (``AuditLog.append``)
AuditInTx = Callable[[Connection, dict[str, Any]], object]


@dataclass
class WriteProtocol:
    """One owner's writes against the idempotency ledger, audited through ``audit``."""

    ledger: IdempotencyLedger
    audit: AuditSink
    owner: str
    clock: Callable[[], float]
    #: when given, the ``step_started`` row is appended in the ledger's claiming transaction (one
    #: transaction for the claim decision: StepRunner SPEC, write protocol); otherwise through
    #: ``audit``
    audit_in: AuditInTx | None = None

    def claim(
        self,
        *,
        plan_id: str,
        step: int,
        op: str,
        args: Mapping[str, Any],
        actor: str,
        natural_key: bool = False,
    ) -> Ticket | Replay:
        """Claim the step's key. ``Replay`` when it completed before.

        Raises:
            OutcomeUnknownError: an earlier send's outcome is unknown; reconcile first.
            InProgressError / IdempotencyMismatchError: from the ledger.
        """
        key = idempotency_key(plan_id, step, args)
        started = {
            "kind": "step_started",
            "status": "running",
            "actor": actor,
            "plan_id": plan_id,
            "step": step,
            "op": op,
        }
        audit_in = self.audit_in
        on_claimed = None if audit_in is None else (lambda c: audit_in(c, started))
        claim = self.ledger.claim(
            key, content_hash(dict(args)), owner=self.owner, on_claimed=on_claimed
        )
        if claim.state == "completed":
            return Replay(key, claim.result)
        if audit_in is None:
            self.audit(started)
        return Ticket(key, plan_id, step, op, actor, natural_key, self.clock())

    def sending(self, ticket: Ticket) -> None:
        """The request is about to leave: from here on a lost holder means ``unknown``."""
        self.ledger.mark_sent(ticket.key, owner=self.owner)

    def abandon(self, ticket: Ticket, reason: str) -> WriteFailedError:
        """The request could not be built (before ``sending``): ``failed``, nothing left."""
        return self.settle_failed(ticket, Attempt.not_sent(reason))

    def settle(self, ticket: Ticket, attempt: Attempt) -> WriteDone:
        """Record what the one send did and return it; raise when it did not complete.

        Raises:
            WriteFailedError: refused or never sent (key ``failed``).
            OutcomeUnknownError: may have happened (key ``unknown``; nothing more is sent).
        """
        verdict = classify(attempt, natural_key=ticket.natural_key)
        ms = int((self.clock() - ticket.started) * 1000)
        if verdict == "failed":
            raise self.settle_failed(ticket, attempt)
        if verdict == "unknown":
            reason = attempt.detail or f"provider answered {attempt.status}"
            self.ledger.mark_unknown(ticket.key, reason[:300], owner=self.owner)
            self.audit(
                self._row(ticket, "step_unknown", "unknown", latency_ms=ms, reason=reason[:500])
            )
            raise OutcomeUnknownError(
                f"plan {ticket.plan_id} step {ticket.step} ({ticket.op}): outcome unknown "
                f"({reason[:200]}); nothing more is sent under {ticket.key} until it is reconciled"
            )
        result = ledger_result(attempt, verdict)
        self.ledger.complete(ticket.key, result, owner=self.owner)
        self.audit(self._row(ticket, "step_finished", "ok", latency_ms=ms))
        return WriteDone(ticket.key, verdict, result)

    def settle_failed(self, ticket: Ticket, attempt: Attempt) -> WriteFailedError:
        """Mark the key ``failed`` and audit; the error to raise."""
        if attempt.kind == "answered":
            reason = f"provider answered {attempt.status}"
        else:
            reason = attempt.detail or attempt.kind
        self.ledger.fail(ticket.key, reason[:300], owner=self.owner)
        ms = int((self.clock() - ticket.started) * 1000)
        self.audit(self._row(ticket, "step_failed", "error", latency_ms=ms, reason=reason[:500]))
        return WriteFailedError(
            ticket.step, reason, sent=attempt.kind != "not_sent", attempt=attempt
        )

    def compensated(
        self, *, plan_id: str, original: int, op: str, actor: str, status: str, reason: str | None
    ) -> None:
        """Audit how undoing the write of step ``original`` went (``ok``, ``error``, ``unknown``)."""
        row = {
            "kind": "step_compensated",
            "status": status,
            "actor": actor,
            "plan_id": plan_id,
            "step": original,
            "op": op,
        }
        self.audit(row if reason is None else {**row, "reason": reason})

    @staticmethod
    def _row(ticket: Ticket, kind: str, status: str, **extra: Any) -> dict[str, Any]:
        return {
            "kind": kind,
            "status": status,
            "actor": ticket.actor,
            "plan_id": ticket.plan_id,
            "step": ticket.step,
            "op": ticket.op,
            **{k: v for k, v in extra.items() if v is not None},
        }
