"""What n8n keeps about people (N8nRuntime SPEC "What n8n keeps"; issue 27 §6).

- Reads keep nothing: WorkflowBuilder gives read and batch workflows
  ``saveDataSuccessExecution/saveDataErrorExecution: "none"``, so n8n deletes their executions
  when they end; the calendars a preview read never rest in n8n.
- A write keeps its record until it is settled: the reconciler finds it by the idempotency key
  (``executions.find_execution``); once the ledger holds the key settled (completed or failed),
  :func:`prune_settled` deletes it — the API's lifespan runs it with the settling passes (n8n's
  own pruning, EXECUTIONS_DATA_MAX_AGE, takes whatever is left: a key still unknown, in
  progress, or gone from the ledger).
- A forget (:func:`forget_executions`) deletes only the forgetting person's executions — those
  whose trigger body names one of their plans (:func:`owner_plan`), never one that merely
  mentions them — and **redacts** the forgotten person's address and plan ids in everyone else's
  (:class:`ExecutionStore`), as the audit redacts its rows: each whole-word occurrence becomes
  ``[forgotten]``. A redacted write still reconciles: before its arguments are redacted, their
  hash (the key's last part) is written into the trigger body under ``countersign_redacted``,
  and ``KeyRef.carried_by`` compares that instead.

n8n has no API that edits an execution, so redaction edits n8n's ``execution_data`` row itself
(n8n 2.41.1: column ``data``, the run serialized with ``flatted``; ``storedAt = 'db'``), in
SQLite (the single-process mode) or PostgreSQL (queue mode). Only string values, object keys and
text binaries (base64) change; the flatted structure (its references) is kept as it is.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import psycopg
from psycopg.conninfo import make_conninfo

from countersign.kernel import Settings, ascii_digits, content_hash

from .errors import N8nApiError, N8nUnavailableError
from .executions import trigger_body as _trigger_body
from .queue import N8nDatabase

__all__ = [
    "FORGOTTEN",
    "REDACTED",
    "ExecutionStore",
    "Forgetting",
    "PostgresExecutionStore",
    "SqliteExecutionStore",
    "carried_key",
    "configured_execution_store",
    "execution_store",
    "forget_executions",
    "mention_pattern",
    "owner_plan",
    "prune_settled",
    "redact_flatted",
]

#: what a forgotten name or plan id becomes in a record that stays
FORGOTTEN = "[forgotten]"
#: the trigger-body field a redaction writes: ``{"arg_hash": <the key's last part>}``
REDACTED = "countersign_redacted"
_TRIGGER = "Trigger"
#: where a record holds the trigger body: the Trigger's output, and the input n8n stored when it
#: created the execution (all a write without progress saving holds after a crash; executions)
_BODY_PATHS = (
    ("resultData", "runData", _TRIGGER, 0, "data", "main", 0, 0, "json", "body"),
    ("executionData", "nodeExecutionStack", 0, "data", "main", 0, 0, "json", "body"),
)
_MAX_DEPTH = 256


class ExecutionStore(Protocol):
    """Where n8n keeps execution data, edited in place to redact."""

    def redact(self, execution_id: str, pattern: re.Pattern[str]) -> bool:
        """Redact ``pattern`` in the execution's data; False when n8n holds no such row."""
        ...


class ExecutionLister(Protocol):
    """The part of ``N8nClient`` a forget uses."""

    def execution_pages(
        self, *, include_data: bool = False, page_size: int = 100, max_pages: int = 100
    ) -> AsyncIterator[list[dict[str, Any]]]: ...

    async def delete_execution(self, execution_id: str | int) -> None: ...


def mention_pattern(needles: Iterable[str]) -> re.Pattern[str] | None:
    """Any needle as a whole word, ignoring case (``local`` does not match ``localhost``)."""
    words = sorted({n for n in needles if n}, key=len, reverse=True)
    if not words:
        return None
    alt = "|".join(re.escape(n) for n in words)
    return re.compile(r"(?<![A-Za-z0-9_])(?:" + alt + r")(?![A-Za-z0-9_])", re.IGNORECASE)


