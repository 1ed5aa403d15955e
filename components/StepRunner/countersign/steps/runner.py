"""Run plan steps on n8n as their DAG allows: independent steps at the same time.

``run_dag`` is the scheduler (pure asyncio, no I/O of its own): a step starts as soon as every
step it depends on (within the chosen set) has finished; the first failure stops new starts, lets
running steps finish, and is raised with the outputs gathered so far. Deterministic for the same
order of completions (it runs inside a Temporal workflow, where a replay must decide alike): steps
that finish in one wake-up are handled in step order, so when several fail together the lowest
step's failure is the one raised. ``N8nStepRunner`` runs one
step: build its step workflow, deploy it once, render the data values, call the webhook, normalize
the output — except a pure ``system.analyze`` computation, which it runs in-process
(``steps.analyze``, StepRunner SPEC). A preview's runner (``batch_reads``) sends the reads of one op
that become ready in the same wake-up as ONE n8n execution (a batch workflow: n8n's HTTP Request
node sends its items' requests at once), since on a small machine n8n's per-execution work, not
the provider, is what a preview waits for (StepRunner LLD "Batched preview reads").
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Protocol

import httpx

from countersign.binding import normalize_output, render_data, resolve_refs, resolve_step
from countersign.kernel import CountersignError, Plan, PlanStep, system_clock
from countersign.n8n import N8nApiError, N8nUnavailableError
from countersign.registry import Registry
from countersign.workflowbuilder import (
    CredentialRef,
    StepWorkflow,
    build_batch_workflow,
    build_workflow_for_step,
    declared_query,
    read_only_violations,
)

from .analyze import run_in_process
from .http import asend, default_tls, http_call
from .sequence import Write
from .writes import Attempt

__all__ = [
    "N8nStepRunner",
    "PreparedStep",
    "PreviewRefusedError",
    "StepFailedError",
    "StepTransport",
    "run_dag",
]


class PreviewRefusedError(CountersignError):
    """A preview would run something that is not read-only (nothing was sent).

    ``problems`` lists every reason, each naming its step."""

    code = "preview_refused"

    def __init__(self, message: str, *, problems: Sequence[str] = ()) -> None:
        super().__init__(message)
        self.problems: list[str] = list(problems)


class StepFailedError(CountersignError):
    """A step could not run or its provider answered with an error."""

    code = "step_failed"

    def __init__(self, step: int, reason: str, *, outputs: Mapping[int, Any] | None = None) -> None:
        super().__init__(f"step {step} failed: {reason}")
        self.step = step
        self.reason = reason
        self.outputs: dict[int, Any] = dict(outputs or {})


class StepTransport(Protocol):
    """Where step workflows run (n8n in production and tests)."""

    async def deploy(self, workflow: StepWorkflow) -> None:
        """Make the step's webhook callable (create + activate once; idempotent)."""

    async def call(
        self, path: str, body: Mapping[str, Any], *, write: bool = False
    ) -> Mapping[str, Any]:
        """Call a step webhook; the node's output item. ``write``: never re-send once the
        request may have reached the runtime."""

    async def call_batch(self, path: str, body: Mapping[str, Any]) -> list[Mapping[str, Any]]:
        """Call a batch workflow's webhook (reads only); every output item, in input order."""


RunOne = Callable[[PlanStep, Mapping[int, Any]], Coroutine[Any, Any, Any]]


