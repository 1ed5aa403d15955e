"""What follows a failed step (ExecuteOrchestrator SPEC 5a, issue 26 §3): the failure's class
(``steps.failures``, from the connector's real answer) looked up in the policy's failure table
(``kernel.rules.FailureActions``).

- ``retry``: the same write sent again, under the same idempotency key, after a capped backoff
  (or the provider's ``Retry-After``) — only while the ledger says ``failed`` (refused, or never
  sent). A write whose outcome is ``unknown`` is never sent again, whatever the table says (at
  most once); retries used up, or a provider asking for longer than the table allows, become
  ``ask``.
- ``replan``, ``compensate``, ``ask``: what was written is undone (``GateWriter.failed``), and the
  class and the action are on the plan's event stream (``step_failure``) and the report; the Api
  makes the new revision for ``replan`` (a new plan, a new approval).

Reads are sent again the same way (``Recovery.again``: the staleness re-check), any class the
table retries: a read changes nothing. Every retry is audited (``step_retry``: class, attempt,
wait) before its wait.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from countersign.kernel.rules import FailureAction, FailureActions
from countersign.steps import StepFailedError, StepMarks, Write, write_once
from countersign.steps.failures import Failure, classify_error
from countersign.steps.sequence import WriteRuntime
from countersign.steps.writes import Replay, WriteDone, WriteFailedError, WriteProtocol

from .checks import Audit

__all__ = ["Recovery", "action_after"]

Sleep = Callable[[float], Awaitable[None]]
T = TypeVar("T")


def action_after(table: FailureActions, failure: Failure) -> FailureAction:
    """The action the person sees for a failure that ended the step: the table's, except that a
    ``retry`` that did not go on (retries used up, not resendable, a wait too long: ``Recovery``
    retries whatever it may) is ``ask``."""
    then = table.action(failure.cls).then
    return "ask" if then == "retry" else then


@dataclass(frozen=True)
class Recovery:
    """Sends a write, again while the table says ``retry`` and the ledger allows it."""

    table: FailureActions
    audit: Audit
    sleep: Sleep = field(default=asyncio.sleep)

    async def write(
        self,
        writes: WriteProtocol,
        runtime: WriteRuntime[Any],
        write: Write,
        *,
        actor: str,
        mark: StepMarks,
    ) -> WriteDone | Replay:
        """``write_once``, sent again on a failure the table retries (module docstring).

        Raises:
            WriteFailedError: the last send failed and is not retried (its ``failure`` and
                ``sends`` set for the report).
            OutcomeUnknownError: from ``write_once`` (never retried).
        """
        sent = 1
        while True:
            try:
                return await write_once(writes, runtime, write, actor=actor, mark=mark)
            except WriteFailedError as e:
                failure = classify_error(e)
                on = self.table.action(failure.cls) if failure is not None else None
                wait = (
                    on.wait_s(sent, failure.retry_after_s)
                    if on is not None and failure is not None and failure.resendable
                    else None
                )
                if wait is None or failure is None:
                    e.sends = sent
                    raise
                self._retrying(failure, wait, sent, plan_id=write.plan_id, actor=actor, op=write.op)
                await self.sleep(wait)
                sent += 1

    async def again(self, read: Callable[[], Awaitable[T]], *, plan_id: str, actor: str) -> T:
        """``read()``, called again while it fails with a class the table retries (a read has no
        idempotency key to protect: nothing was written).

        Raises:
            StepFailedError: the last failure, when the table does not retry it (or no more).
        """
        sent = 1
        while True:
            try:
                return await read()
            except StepFailedError as e:
                failure = classify_error(e)
                if failure is None:
                    raise
                wait = self.table.action(failure.cls).wait_s(sent, failure.retry_after_s)
                if wait is None:
                    raise
                self._retrying(failure, wait, sent, plan_id=plan_id, actor=actor)
                await self.sleep(wait)
                sent += 1

    def _retrying(
        self, failure: Failure, wait: float, sent: int, *, plan_id: str, actor: str, op: str = ""
    ) -> None:
        self.audit(
            kind="step_retry",
            status="retrying",
            actor=actor,
            plan_id=plan_id,
            step=failure.step,
            op=op or None,
            reason=failure.reason[:500],
            retries=sent,
            details={**failure.to_json(), "action": "retry", "wait_s": round(wait, 3)},
        )
