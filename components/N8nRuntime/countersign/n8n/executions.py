"""What n8n recorded about a write whose answer was lost: finding the execution that carried an
idempotency key, and reading its op node (N8nRuntime SPEC "Execution records"; GLOBAL_SPEC §8,
``unknown``). ExecuteOrchestrator's reconciliation (its SPEC 9) settles the ledger from what this
finds; this module reads n8n only, through ``ExecutionSource`` (``N8nClient`` is one).

A write's step workflow is shared by every plan that uses the op, so it has many executions. The
one that carried a key is found by what was recorded when the write was sent: it started after the
ledger's ``sent_at``, and its trigger body carries the plan id, the step and the arguments whose
hash ends the key. n8n's public API is paged back to the send (``startedAfter`` + ``cursor``),
first over a narrow window around the send, then up to now — never a fixed number of newest ones.

Not finding it proves nothing by itself: n8n prunes executions (EXECUTIONS_DATA_MAX_AGE, count)
and anyone may delete one. ``absent`` — the request never ran — is said only when n8n's records
provably cover the send:

1. the send is past the settle delay and younger than n8n's prune age;
2. a *lower witness* L is held: the newest execution that started before the send;
3. an *upper witness* U is held: an execution created after the last moment the request could
   have reached n8n (the key went ``unknown`` + settle delay) — so the key's execution, if any,
   has an id between them (n8n gives execution ids in creation order);
4. every id between L and U is listed: a pruned or deleted execution, a running one (the list
   hides them) or one not saved leaves a gap;
5. each of them that belongs to the op workflow was read and carries another key.

Anything else is ``unknown``, which a person settles. Clocks: ``skew`` bounds the difference
between n8n's clock and the ledger's. Reads save no execution (WorkflowBuilder SPEC "What n8n
keeps"), so their ids are gaps too: ``absent`` is proven only while no read ran between the
witnesses; otherwise the answer is ``unknown`` and the reconciler asks the provider.

A write whose provider can be asked saves no progress (WorkflowBuilder SPEC "What n8n keeps"):
n8n writes its record when it creates the execution — the webhook's body in
``executionData.nodeExecutionStack`` — and again at its end. An n8n killed between leaves, after
its restart's recovery, a ``crashed`` record whose ``runData`` was rebuilt from n8n's event log
with placeholder items: the key is found by the stored body (``trigger_body``) and the op's node
reads ``unknown`` (never ``failed``), for the provider to settle. No record at all means the
request never reached n8n's execution (n8n creates it before any node runs).

A record a forget redacted (``keeping``) still carries its key: the hash of the args as they were
is kept in the trigger body (``countersign_redacted.arg_hash``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, Literal, Protocol

from countersign.kernel import ascii_digits, content_hash

__all__ = [
    "ExecutionSource",
    "KeyRef",
    "Lookup",
    "NodeReading",
    "RecordScan",
    "find_execution",
    "read_node",
    "trigger_body",
]

#: the step workflow's trigger node (WorkflowBuilder names it)
_TRIGGER = "Trigger"
#: statuses whose record holds the whole run (a crash or a cancel may lose what a node did)
_ENDED_WHOLE = frozenset({"success", "error"})
#: the item n8n's crash recovery puts in a node's run when its event log says the node finished
#: but the execution's record never got the node's output (n8n 2.41.1 ``ARTIFICIAL_TASK_DATA``)
_RECOVERED = "isArtificialRecoveredEventItem"


class ExecutionSource(Protocol):
    """The part of ``N8nClient`` the search reads."""

    async def list_workflows(
        self, *, name: str | None = None, active: bool | None = None
    ) -> list[dict[str, Any]]: ...

    async def executions_page(
        self,
        *,
        cursor: str | None = None,
        workflow_id: str | None = None,
        status: str | None = None,
        started_after: datetime | None = None,
        started_before: datetime | None = None,
        include_data: bool = False,
        limit: int = 250,
    ) -> tuple[list[dict[str, Any]], str | None]: ...

    async def get_execution(
        self, execution_id: str | int, *, include_data: bool = True
    ) -> dict[str, Any]: ...


@dataclass(frozen=True)
class RecordScan:
    """How the search reads n8n (production defaults; tests on one machine may set ``skew=0``)."""

    #: n8n's clock may differ from the ledger's by this much
    skew: timedelta = timedelta(seconds=5)
    #: a request still unanswered this long after the key went ``unknown`` never reached n8n
    settle: timedelta = timedelta(seconds=30)
    #: n8n deletes executions older than this (N8nRuntime sets EXECUTIONS_DATA_MAX_AGE=168)
    prune_age: timedelta = timedelta(hours=168)
    #: the first, narrow window reaches this far past the moment the key went ``unknown`` (a
    #: request reaches n8n before its sender gives up; the full window follows on a miss)
    lead: timedelta = timedelta(seconds=5)
    #: pages of 250 read at most per listing; beyond it the answer is ``unknown``
    max_pages: int = 400
    page_size: int = 250


@dataclass(frozen=True)
class KeyRef:
    """An idempotency key ``plan_id:step:arg_hash`` and the send it records."""

    plan_id: str
    step: int
    arg_hash: str
    #: when the request left (the ledger's ``sent_at``; its claim time if that is missing)
    sent_at: datetime
    #: the last moment the sender waited for the answer (the key went ``unknown``)
    last_wait: datetime

    def carried_by(self, execution: Mapping[str, Any]) -> bool | None:
        """Whether the execution's trigger body is this key's request; ``None`` when the record
        holds no readable trigger body (not saved, too large, redacted, still running)."""
        body = trigger_body(execution)
        if body is None:
            return None
        plan = body.get("plan")
        args = body.get("args")
        return (
            isinstance(plan, dict)
            and plan.get("plan_id") == self.plan_id
            and plan.get("step") == self.step
            and isinstance(args, dict)
            and _arg_hash(body, args) == self.arg_hash
        )


@dataclass(frozen=True)
class Lookup:
    """The answer: the execution that carried the key, proof there is none, or neither."""

    kind: Literal["found", "absent", "unknown"]
    reason: str
    execution: Mapping[str, Any] | None = None


@dataclass(frozen=True)
class NodeReading:
    """What the found execution says about the op's node."""

    kind: Literal["answered", "failed", "unknown"]
    reason: str
    item: dict[str, Any] | None = None
    args: dict[str, Any] = field(default_factory=dict)


