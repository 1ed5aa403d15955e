"""The checks an execute makes of the person's tokens before anything of a gate is spent or
written (ExecuteOrchestrator LLD 1a and 2): each gate in view, each choice one the gate offered,
then every token redeemed. Each refusal is audited (``execute_refused``) before it is raised."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from countersign.approvals import Approvals
from countersign.kernel import Plan
from countersign.registry import Registry
from countersign.signer import VerifiedPlan
from countersign.steps import ChoiceError, check_choice, gate_offer, gate_scopes

from .core import WriteSpec, writes_before_gate
from .state import ExecuteRefusedError, Progress, gate_order

__all__ = ["Audit", "GateChecks"]

#: appends one audit row (the Executor's ``_audit``: keyword fields of the row)
Audit = Callable[..., None]


@dataclass(frozen=True)
class GateChecks:
    """The token and choice checks of one execute, against ``registry``."""

    registry: Registry
    approvals: Approvals
    audit: Audit

    def refused(self, plan: Plan, user_id: str, gate: str, reason: str, **details: Any) -> None:
        """Audit an execute refused at ``gate`` before anything of it ran."""
        self.audit(
            kind="execute_refused",
            status="refused",
            actor=user_id,
            plan_id=plan.plan_id,
            op=gate,
            reason=reason,
            details=details,
        )

    def prove(
        self,
        verified: VerifiedPlan,
        specs: list[WriteSpec],
        user_id: str,
        tokens: Mapping[str, str],
    ) -> dict[str, Any]:
        """Redeem every token given (all before anything runs: one bad token and nothing is
        written), each bound to the scopes of the writes its gate guards
        (``steps.gate_scopes``); the person's choice per approved gate."""
        plan = verified.plan
        choices: dict[str, Any] = {}
        for gate in gate_order(plan, specs):
            token = tokens.get(gate)
            if token is None:
                continue
            redeemed = self.approvals.redeem(
                token,
                plan_id=plan.plan_id,
                plan_hash=verified.plan_hash,
                gate_id=gate,
                user_id=user_id,
                required_scopes=gate_scopes(plan, self.registry, gate),
            )
            choices[gate] = redeemed.choice
        return choices

    def in_view(
        self, plan: Plan, tokens: Mapping[str, str], progress: Progress, user_id: str
    ) -> None:
        """A gate whose step depends on an earlier gate's writes is approved only after those
        writes ran (GLOBAL_SPEC §13 inv. 4b): a token for it given before then is refused before
        any token is spent or anything runs (audited)."""
        for g in sorted(tokens):
            pending = [
                w
                for w in writes_before_gate(plan, self.registry, g)
                if progress.get(w, ("pending", None))[0] != "done"
            ]
            if not pending:
                continue
            self.refused(plan, user_id, g, "gate_not_in_view", pending_writes=pending)
            raise ExecuteRefusedError(
                f"plan {plan.plan_id}: {g} guards what steps {pending} write, and they have not "
                f"run yet; execute the earlier gate first, then approve {g} with its review in view"
            )

    def choices_before_spending(
        self,
        plan: Plan,
        offered: Mapping[str, tuple[bool, Any]],
        preview_out: Mapping[int, Any],
        progress: Progress,
        user_id: str,
    ) -> None:
        """Each token's choice (``offered``: ``Approvals.offered_choice`` per gate, read with the
        plan) is checked against what was offered before any token is spent, so a refused
        choice leaves every token and every gate's decision as it was."""
        seen = {
            **preview_out,
            **{n: out for n, (st, out) in progress.items() if st == "done" and out is not None},
        }
        for g in sorted(offered):
            found, choice = offered[g]
            if found:
                self.checked_choice(plan, g, seen, choice, user_id, now=None)

    def checked_choice(
        self,
        plan: Plan,
        gate: str,
        seen: Mapping[int, Any],
        choice: Any,
        user_id: str,
        *,
        now: datetime | None,
    ) -> Any:
        """The canonical choice if ``gate`` offers it given ``seen`` (GLOBAL_SPEC §8, the choice
        at a gate); ``ChoiceError`` (audited, nothing written) otherwise."""
        try:
            return check_choice(gate_offer(plan, self.registry, gate, seen), choice, now=now)
        except ChoiceError as e:
            self.refused(plan, user_id, gate, e.code, field=e.field)
            raise
