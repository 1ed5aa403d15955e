"""The staleness re-check's cheap path (ExecuteOrchestrator SPEC 4; issue 28 §1): a read that
asked its provider for a window (a CalDAV ``calendar-query``, ``fn: caldav_query``) recorded, in
its output and so in its fingerprint, the version of every object the window held
(``versions``: href → etag). Before the writes, one etag-only query of the same window per such
read asks whether that is still so:

- the same objects at the same versions → nothing in the window changed: the preview's output
  stands as the fresh read (one request, no calendar data, no parsing);
- anything else — an object added to, removed from, moved into or edited inside the window, an
  error, an answer that is not a multistatus → the read is read again in full and compared as
  before (``stale_changes``), so a change inside the window is never missed.

A change outside the window changes no object the window holds: the check passes without
re-reading (and would pass after one: the busy time in the window is the same).
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import Any

import httpx

from countersign.binding import resolve_refs, resolve_step
from countersign.binding.caldav import CALDAV_QUERY, caldav_query, read_multistatus
from countersign.binding.render import render_data
from countersign.kernel import CountersignError, Plan
from countersign.steps import N8nStepRunner
from countersign.steps.http import HttpCall, asend, default_tls, http_call

__all__ = ["unchanged_reads"]


def _revalidation(
    runner: N8nStepRunner, plan: Plan, n: int, before: Any, outputs: Mapping[int, Any]
) -> HttpCall | None:
    """The etag-only query of read ``n``'s window, or None when the read has no such check (no
    window query, no recorded versions, a request that cannot be built: it is read again)."""
    if not isinstance(before, Mapping) or not isinstance(before.get("versions"), Mapping):
        return None
    step = plan.step(n)
    try:
        node = resolve_step(step, runner.registry)
        body = node.data.get("body")
        if node.safety != "read" or body is None or body.fn != CALDAV_QUERY:
            return None
        args = resolve_refs(step.args, outputs, runner.choices)
        req = http_call(node, render_data(node, args, runner.settings))
        window = {k: args.get(src) for k, src in body.fn_args.items()}
        query = caldav_query(window.get("time_min"), window.get("time_max"), data=False)
    except CountersignError:
        return None
    return replace(req, content=query)


async def _same(client: httpx.AsyncClient, req: HttpCall, versions: Mapping[str, Any]) -> bool:
    """Whether the window holds exactly ``versions`` now (any doubt: False)."""
    try:
        r = await asend(client, req)
        if r.status_code != 207:
            return False
        _, now = read_multistatus(r.text, data=False)
    except (httpx.HTTPError, CountersignError):
        return False
    return now == dict(versions)


async def unchanged_reads(
    runner: N8nStepRunner,
    plan: Plan,
    reads: Sequence[int],
    before: Mapping[int, Any],
    outputs: Mapping[int, Any],
    *,
    client: httpx.AsyncClient | None = None,
) -> dict[int, Any]:
    """The reads among ``reads`` whose window is unchanged since ``before`` (the preview's
    outputs), each with its preview output; one etag-only query per such read, all at once.
    ``outputs``: what the reads' arguments may refer to (done steps)."""
    checks = {
        n: req
        for n in reads
        if (req := _revalidation(runner, plan, n, before.get(n), outputs)) is not None
    }
    if not checks:
        return {}
    if client is None:
        # the process's one TLS context: a client built without one costs ~45 ms of CPU (it
        # loads the CA bundle), measured as most of the re-check's time on every approval
        async with httpx.AsyncClient(verify=default_tls(), timeout=30.0) as own:
            return await unchanged_reads(runner, plan, reads, before, outputs, client=own)
    same = await asyncio.gather(
        *(_same(client, req, before[n]["versions"]) for n, req in checks.items())
    )
    return {n: before[n] for n, ok in zip(checks, same, strict=True) if ok}