async def run_dag(
    plan: Plan,
    steps: Sequence[int],
    run_one: RunOne,
    *,
    outputs: Mapping[int, Any] | None = None,
) -> dict[int, Any]:
    """Run ``steps`` of ``plan`` respecting ``after``; return every step's output.

    Dependencies outside ``steps`` must already be in ``outputs`` (or are gates, whose result is
    the person's choice and not an output). The failure raised is that of the lowest-numbered step
    among those that failed in the earliest wake-up with a failure; later failures are dropped.
    """
    done: dict[int, Any] = dict(outputs or {})
    chosen = set(steps)
    pending = {n: plan.step(n) for n in steps}
    running: dict[asyncio.Task[Any], int] = {}
    failure: BaseException | None = None

    def ready(s: PlanStep) -> bool:
        return all(
            d in done or (d not in chosen and plan.step(d).gate_id is not None) for d in s.after
        )

    while pending or running:
        if failure is None:
            for n, s in sorted(pending.items()):
                if ready(s):
                    running[asyncio.create_task(run_one(s, dict(done)))] = n
                    del pending[n]
        if not running:
            if failure is not None:
                break
            raise StepFailedError(min(pending), "its dependencies can never complete", outputs=done)
        finished, _ = await asyncio.wait(running, return_when=asyncio.FIRST_COMPLETED)
        # Steps that finished in the same wake-up are handled in step order, never in set order:
        # a set of tasks iterates by object hash (a memory address), which differs between a
        # Temporal run and its replay — the first failure raised must be the same in both.
        for task in sorted(finished, key=running.__getitem__):
            n = running.pop(task)
            exc = task.exception()
            if exc is None:
                done[n] = task.result()
            elif failure is None:
                failure = exc
        if failure is not None:
            pending.clear()
    if failure is not None:
        if isinstance(failure, StepFailedError):
            failure.outputs = done
        raise failure
    return done


@dataclass(frozen=True)
class _Waiting:
    """A read waiting for its op's batch (``N8nStepRunner._batched``)."""

    step: PlanStep
    outputs: dict[int, Any]
    done: asyncio.Future[Any]


@dataclass(frozen=True)
class PreparedStep:
    """A step ready to send: its webhook path and the JSON body n8n gets."""

    step: PlanStep
    path: str
    body: dict[str, Any]
    args: dict[str, Any]


