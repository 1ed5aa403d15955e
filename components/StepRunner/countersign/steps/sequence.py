"""The write-and-undo sequence: how every runtime sends one write of a plan, and how it undoes the
writes done (StepRunner SPEC "Write protocol" and "Compensation"). Interactive execution (n8n,
``N8nStepRunner``) and durable execution (a Temporal activity, ``DirectSender``) both call these
two functions; a runtime supplies only how a request is built and sent (``WriteRuntime``).

    write_once:
      claim ──► Replay ───────────────────────────────────────────► mark done ──► Replay
        │
        └► mark running ─► prepare ──✗──► abandon ─► mark failed ─► WriteFailedError (not sent)
                              │
                              └► sending ─► send once ─► settle ─┬► mark done ─► WriteDone
                                                                 ├► mark failed ─► WriteFailedError
                                                                 └► OutcomeUnknownError (stays
                                                                    running until reconciled)

    undo_writes: for each compensation of the writes done, newest first —
      write_once(compensation) ─► audit step_compensated ok | error | unknown
        ok ─► mark the original step compensated
      one undo failing, its claim included, never skips the next one.

A claim that raises (an earlier send under the key is ``unknown``, another holder is sending it)
raises out of ``write_once``; ``undo_writes`` audits it ``unknown`` and goes on. The plan step's
status (``mark``) follows its key: ``running`` once claimed, ``done`` with its output, ``failed``
when the ledger says ``failed`` (a runtime that sends again claims again: ``running``), and
``compensated`` once undone. What a failure means for the run (stop and compensate, let Temporal
retry, wait for a person) is the runtime's decision, taken on the error raised here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, TypeVar

from countersign.kernel import CountersignError, Plan, PlanStep
from countersign.registry import Registry

from .compensation import compensation_steps, original_of
from .writes import Attempt, Replay, WriteDone, WriteFailedError, WriteProtocol, natural_key

__all__ = [
    "StepMarks",
    "UndoStatus",
    "Write",
    "WriteRuntime",
    "no_marks",
    "step_output",
    "undo_writes",
    "write_once",
]

P = TypeVar("P")
#: records a plan step's status (and output) where the runtime keeps them (``PlanStore.set_step``)
StepMarks = Callable[[int, str, Any], None]
UndoStatus = Literal["ok", "error", "unknown"]


def no_marks(step: int, status: str, output: Any) -> None:
    """Record nothing (a compensation is not a step of the signed graph)."""


@dataclass(frozen=True)
class Write:
    """One write to send: its plan step, its arguments (their hash is in the idempotency key)
    and the outputs they were resolved from (a runtime that resolves references itself reads
    them)."""

    plan_id: str
    step: PlanStep
    args: Mapping[str, Any]
    #: the op's idempotency is the provider's natural key (a 409/412 then means "already done")
    natural_key: bool = False
    outputs: Mapping[int, Any] = field(default_factory=dict)

    @classmethod
    def of(
        cls,
        plan_id: str,
        step: PlanStep,
        args: Mapping[str, Any],
        registry: Registry,
        outputs: Mapping[int, Any] | None = None,
    ) -> Write:
        """The write of ``step`` with its resolved ``args`` (natural key from the registry)."""
        natural = natural_key(registry.op(step.uses, step.call))
        return cls(plan_id, step, dict(args), natural, dict(outputs or {}))

    @property
    def op(self) -> str:
        """``connector.call`` (the audit rows' ``op``)."""
        return f"{self.step.uses}.{self.step.call}"


class WriteRuntime(Protocol[P]):
    """How one runtime builds and sends a write. ``prepare_write`` may raise a
    ``CountersignError`` (nothing was sent: the key is abandoned, ``failed``); ``send_write`` sends
    once and reports what happened as an ``Attempt``, never raising (StepRunner LLD)."""

    async def prepare_write(self, write: Write, key: str) -> P:
        """Everything before the send (the request built, carrying ``key``)."""
        ...

    async def send_write(self, prepared: P) -> Attempt:
        """Send once; what happened."""
        ...


def step_output(result: Any) -> Any:
    """What a plan step shows of a ledger result (``{"output", "status", …}``, or what a person
    recorded when settling an ``unknown`` key)."""
    if isinstance(result, Mapping) and "output" in result:
        return result["output"]
    return result


async def write_once(
    writes: WriteProtocol,
    runtime: WriteRuntime[P],
    write: Write,
    *,
    actor: str,
    mark: StepMarks = no_marks,
) -> WriteDone | Replay:
    """Send ``write`` at most once (module docstring); ``Replay`` when its key completed before.

    Raises:
        WriteFailedError: refused, or never sent (``sent=False``; a request that could not be
            built is raised from the error that stopped it).
        OutcomeUnknownError: it may have happened (or an earlier send under the key did).
        InProgressError / IdempotencyMismatchError: from the claim.
    """
    n = write.step.step
    ticket = writes.claim(
        plan_id=write.plan_id,
        step=n,
        op=write.op,
        args=write.args,
        actor=actor,
        natural_key=write.natural_key,
    )
    if isinstance(ticket, Replay):
        mark(n, "done", step_output(ticket.result))
        return ticket
    mark(n, "running", None)
    try:
        prepared = await runtime.prepare_write(write, ticket.key)
    except CountersignError as e:
        failed = writes.abandon(ticket, e.message)
        mark(n, "failed", None)
        raise failed from e
    writes.sending(ticket)
    attempt = await runtime.send_write(prepared)
    try:
        done = writes.settle(ticket, attempt)
    except WriteFailedError:
        mark(n, "failed", None)
        raise
    mark(n, "done", step_output(done.result))
    return done


async def undo_writes(
    writes: WriteProtocol,
    runtime: WriteRuntime[P],
    plan: Plan,
    registry: Registry,
    done: Sequence[tuple[PlanStep, Mapping[str, Any], Any]],
    *,
    actor: str,
    mark: StepMarks = no_marks,
) -> list[int]:
    """Undo ``done`` writes (step, resolved args, ledger result) with the registry's
    compensations, newest first, each through ``write_once``; every one is audited
    ``step_compensated`` (``ok``, ``error`` or ``unknown``, with the error's code). The original
    steps undone, in the order they were undone."""
    undone: list[int] = []
    for comp in compensation_steps(plan, registry, done):
        original = original_of(comp.step)
        status, reason = await _undo_one(
            writes, runtime, Write(plan.plan_id, comp, comp.args), actor
        )
        writes.compensated(
            plan_id=plan.plan_id,
            original=original,
            op=f"{comp.uses}.{comp.call}",
            actor=actor,
            status=status,
            reason=reason,
        )
        if status == "ok":
            mark(original, "compensated", None)
            undone.append(original)
    return undone


async def _undo_one(
    writes: WriteProtocol, runtime: WriteRuntime[P], write: Write, actor: str
) -> tuple[UndoStatus, str | None]:
    """How one compensation went: ``error`` when its key is ``failed`` (the reason: the code of
    what stopped the request, or ``write_failed``), ``unknown`` for anything else raised (its
    outcome, or an earlier one under its key, is unknown; another holder is sending it)."""
    try:
        await write_once(writes, runtime, write, actor=actor)
    except WriteFailedError as e:
        cause = e.__cause__
        return "error", cause.code if isinstance(cause, CountersignError) else e.code
    except CountersignError as e:
        return "unknown", e.code
    return "ok", None