def owner_plan(execution: Mapping[str, Any]) -> str | None:
    """The plan an execution ran for: its trigger body's ``plan.plan_id`` (step and batch
    workflows both carry it); None for an execution Countersign did not start."""
    body = _trigger_body(execution)
    plan = body.get("plan") if body is not None else None
    pid = plan.get("plan_id") if isinstance(plan, dict) else None
    return pid if isinstance(pid, str) else None


def carried_key(execution: Mapping[str, Any]) -> str | None:
    """The idempotency key ``plan_id:step:arg_hash`` a write's execution carried (its trigger
    body: the plan, the step and the args, or the hash a redaction kept); None for anything
    else (a batch read, an execution Countersign did not start, a record without data)."""
    body = _trigger_body(execution)
    if body is None:
        return None
    plan, args = body.get("plan"), body.get("args")
    if not isinstance(plan, dict) or not isinstance(args, dict):
        return None
    pid, step = plan.get("plan_id"), plan.get("step")
    if not isinstance(pid, str) or not isinstance(step, int) or isinstance(step, bool):
        return None
    redacted = body.get(REDACTED)
    arg_hash = redacted.get("arg_hash") if isinstance(redacted, dict) else content_hash(args)
    return f"{pid}:{step}:{arg_hash}" if isinstance(arg_hash, str) else None


@dataclass
class Forgetting:
    """What a forget did to n8n's executions."""

    deleted: int = 0
    redacted: int = 0
    #: executions that mention the person but whose row was gone when redacted
    vanished: list[str] = field(default_factory=list)


async def forget_executions(
    client: ExecutionLister,
    store: ExecutionStore | None,
    *,
    own: Sequence[str],
    own_if_mentioning: Sequence[str] = (),
    needles: Sequence[str],
    redact_others: bool = True,
) -> Forgetting:
    """Delete the executions of the plans ``own`` (and of ``own_if_mentioning`` that mention a
    needle); redact the needles in every other execution that mentions one (``redact_others``;
    else those are left as they are).

    Raises:
        N8nUnavailableError: a record must be redacted and no ``store`` reaches n8n's data.
    """
    pattern = mention_pattern(needles)
    owned, partly = set(own), set(own_if_mentioning)
    out = Forgetting()
    to_redact: list[str] = []
    async for page in client.execution_pages(include_data=True):
        for ex in page:
            plan = owner_plan(ex)
            said = pattern is not None and bool(pattern.search(json.dumps(ex, default=str)))
            if plan in owned or (plan in partly and said):
                await client.delete_execution(str(ex["id"]))
                out.deleted += 1
            elif said and redact_others:
                to_redact.append(str(ex["id"]))
    if to_redact and (store is None or pattern is None):
        raise N8nUnavailableError(
            f"forget: {len(to_redact)} n8n execution(s) of other people mention the person and "
            "must be redacted, but no n8n execution store is configured"
        )
    for eid in to_redact:
        if store is not None and pattern is not None and store.redact(eid, pattern):
            out.redacted += 1
        else:
            out.vanished.append(eid)
    return out


#: n8n statuses of an execution that has ended (a running one is never touched)
_ENDED = frozenset({"success", "error", "crashed", "canceled"})


async def prune_settled(
    client: ExecutionLister, *, settled: Callable[[str], bool], max_pages: int = 20
) -> list[str]:
    """Delete every ended execution whose write the ledger holds settled (``settled(key)``:
    completed or failed): nothing needs its record any more. An execution that carries no key
    (not Countersign's, a read), or whose key is unknown, in progress or no longer in the
    ledger, stays — the reconciler may still need it (module docstring). The ids deleted,
    listed first and deleted after (a delete does not move the pages being read); one already
    gone (another API's pass, n8n's own pruning) is skipped."""
    doomed: list[str] = []
    async for page in client.execution_pages(include_data=True, max_pages=max_pages):
        for ex in page:
            key = carried_key(ex) if ex.get("status") in _ENDED else None
            if key is not None and settled(key):
                doomed.append(str(ex["id"]))
    gone: list[str] = []
    for eid in doomed:
        try:
            await client.delete_execution(eid)
        except N8nApiError as e:  # another API's pass deleted it first
            if e.status != 404:
                raise
            continue
        gone.append(eid)
    return gone


