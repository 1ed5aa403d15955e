"""Redeeming an approval where its token arrives, before the running workflow is told.

A gate token never enters a workflow's history (DurableOrchestrator SPEC, gates): the edge that
receives it (the API's approve, ``countersign approve``) spends it here — bound to the plan hash,
the gate, the person and the scopes of the writes the gate guards, single use, short-lived, each
refusal audited by ``Approvals`` — and sends the workflow ``ApproveGate(approval=<the token's
sha256>)``, which the ``confirm_gate`` activity checks against the ledger (``Approvals.redeemed``).
"""

from __future__ import annotations

from countersign.approvals import Approvals, token_hash
from countersign.kernel import Plan
from countersign.registry import Registry
from countersign.steps import gate_scopes

from .models import ApproveGate

__all__ = ["approval_for"]


def approval_for(
    approvals: Approvals,
    token: str,
    *,
    plan: Plan,
    plan_hash: str,
    gate_id: str,
    user_id: str,
    registry: Registry,
) -> ApproveGate:
    """Spend ``token`` on this plan's gate (the scopes of the writes it guards, as the workflow's
    own redemption asked) and the update that tells the run: the spent token's hash.

    Raises:
        ApprovalError: the token does not redeem (unknown, another plan, gate or person, spent,
            expired, missing a scope, the gate rejected); audited, nothing is sent.
    """
    approvals.redeem(
        token,
        plan_id=plan.plan_id,
        plan_hash=plan_hash,
        gate_id=gate_id,
        user_id=user_id,
        required_scopes=gate_scopes(plan, registry, gate_id),
    )
    return ApproveGate(gate_id=gate_id, approval=token_hash(token))