def read_node(execution: Mapping[str, Any], node_name: str) -> NodeReading:
    """The op node's answer in a found execution. ``failed`` only when the record is whole and
    the node never started (the run stopped before it); a node that errored may have sent."""
    status = execution.get("status")
    result = _result_data(execution)
    runs = (result.get("runData") or {}).get(node_name)
    if not runs:
        if status in _ENDED_WHOLE and result.get("lastNodeExecuted") != node_name:
            return NodeReading("failed", f"execution ended {status} before {node_name} ran")
        return NodeReading("unknown", f"execution is {status}; {node_name} has no recorded run")
    if runs[0].get("error"):
        return NodeReading("unknown", f"{node_name} failed after it may have sent")
    item = _first_item(runs[0])
    if item is None:
        return NodeReading("unknown", f"{node_name} recorded no output")
    if _recovered(item):
        return NodeReading("unknown", f"{node_name} finished before n8n died; its answer is lost")
    body = trigger_body(execution) or {}
    args = body.get("args")
    return NodeReading("answered", "", item, args if isinstance(args, dict) else {})


async def find_execution(
    source: ExecutionSource,
    *,
    workflow_name: str,
    key: KeyRef,
    now: datetime,
    scan: RecordScan,
) -> Lookup:
    """The execution of the op workflow ``workflow_name`` that carried ``key``, or proof that
    none ever did, or ``unknown`` (module docstring)."""
    wids = {
        str(w["id"])
        for w in await source.list_workflows(name=workflow_name)
        if w.get("name") == workflow_name  # n8n's name filter matches substrings
    }
    since = key.sent_at - scan.skew
    seen: dict[str, bool | None] = {}
    complete = True
    for until in (key.last_wait + scan.lead + scan.skew, None):
        hits, whole = await _scan(source, wids, key, since, until, seen, scan)
        complete = whole
        if hits:
            return _one(hits)
    if not complete:
        return Lookup("unknown", f"more than {scan.max_pages} pages of executions since the send")
    return await _prove_absent(source, wids, key, now, seen, scan)