# ---- redaction of one flatted record -----------------------------------------------------------
def redact_flatted(text: str, pattern: re.Pattern[str]) -> str:
    """``text`` (n8n's ``execution_data.data``: ``flatted``) with every match of ``pattern``
    replaced by ``[forgotten]`` in strings, object keys and text binaries; the trigger body
    first gets ``countersign_redacted: {"arg_hash": …}`` (the hash of its args as they were),
    unless an earlier redaction wrote it."""
    entries = json.loads(text)
    if not isinstance(entries, list) or not entries:
        return text
    _mark_arg_hash(entries)
    for i, e in enumerate(entries):
        if isinstance(e, str):
            entries[i] = pattern.sub(FORGOTTEN, e)
        elif isinstance(e, dict):
            entries[i] = _redact_keys(e, pattern)
    for e in entries:
        if isinstance(e, dict):
            _redact_binary(entries, e, pattern)
    return json.dumps(entries, ensure_ascii=False, separators=(",", ":"))


def _ref(entries: list[Any], value: Any) -> Any:
    """A flatted container's member: a string is the index of the entry that holds it."""
    if isinstance(value, str) and ascii_digits(value) and int(value) < len(entries):
        return entries[int(value)]
    return value


def _follow(entries: list[Any], path: Sequence[str | int]) -> Any:
    here: Any = entries[0]
    for step in path:
        if isinstance(step, int):
            if not isinstance(here, list) or step >= len(here):
                return None
            here = _ref(entries, here[step])
        else:
            if not isinstance(here, dict) or step not in here:
                return None
            here = _ref(entries, here[step])
    return here


def _decode(entries: list[Any], value: Any, depth: int = 0) -> Any:
    """The JSON value a container member stands for (references resolved)."""
    if depth > _MAX_DEPTH:
        raise ValueError("flatted record nests too deep (a cycle?)")
    item = _ref(entries, value)
    if isinstance(item, list):
        return [_decode(entries, v, depth + 1) for v in item]
    if isinstance(item, dict):
        return {k: _decode(entries, v, depth + 1) for k, v in item.items()}
    return item


def _mark_arg_hash(entries: list[Any]) -> None:
    for path in _BODY_PATHS:
        body = _follow(entries, path)
        if not isinstance(body, dict) or REDACTED in body or "args" not in body:
            continue
        args = _decode(entries, body["args"])
        if not isinstance(args, dict):
            continue
        entries.append(content_hash(args))
        entries.append({"arg_hash": str(len(entries) - 1)})
        body[REDACTED] = str(len(entries) - 1)


