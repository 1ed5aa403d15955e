"""PreviewOrchestrator: verify, keep only read-only previewable steps, run them, fingerprint.

Invariant §3.2 (preview never writes): a step runs in a preview only if (1) the plan gives it a
read role, (2) the registry marks its op ``previewable`` and ``read`` and it is not a gate, and
(3) the generated n8n workflow passes ``read_only_violations`` (node type and typeVersion, the
method parameter that version reads, bodies, options, expressions — checked on the JSON itself).
``plan_preview`` decides all of this for the whole set of preview steps BEFORE anything runs: one
bad step refuses the preview, naming every offending step, with zero calls to n8n. A read-role
step bound to a write op is refused, not skipped. The runner checks each workflow again before it
deploys it. Reads of one op that are ready together run as one n8n execution (a batch workflow:
the same op node behind a Split Out, ``build_batch_workflow``); ``plan_preview`` checks the batch
workflow of every op the preview may batch too. A bad signature is refused and audited before
anything reaches n8n.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from countersign.kernel import (
    CountersignError,
    Plan,
    PreviewWrapper,
    SignedPlan,
    StepRole,
)
from countersign.registry import Registry
from countersign.signer import KeyLookup, VerifiedPlan
from countersign.steps import (
    N8nStepRunner,
    PreviewRefusedError,
    StepRecorder,
    StepTransport,
    fingerprint,
    run_dag,
    verify_or_audit,
)
from countersign.workflowbuilder import (
    CredentialRef,
    StepWorkflow,
    build_batch_workflow,
    build_step_workflow,
    declared_query,
    read_only_violations,
)

__all__ = [
    "READ_ROLES",
    "PreviewResult",
    "plan_preview",
    "preview_steps",
    "run_preview",
]


#: Plan roles that only read (Resolver is a gate; Booker and Notifier write).
READ_ROLES: frozenset[StepRole] = frozenset({"Fetcher", "Analyzer", "Watcher"})


@dataclass(frozen=True)
class PreviewResult:
    """The wrapper plus what the execute-time staleness check needs."""

    wrapper: PreviewWrapper
    outputs: dict[int, Any] = field(default_factory=dict)
    fingerprints: dict[int, str] = field(default_factory=dict)


def preview_steps(plan: Plan, registry: Registry) -> list[int]:
    """The steps a preview may run: read-role steps on previewable read ops, no gates, and none
    that waits for a gate or a write (the cart read after the cart write is read when the execute
    stops at the gate after it, with what that write did in view)."""
    out: list[int] = []
    for s in plan.graph:  # topological order: a step's dependencies are decided before it
        op = registry.op(s.uses, s.call, step=s.step)
        if (
            s.role in READ_ROLES
            and op.previewable
            and op.safety == "read"
            and not op.gate
            and s.gate_id is None
            and all(d in out for d in s.after)
        ):
            out.append(s.step)
    return out


def plan_preview(
    plan: Plan,
    plan_hash: str,
    registry: Registry,
    *,
    only: set[int] | None = None,
    credentials: Mapping[str, CredentialRef] | None = None,
) -> dict[int, StepWorkflow]:
    """Decide the whole preview before anything runs: which steps run, each one's workflow,
    and that every one of them only reads. Pure.

    Args:
        only: restrict to these steps and what they depend on.

    Returns:
        step → the workflow it runs, for every step the preview will run.

    Raises:
        PreviewRefusedError: some step would write — a read-role step bound to a write op, or a
            workflow with a ``read_only_violations`` entry; ``problems`` names every such step.
        BindingError: a step does not bind.
    """
    chosen = _closure(plan, only) if only is not None else {s.step for s in plan.graph}
    problems: list[str] = []
    for s in plan.graph:
        if s.step not in chosen or s.gate_id is not None or s.role not in READ_ROLES:
            continue
        op = registry.op(s.uses, s.call, step=s.step)
        if op.safety != "read" and not op.gate:
            problems.append(
                f"step {s.step} ({s.uses}.{s.call}): the plan gives it the read role {s.role}, "
                f"but the registry binds it to a {op.safety} operation"
            )
    workflows: dict[int, StepWorkflow] = {}
    ops: dict[tuple[str, str], list[int]] = {}
    for n in preview_steps(plan, registry):
        if n not in chosen:
            continue
        s = plan.step(n)
        wf = build_step_workflow(plan, plan_hash, n, registry, credentials=credentials)
        # a safe method with a body (a CalDAV REPORT) passes only for an op that declares it
        query = declared_query(registry.op(s.uses, s.call, step=n))
        found = read_only_violations(wf.workflow, query=query)
        problems += [f"step {n} ({s.uses}.{s.call}): {p}" for p in found]
        workflows[n] = wf
        ops.setdefault((s.uses, s.call), []).append(n)
    if not problems:
        problems = _batch_problems(plan, registry, ops, credentials)
    if problems:
        raise PreviewRefusedError(
            f"preview of plan {plan.plan_id} refused before anything ran; expected only reads, "
            f"found: {'; '.join(problems)}",
            problems=problems,
        )
    return workflows


def _batch_problems(
    plan: Plan,
    registry: Registry,
    ops: Mapping[tuple[str, str], list[int]],
    credentials: Mapping[str, CredentialRef] | None,
) -> list[str]:
    """The read-only check of each batch workflow the runner may send two or more steps of one
    op through (its op node is the step workflow's, so only clean ops reach this check; a
    problem here is the batch's)."""
    problems: list[str] = []
    for (uses, call), same in sorted(ops.items()):
        if len(same) > 1:
            batch = build_batch_workflow(plan.step(same[0]), registry, credentials=credentials)
            query = declared_query(registry.op(uses, call))
            problems += [
                f"step {same[0]} ({uses}.{call}) batched with steps {same[1:]}: {p}"
                for p in read_only_violations(batch.workflow, query=query)
            ]
    return problems


async def run_preview(
    document: SignedPlan | Mapping[str, Any],
    *,
    keys: KeyLookup,
    registry: Registry,
    transport: StepTransport,
    recorder: StepRecorder,
    settings: Mapping[str, str],
    credentials: Mapping[str, CredentialRef] | None = None,
    actor: str,
    only: set[int] | None = None,
    now: datetime,
) -> PreviewResult:
    """Preview a signed plan: verify (``verify_or_audit``), decide every step first
    (``_decided``), run the reads (``_ran``), then the wrapper with its fingerprints.

    Args:
        document: the signed plan — the document as received (verified as written, Signer
            SPEC §2), or a ``SignedPlan`` (verified as its ``to_json()``).
        only: restrict to these steps (and what they depend on); the execute-time staleness check
            re-runs just the reads its writes depend on.

    Raises:
        SignatureError: refused and audited; nothing ran.
        PlanNotCurrentError: the registry changed since signing, or the plan expired (``now``,
            default the wall clock); refused and audited; nothing ran.
        PreviewRefusedError: a step it would run is not read-only (``plan_preview``); audited;
            nothing ran.
        StepFailedError: a read failed (the outputs so far are on the error).
    """
    verified = verify_or_audit(
        document, keys=keys, recorder=recorder, actor=actor, registry=registry, now=now
    )
    creds = credentials or {}
    steps = _decided(verified, registry, recorder, actor=actor, only=only, credentials=creds)
    runner = N8nStepRunner(
        plan=verified.plan,
        plan_hash=verified.plan_hash,
        registry=registry,
        transport=transport,
        settings=settings,
        credentials=creds,
        read_only=True,
        batch_reads=True,
    )
    outputs, ms = await _ran(verified, steps, runner, recorder, actor=actor)
    prints = {n: fingerprint(o) for n, o in outputs.items()}
    recorder.preview_done(
        verified, prints, actor=actor, latency_ms=ms, status="ok", reason=None, outputs=outputs
    )
    wrapper = PreviewWrapper(
        normalized={
            "plan_id": verified.plan.plan_id,
            "plan_hash": verified.plan_hash,
            "steps": {str(n): outputs[n] for n in sorted(outputs)},
            "fingerprints": {str(n): prints[n] for n in sorted(prints)},
        },
        can_execute=all(_ok(o) for o in outputs.values()),
    )
    return PreviewResult(wrapper=wrapper, outputs=outputs, fingerprints=prints)


def _decided(
    verified: VerifiedPlan,
    registry: Registry,
    recorder: StepRecorder,
    *,
    actor: str,
    only: set[int] | None,
    credentials: Mapping[str, CredentialRef],
) -> list[int]:
    """The steps the preview runs, in order (``plan_preview``); a refusal is recorded (audited,
    ``refused``) before it is raised."""
    try:
        return sorted(
            plan_preview(
                verified.plan, verified.plan_hash, registry, only=only, credentials=credentials
            )
        )
    except PreviewRefusedError as e:
        recorder.preview_done(
            verified, {}, actor=actor, latency_ms=0, status="refused", reason="; ".join(e.problems)
        )
        raise


async def _ran(
    verified: VerifiedPlan,
    steps: list[int],
    runner: N8nStepRunner,
    recorder: StepRecorder,
    *,
    actor: str,
) -> tuple[dict[int, Any], int]:
    """The reads' outputs (one scheduler, ``run_dag``) and how long they took (ms); a failed read
    is recorded (``error`` with its code) before it is raised."""
    t0 = time.perf_counter()
    try:
        outputs = await run_dag(verified.plan, steps, runner.run)
    except CountersignError as e:
        ms = int((time.perf_counter() - t0) * 1000)
        recorder.preview_done(
            verified, {}, actor=actor, latency_ms=ms, status="error", reason=e.code
        )
        raise
    return outputs, int((time.perf_counter() - t0) * 1000)


def _ok(output: Any) -> bool:
    status = output.get("status") if isinstance(output, Mapping) else None
    return status is None or (isinstance(status, int) and 200 <= status < 300)


def _closure(plan: Plan, roots: set[int]) -> set[int]:
    out: set[int] = set()
    stack = list(roots)
    while stack:
        n = stack.pop()
        if n not in out:
            out.add(n)
            stack.extend(plan.step(n).after)
    return out