# ---- the search -------------------------------------------------------------------------------
async def _scan(
    source: ExecutionSource,
    wids: set[str],
    key: KeyRef,
    since: datetime,
    until: datetime | None,
    seen: dict[str, bool | None],
    scan: RecordScan,
) -> tuple[list[Mapping[str, Any]], bool]:
    """The executions of the op workflows started in ``[since, until]`` that carry the key (each
    one read is remembered in ``seen``), and whether the window was read to its end."""
    hits: list[Mapping[str, Any]] = []
    whole = True
    for wid in sorted(wids):
        pages = _pages(
            source,
            scan,
            workflow_id=wid,
            started_after=since,
            started_before=until,
            include_data=True,
        )
        async for page in pages:
            for e in page:
                carried = seen[str(e.get("id"))] = key.carried_by(e)
                if carried:
                    hits.append(e)
        whole = whole and pages.whole
    return hits, whole


def _one(hits: list[Mapping[str, Any]]) -> Lookup:
    ids = sorted({str(e.get("id")) for e in hits})
    if len(ids) > 1:
        return Lookup("unknown", f"n8n executions {', '.join(ids)} all carry the key")
    return Lookup("found", f"n8n execution {ids[0]}", hits[0])


async def _prove_absent(
    source: ExecutionSource,
    wids: set[str],
    key: KeyRef,
    now: datetime,
    seen: dict[str, bool | None],
    scan: RecordScan,
) -> Lookup:
    """``absent`` when n8n's records provably cover the send and none carries the key; else
    ``unknown`` naming the first thing that is not proven (module docstring, 1-5)."""
    out_of_reach = _out_of_reach(key, now, scan)
    if out_of_reach is not None:
        return out_of_reach
    lower = await _lower_witness(source, key.sent_at - scan.skew)
    if lower is None:
        return Lookup("unknown", "n8n holds no execution from before the send (pruned?)")
    held, whole = await _held_above(source, lower, scan)
    if not whole:
        return Lookup("unknown", f"more than {scan.max_pages} pages of executions since the send")
    upper = await _upper_witness(source, held, key.last_wait + scan.settle + scan.skew)
    if upper is None:
        return Lookup("unknown", "n8n holds no execution from after the send settled yet")
    missing = sorted(set(range(lower + 1, upper)) - set(held))
    if missing:
        return Lookup("unknown", f"n8n executions {_ranges(missing)} are gone (pruned, deleted)")
    ours = [e for i, e in held.items() if i < upper and str(e.get("workflowId")) in wids]
    return await _none_carry(source, ours, key, key.sent_at - scan.skew, seen, (lower, upper))


def _out_of_reach(key: KeyRef, now: datetime, scan: RecordScan) -> Lookup | None:
    """``unknown`` when n8n's records cannot cover the send yet or any more (module docstring, 1)."""
    if now - key.last_wait < scan.settle:
        return Lookup("unknown", "too soon after the send: n8n may not have recorded it yet")
    if now - key.sent_at >= scan.prune_age - scan.skew:
        return Lookup("unknown", "sent longer ago than n8n keeps executions (pruned?)")
    return None


async def _lower_witness(source: ExecutionSource, before: datetime) -> int | None:
    """The newest held execution that started before ``before`` (its id)."""
    page, _ = await source.executions_page(started_before=before, limit=1)
    return _int_id(page[0]) if page else None


async def _held_above(
    source: ExecutionSource, lower: int, scan: RecordScan
) -> tuple[dict[int, Mapping[str, Any]], bool]:
    """Every listed execution with an id above ``lower`` (all workflows, no data)."""
    held: dict[int, Mapping[str, Any]] = {}
    pages = _pages(source, scan)
    async for page in pages:
        for e in page:
            i = _int_id(e)
            if i is not None and i > lower:
                held[i] = e
        if any((_int_id(e) or 0) <= lower for e in page):
            return held, True
    return held, pages.whole


async def _upper_witness(
    source: ExecutionSource, held: Mapping[int, Mapping[str, Any]], after: datetime
) -> int | None:
    """The lowest id among held executions created after ``after`` (the list gives only the
    start time; the creation time, which orders ids, is checked on the execution itself: one
    queued before the send that started late is no witness)."""
    started = sorted(i for i, e in held.items() if _after(e.get("startedAt"), after))
    for i in started[:3]:
        created = _when((await source.get_execution(i, include_data=False)).get("createdAt"))
        if created is not None and created > after:
            return i
    return None