def _redact_keys(obj: dict[str, Any], pattern: re.Pattern[str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in obj.items():
        new = pattern.sub(FORGOTTEN, k)
        while new != k and new in out:
            new += "_"
        out[new] = v
    return out


def _redact_binary(entries: list[Any], obj: dict[str, Any], pattern: re.Pattern[str]) -> None:
    """A binary property (``{data: base64, mimeType, …}``) whose bytes are UTF-8 text."""
    if "mimeType" not in obj or "data" not in obj:
        return
    ref = obj["data"]
    raw = _ref(entries, ref)
    if not isinstance(raw, str) or not isinstance(ref, str) or len(raw) < 8:
        return
    try:
        plain = base64.b64decode(raw, validate=True).decode("utf-8")
    except (binascii.Error, UnicodeDecodeError):
        return
    redacted = pattern.sub(FORGOTTEN, plain)
    if redacted != plain:
        entries[int(ref)] = base64.b64encode(redacted.encode("utf-8")).decode("ascii")


# ---- the stores ---------------------------------------------------------------------------------
_SELECT = 'SELECT data FROM execution_data WHERE "executionId" = {p}'
_UPDATE = 'UPDATE execution_data SET data = {p} WHERE "executionId" = {p}'


@dataclass(frozen=True)
class SqliteExecutionStore:
    """n8n's SQLite database (``DB_TYPE=sqlite``; ``<N8N_USER_FOLDER>/.n8n/database.sqlite``).
    n8n runs it in WAL mode with a pool, so another writer waits on its lock (``timeout_s``)."""

    path: Path
    timeout_s: float = 10.0

    @classmethod
    def of(cls, data_dir: Path) -> SqliteExecutionStore:
        """The store of the n8n whose ``N8N_USER_FOLDER`` is ``data_dir``."""
        return cls(data_dir / ".n8n" / "database.sqlite")

    def redact(self, execution_id: str, pattern: re.Pattern[str]) -> bool:
        """Redact one execution's data in one transaction (module docstring)."""
        if not self.path.exists():
            raise N8nUnavailableError(f"n8n's database {self.path.name} is not there")
        con = sqlite3.connect(self.path, timeout=self.timeout_s, isolation_level=None)
        try:
            con.execute("BEGIN IMMEDIATE")
            row = con.execute(_SELECT.format(p="?"), (int(execution_id),)).fetchone()
            if row is None:
                con.execute("ROLLBACK")
                return False
            new = redact_flatted(str(row[0]), pattern)
            con.execute(_UPDATE.format(p="?"), (new, int(execution_id)))
            con.execute("COMMIT")
            return True
        except sqlite3.Error as e:
            raise N8nUnavailableError(f"n8n's database: {type(e).__name__}") from e
        finally:
            con.close()


@dataclass(frozen=True)
class PostgresExecutionStore:
    """n8n's PostgreSQL database (``DB_TYPE=postgresdb``, queue mode): a libpq URL that reaches
    n8n's schema (keep it in a Secret; never logged)."""

    dsn: str = field(repr=False)

    def redact(self, execution_id: str, pattern: re.Pattern[str]) -> bool:
        """Redact one execution's data in one transaction (the row locked while it is edited)."""
        try:
            with psycopg.connect(self.dsn) as con, con.transaction():
                row = con.execute(
                    _SELECT.format(p="%s") + " FOR UPDATE", (int(execution_id),)
                ).fetchone()
                if row is None:
                    return False
                new = redact_flatted(str(row[0]), pattern)
                con.execute(_UPDATE.format(p="%s"), (new, int(execution_id)))
                return True
        except psycopg.Error as e:
            raise N8nUnavailableError(f"n8n's database: {type(e).__name__}") from e


def execution_store(data_dir: Path, *, queue_database_url: str | None = None) -> ExecutionStore:
    """The store of the n8n ``countersign`` runs in ``data_dir``: its SQLite, or in queue mode
    (``COUNTERSIGN_N8N_WORKERS`` > 0) the ``n8n`` database beside Countersign's own
    (``queue_database_url``: Countersign's database URL, as ``queue.start_configured`` takes)."""
    if queue_database_url is None:
        return SqliteExecutionStore.of(data_dir)
    db = N8nDatabase.from_url(queue_database_url)
    return PostgresExecutionStore(
        make_conninfo(
            host=db.host, port=db.port, user=db.user, password=db.password, dbname=db.database
        )
    )


def configured_execution_store(
    settings: Settings, data_dir: Path, *, database_url: str | None = None
) -> ExecutionStore:
    """The store of the n8n ``queue.start_configured`` starts with the same arguments: SQLite in
    ``data_dir`` for one process, else the ``n8n`` database on ``database_url`` (Countersign's
    PostgreSQL; ``DATABASE_URL`` when not given)."""
    if settings.n8n_workers == 0:
        return execution_store(data_dir)
    url = database_url or (
        settings.database_url.get_secret_value() if settings.database_url else None
    )
    if url is None:
        raise N8nUnavailableError("n8n's queue mode needs DATABASE_URL to reach n8n's records")
    return execution_store(data_dir, queue_database_url=url)