@dataclass
class N8nStepRunner:
    """Runs single steps of one signed plan on n8n."""

    plan: Plan
    plan_hash: str
    registry: Registry
    transport: StepTransport
    settings: Mapping[str, str]
    credentials: Mapping[str, CredentialRef] = field(default_factory=dict)
    choices: Mapping[str, Any] = field(default_factory=dict)
    #: A preview's runner: every workflow is checked with ``read_only_violations`` before it is
    #: deployed, so no path through this runner can put a writing node on n8n during a preview.
    read_only: bool = False
    #: run ``system.analyze`` reads in this process (``steps.analyze``: the same item n8n's Code
    #: node returns; falls back to n8n for inputs outside the mirror); False: always on n8n
    in_process: bool = True
    #: send the reads of one op that are ready together as one n8n execution (a preview's
    #: runner; ``read_only`` required: a batch workflow is checked like any other)
    batch_reads: bool = False
    #: when a step is rendered to be sent (an event's DTSTAMP: ``render_data``'s ``written_at``)
    clock: Callable[[], datetime] = system_clock
    _paths: dict[tuple[str, str], str] = field(default_factory=dict)
    _batch_paths: dict[tuple[str, str], str] = field(default_factory=dict, init=False)
    _waiting: dict[tuple[str, str], list[_Waiting]] = field(default_factory=dict, init=False)
    _flushes: set[asyncio.Task[None]] = field(default_factory=set, init=False)

    async def prepare(
        self, step: PlanStep, outputs: Mapping[int, Any], *, idempotency_key: str | None = None
    ) -> PreparedStep:
        """Everything before the send: the step workflow deployed, references resolved, data
        values rendered. Nothing of the step's own effect has happened yet."""
        path = self._paths.get((step.uses, step.call))
        if path is None:
            wf = build_workflow_for_step(
                self.plan, self.plan_hash, step, self.registry, credentials=self.credentials
            )
            await self._deploy_checked(wf, step)
            path = self._paths[(step.uses, step.call)] = wf.path
        args = resolve_refs(step.args, outputs, self.choices)
        node = resolve_step(step, self.registry)
        data = render_data(
            node, args, self.settings, idempotency_key=idempotency_key, written_at=self.clock()
        )
        body = {
            "data": data,
            "args": args,
            "plan": {"plan_id": self.plan.plan_id, "plan_hash": self.plan_hash, "step": step.step},
        }
        return PreparedStep(step=step, path=path, body=body, args=args)

    async def _deploy_checked(self, wf: StepWorkflow, step: PlanStep) -> None:
        if self.read_only:
            problems = [
                f"step {step.step} ({step.uses}.{step.call}): {p}"
                for p in read_only_violations(
                    wf.workflow, query=declared_query(self.registry.op(step.uses, step.call))
                )
            ]
            if problems:
                raise PreviewRefusedError(
                    f"preview of plan {self.plan.plan_id} refused before deploying step "
                    f"{step.step}: {'; '.join(problems)}",
                    problems=problems,
                )
        await self.transport.deploy(wf)

    async def send(self, prepared: PreparedStep, *, write: bool = False) -> Any:
        """Call the step's webhook once (a write: never re-sent once it may have reached n8n);
        the normalized output (a write's output includes the provider's HTTP status)."""
        item = await self.transport.call(prepared.path, prepared.body, write=write)
        op = self.registry.op(prepared.step.uses, prepared.step.call)
        return normalize_output(op.output, item, prepared.args)

    async def prepare_write(self, write: Write, key: str) -> PreparedStep:
        """``prepare`` for the write sequence (``steps.sequence``, this runner is its n8n
        ``WriteRuntime``): the references resolved from the outputs the write's args came from."""
        return await self.prepare(write.step, write.outputs, idempotency_key=key)

    async def send_write(self, prepared: PreparedStep) -> Attempt:
        """Send a write once and report what happened for the write protocol to classify: a
        request that provably never reached n8n is ``not_sent``; a timeout, dropped connection or
        n8n 5xx after it may have run is ``lost``; otherwise the provider's answer."""
        try:
            item = await self.transport.call(prepared.path, prepared.body, write=True)
        except N8nUnavailableError as e:
            return Attempt.lost(e.message) if e.sent else Attempt.not_sent(e.message)
        except N8nApiError as e:
            if e.status == 404:  # the webhook was never registered: nothing ran
                return Attempt.not_sent(f"n8n answered 404 for the step webhook: {e.body[:200]}")
            return Attempt.lost(f"n8n answered {e.status}")
        try:
            op = self.registry.op(prepared.step.uses, prepared.step.call)
            out = normalize_output(op.output, item, prepared.args)
        except CountersignError as e:  # the answer arrived but could not be read
            return Attempt.lost(f"unreadable answer: {e.message}")
        # the provider's HTTP status from the node's full response (a JSON output is the body
        # alone, so a 409 would otherwise read as a success); other nodes have none
        status = item.get("statusCode") if isinstance(item, Mapping) else None
        if not isinstance(status, int) and isinstance(out, Mapping):
            status = out.get("status")
        # the provider's headers (Retry-After) when the node passed the full response on
        raw = item.get("headers") if isinstance(item, Mapping) else None
        headers = {str(k): str(v) for k, v in raw.items()} if isinstance(raw, Mapping) else {}
        code = status if isinstance(status, int) else None
        return Attempt("answered", status=code, output=out, headers=headers)

    async def read_direct(
        self, client: httpx.AsyncClient, step: PlanStep, outputs: Mapping[int, Any]
    ) -> Any:
        """One read step's normalized output, read directly: a plain HTTP Request binding (no
        credential) is sent by this process with the bytes n8n would send (``steps.http``) and its
        answer normalized as n8n's would be; a pure computation runs in-process; any other read
        runs on n8n (``run``). Used by the execute-time staleness re-check (ExecuteOrchestrator
        SPEC, Executor step 4), never by a preview.

        Raises:
            StepFailedError: the op is not a read, or the request could not be completed.
        """
        op = self.registry.op(step.uses, step.call)
        if op.safety != "read" or op.gate:
            raise StepFailedError(step.step, f"{step.uses}.{step.call} is not a read")
        node = resolve_step(step, self.registry)
        if node.node_type != "n8n-nodes-base.httpRequest" or node.credential is not None:
            return await self.run(step, outputs)
        args = resolve_refs(step.args, outputs, self.choices)
        req = http_call(node, render_data(node, args, self.settings))
        try:
            r = await asend(client, req)
        except httpx.HTTPError as e:
            raise StepFailedError(
                step.step, f"direct read of {step.uses}.{step.call} failed: {type(e).__name__}"
            ) from e
        return normalize_output(op.output, {"statusCode": r.status_code, "body": r.text}, args)

    async def read_fresh(
        self, steps: Sequence[int], *, outputs: Mapping[int, Any] | None = None
    ) -> dict[int, Any]:
        """Read ``steps`` again, directly (``read_direct``), each as soon as its inputs are ready,
        over one connection pool; every step's output (``run_dag``)."""
        async with httpx.AsyncClient(verify=default_tls(), timeout=30.0) as client:

            async def one(step: PlanStep, known: Mapping[int, Any]) -> Any:
                return await self.read_direct(client, step, known)

            return await run_dag(self.plan, steps, one, outputs=outputs)

    async def run(
        self, step: PlanStep, outputs: Mapping[int, Any], *, idempotency_key: str | None = None
    ) -> Any:
        """Run one read step (prepare, then send); its normalized output. A pure computation
        (``system.analyze``) runs in this process when it can (``steps.analyze``)."""
        if self.in_process:
            op = self.registry.op(step.uses, step.call)
            if op.safety == "read" and not op.gate:
                args = resolve_refs(step.args, outputs, self.choices)
                item = run_in_process(op, step.uses, step.call, args)
                if item is not None:
                    return normalize_output(op.output, item, args)
        if self.batch_reads and self.read_only and idempotency_key is None:
            return await self._batched(step, outputs)
        return await self.send(await self.prepare(step, outputs, idempotency_key=idempotency_key))

    async def _batched(self, step: PlanStep, outputs: Mapping[int, Any]) -> Any:
        """Join the reads of this op that start in the same wake-up of the event loop.

        ``run_dag`` creates the tasks of every step that became ready in one go; each reaches
        this point before any of them awaits, so the flush scheduled by the first one (``call_soon``
        runs after the tasks already queued) sees them all. One waiting read is sent as usual."""
        key = (step.uses, step.call)
        waiting = self._waiting.get(key)
        if waiting is None:
            waiting = self._waiting[key] = []
            asyncio.get_running_loop().call_soon(self._start_flush, key)
        done: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        waiting.append(_Waiting(step, dict(outputs), done))
        return await done

    def _start_flush(self, key: tuple[str, str]) -> None:
        task = asyncio.get_running_loop().create_task(self._flush(key))
        self._flushes.add(task)  # a strong reference until it ends
        task.add_done_callback(self._flushes.discard)

    async def _flush(self, key: tuple[str, str]) -> None:
        group = self._waiting.pop(key)
        try:
            if len(group) == 1:
                w = group[0]
                out = [await self.send(await self.prepare(w.step, w.outputs))]
            else:
                out = await self._send_batch(group)
        except asyncio.CancelledError:
            for w in group:
                w.done.cancel()
            raise
        except Exception as e:  # every waiting step gets the failure
            for w in group:
                if not w.done.done():
                    w.done.set_exception(e)
            return
        for w, o in zip(group, out, strict=True):
            if not w.done.done():
                w.done.set_result(o)

    async def _send_batch(self, group: Sequence[_Waiting]) -> list[Any]:
        first = group[0].step
        key = (first.uses, first.call)
        path = self._batch_paths.get(key)
        if path is None:
            wf = build_batch_workflow(first, self.registry, credentials=self.credentials)
            await self._deploy_checked(wf, first)
            path = self._batch_paths[key] = wf.path
        node = resolve_step(first, self.registry)
        items: list[dict[str, Any]] = []
        args_of: list[dict[str, Any]] = []
        for w in group:
            args = resolve_refs(w.step.args, w.outputs, self.choices)
            args_of.append(args)
            items.append({"data": render_data(node, args, self.settings), "args": args})
        body = {
            "items": items,
            "plan": {
                "plan_id": self.plan.plan_id,
                "plan_hash": self.plan_hash,
                "steps": [w.step.step for w in group],
            },
        }
        answer = await self.transport.call_batch(path, body)
        if len(answer) != len(group):
            raise StepFailedError(
                first.step,
                f"the batch of {first.uses}.{first.call} for steps "
                f"{[w.step.step for w in group]} answered {len(answer)} items, "
                f"expected {len(group)}",
            )
        op = self.registry.op(first.uses, first.call)
        return [
            normalize_output(op.output, item, a) for item, a in zip(answer, args_of, strict=True)
        ]