async def _none_carry(
    source: ExecutionSource,
    ours: list[Mapping[str, Any]],
    key: KeyRef,
    since: datetime,
    seen: Mapping[str, bool | None],
    bounds: tuple[int, int],
) -> Lookup:
    """Each execution of the op workflow between the witnesses is read (again, if the scan did
    not see it: it may have been running then) and carries another key."""
    for e in ours:
        eid = str(e.get("id"))
        if not _after(e.get("startedAt"), since, missing=True):
            continue  # started before the send: an earlier send under this key at most
        if eid not in seen:
            full = await source.get_execution(eid, include_data=True)
            carried = key.carried_by(full)
            if carried:
                return _one([full])
        else:
            carried = seen[eid]
        if carried is None:
            return Lookup("unknown", f"n8n execution {eid} of the op has no readable trigger data")
    lo, hi = bounds
    return Lookup("absent", f"n8n holds every execution {lo}..{hi}; none carries the key")


# ---- paging and records -----------------------------------------------------------------------
class _pages:  # noqa: N801 - used like a function: ``async for page in _pages(...)``
    """The pages of one listing, newest first, following ``nextCursor``; ``whole`` says whether
    the listing ended before ``max_pages``."""

    def __init__(self, source: ExecutionSource, scan: RecordScan, **query: Any) -> None:
        self._source = source
        self._scan = scan
        self._query = query
        self.whole = False

    async def __aiter__(self) -> AsyncIterator[list[dict[str, Any]]]:
        cursor: str | None = None
        for _ in range(self._scan.max_pages):
            page, cursor = await self._source.executions_page(
                cursor=cursor, limit=self._scan.page_size, **self._query
            )
            yield page
            if not cursor or not page:
                self.whole = True
                return


def _int_id(execution: Mapping[str, Any]) -> int | None:
    raw = execution.get("id")
    return int(raw) if isinstance(raw, int | str) and ascii_digits(str(raw)) else None


def _when(raw: Any) -> datetime | None:
    if not isinstance(raw, str):
        return None
    try:
        return datetime.fromisoformat(raw.replace("Z", "+00:00"))
    except ValueError:
        return None


def _after(raw: Any, when: datetime, *, missing: bool = False) -> bool:
    """Whether an n8n timestamp is at or after ``when`` (``missing`` when there is none)."""
    at = _when(raw)
    return missing if at is None else at >= when


def _ranges(ids: list[int]) -> str:
    shown = [str(i) for i in ids[:5]]
    return ", ".join(shown) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")


def _result_data(execution: Mapping[str, Any]) -> dict[str, Any]:
    data = execution.get("data")
    result = data.get("resultData") if isinstance(data, dict) else None
    return result if isinstance(result, dict) else {}


def _first_item(node_run: Mapping[str, Any]) -> dict[str, Any] | None:
    try:
        item = node_run["data"]["main"][0][0]["json"]
    except (KeyError, IndexError, TypeError):
        return None
    return item if isinstance(item, dict) else None


def _arg_hash(body: Mapping[str, Any], args: dict[str, Any]) -> str | None:
    """The hash of the args as sent: a forget that redacted someone in them (``keeping``) wrote
    the hash of the args as they were under ``countersign_redacted`` first."""
    redacted = body.get("countersign_redacted")
    if redacted is None:
        return content_hash(args)
    kept = redacted.get("arg_hash") if isinstance(redacted, dict) else None
    return kept if isinstance(kept, str) else None


def trigger_body(execution: Mapping[str, Any]) -> dict[str, Any] | None:
    """The webhook's body: the Trigger node's recorded output, else the input n8n stored with
    the execution when it created it (``executionData.nodeExecutionStack``: the Trigger's item,
    or the next node's input, which is that item passed on). A write workflow without
    ``saveExecutionProgress`` that n8n was killed in holds only the latter: n8n's recovery
    rebuilds ``runData`` from its event log with a placeholder item, not the body."""
    runs = (_result_data(execution).get("runData") or {}).get(_TRIGGER)
    item = _first_item(runs[0]) if isinstance(runs, list) and runs else None
    body = item.get("body") if item else None
    return body if isinstance(body, dict) else _stacked_body(execution)


def _stacked_body(execution: Mapping[str, Any]) -> dict[str, Any] | None:
    data = execution.get("data")
    stored = data.get("executionData") if isinstance(data, dict) else None
    stack = stored.get("nodeExecutionStack") if isinstance(stored, dict) else None
    for entry in stack if isinstance(stack, list) else []:
        item = _first_item(entry) if isinstance(entry, dict) else None
        body = item.get("body") if item else None
        if isinstance(body, dict):
            return body
    return None


def _recovered(item: Mapping[str, Any]) -> bool:
    """n8n's recovery placeholder: the node finished by n8n's event log, its output not kept."""
    return item.get(_RECOVERED) is True
