"""The audit log: append-only, one row per decision, each row carrying the hash of the previous.

``content_hash = sha256(canonical JSON of {ts, kind, plan_id, step, op, status, actor, reason,
latency_ms, retries, details})`` (computed here) and
``row_hash = sha256("<prev_hash>:<seq>:<content_hash>")`` (computed by Postgres in the statement
that takes the head lock); the first row's ``prev_hash`` is 64 zeros. The ``audit_head`` row keeps
the last sequence number and hash, so deleting the newest rows is detected too. One statement per
append locks the head row (``SELECT … FOR UPDATE`` in a CTE), inserts the row and moves the head,
so concurrent writers never fork the chain; it runs inside the caller's transaction, so a decision
and its audit row commit or roll back together. ``prepare`` does everything that needs no database
(validation, the time stamp, ``content_hash``) so that a group-commit writer (``writer.py``) can
refuse a bad entry before it joins a batch and keep hashing out of the serialized part.

Only derived facts go in: ``details`` refuses keys that name secrets or private content.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pydantic import Field, JsonValue, field_validator
from sqlalchemy import Connection, text

from countersign.kernel import (
    Contract,
    ContractError,
    CountersignError,
    canonical_bytes,
    format_utc,
    parse_contract,
    sha256_hex,
)
from countersign.kernel.logs import get_logger, info_enabled

__all__ = [
    "ZERO_HASH",
    "AuditEntry",
    "AuditHeadMissingError",
    "AuditLog",
    "ChainReport",
    "PreparedEntry",
    "content_hash",
    "row_hash",
]

ZERO_HASH = "0" * 64
_LOG = get_logger("countersign.audit")
_FORBIDDEN = re.compile(
    r"(token|password|secret|api_?key|seed|private|body|content)$", re.IGNORECASE
)
_INT4 = 2**31 - 1  # the columns step, latency_ms and retries are Postgres ``integer``
_MAX_SAFE = 2**53 - 1


def _shown(key: str) -> str:
    """A key as a message may carry it (a lone surrogate would break the validation error)."""
    return key.encode("utf-8", "backslashreplace").decode()


def _unstorable(value: JsonValue, path: str) -> str | None:
    """Why a JSON value would not come back from PostgreSQL as it went in (None if it would).

    Text and jsonb cannot hold NUL; jsonb gives a float beyond 2^53-1 back as an integer (1e21 as
    ``1000000000000000000000``), which canonical JSON refuses, so the row could not be verified.
    """
    if isinstance(value, str):
        return (
            f"{path or 'the text'} contains NUL, which PostgreSQL cannot store"
            if "\x00" in value
            else None
        )
    if isinstance(value, float) and abs(value) > _MAX_SAFE:
        return f"{path}: the number {value!r} is beyond 2^53-1 and would not read back exactly"
    if isinstance(value, dict):
        for k, v in value.items():
            found = _unstorable(k, f"{path}.{_shown(k)!r}") or _unstorable(v, f"{path}.{_shown(k)}")
            if found:
                return found
    if isinstance(value, list):
        for i, v in enumerate(value):
            found = _unstorable(v, f"{path}[{i}]")
            if found:
                return found
    return None


class AuditEntry(Contract):
    """One decision."""

    kind: str = Field(pattern=r"^[a-z][a-z_.]{2,47}$")
    status: str = Field(min_length=1, max_length=32)
    actor: str = Field(min_length=1, max_length=128)
    plan_id: str | None = Field(default=None, max_length=26)
    step: int | None = Field(default=None, ge=0, le=_INT4)
    op: str | None = Field(default=None, max_length=160)
    reason: str | None = Field(default=None, max_length=500)
    latency_ms: int | None = Field(default=None, ge=0, le=_INT4)
    retries: int = Field(default=0, ge=0, le=_INT4)
    details: dict[str, JsonValue] = Field(default_factory=dict)

    @field_validator("kind", "status", "actor", "plan_id", "op", "reason", "details")
    @classmethod
    def _storable(cls, v: JsonValue) -> JsonValue:
        # The model accepts only what the table stores: an entry that validates never fails
        # at the database, so a group commit is never failed by one caller's entry.
        why = _unstorable(v, "")
        if why is not None:
            raise ValueError(why)
        return v

    @field_validator("reason", "op")
    @classmethod
    def _no_secret_text(cls, v: str | None) -> str | None:
        # approval tokens, JWTs (n8n's API keys), PEM keys; not error codes such as n8n_api_error
        if v is not None and re.search(
            r"cst_[A-Za-z0-9_-]{20,}|eyJ[A-Za-z0-9_-]{8,}\.eyJ|-----BEGIN", v
        ):
            raise ValueError("looks like a token or key; the audit log keeps derived facts only")
        return v

    @field_validator("details")
    @classmethod
    def _derived_only(cls, v: dict[str, JsonValue]) -> dict[str, JsonValue]:
        for key in v:
            if _FORBIDDEN.search(key):
                raise ValueError(
                    f"details.{_shown(key)}: secrets and private content never go in the audit log"
                )
        if len(canonical_bytes(v)) > 4096:
            raise ValueError("details: at most 4 KB of derived facts")
        return v


def content_hash(fields: dict[str, Any]) -> str:
    """The hash of one row's content (everything but its place in the chain)."""
    return sha256_hex(canonical_bytes(fields))


def row_hash(prev_hash: str, seq: int, content: str) -> str:
    """The chain link: ``sha256("<prev_hash>:<seq>:<content_hash>")`` (same formula as the SQL)."""
    return sha256_hex(f"{prev_hash}:{seq}:{content}".encode())


def _content(ts: str, e: dict[str, Any]) -> dict[str, Any]:
    return {
        "ts": ts,
        "kind": e["kind"],
        "plan_id": e.get("plan_id"),
        "step": e.get("step"),
        "op": e.get("op"),
        "status": e["status"],
        "actor": e["actor"],
        "reason": e.get("reason"),
        "latency_ms": e.get("latency_ms"),
        "retries": e.get("retries", 0),
        "details": e.get("details", {}),
    }


def _log_appended(entries: Sequence[PreparedEntry], last: int) -> None:
    """One log line per appended row: the plan's event as its record says (Audit SPEC, logs);
    in the caller's transaction, so a row rolled back afterwards was logged as appended."""
    if not info_enabled():
        return
    for seq, e in enumerate(entries, last - len(entries) + 1):
        p = e.params
        details = str(p["details"])
        gate = json.loads(details).get("gate_id") if '"gate_id"' in details else None
        fields = {
            "plan_id": p["plan_id"],
            "step": p["step"],
            "op": p["op"],
            "gate": gate,
            "reason": p["reason"],
            "latency_ms": p["latency_ms"],
        }
        _LOG.info(
            "audit." + str(p["kind"]),
            seq=seq,
            status=p["status"],
            retries=p["retries"],
            **{k: v for k, v in fields.items() if v is not None},
        )


_APPEND = text(
    """
    WITH h AS (SELECT seq, last_hash FROM audit_head WHERE id = 1 FOR UPDATE),
    ins AS (
      INSERT INTO audit_log (seq, ts, kind, plan_id, step, op, status, actor, reason, latency_ms,
                             retries, details, content_hash, prev_hash, row_hash)
      SELECT h.seq + 1, :ts, :kind, :plan_id, :step, :op, :status, :actor, :reason, :latency_ms,
             :retries, CAST(:details AS jsonb), CAST(:content_hash AS text), h.last_hash,
             encode(sha256(convert_to(h.last_hash || ':' || (h.seq + 1)::text || ':' || CAST(:content_hash AS text), 'UTF8')), 'hex')
      FROM h
      RETURNING seq, row_hash)
    UPDATE audit_head SET seq = ins.seq, last_hash = ins.row_hash FROM ins WHERE audit_head.id = 1
    RETURNING ins.seq
    """
)

# Several rows in one statement: the head locked as above, the links computed by a recursive
# query over the content hashes in order (``:hashes``, text[]), the rows (``:rows``, a JSON array
# whose element i + 1 is row i + 1's content) inserted, and the head moved to the last one.
_APPEND_MANY = text(
    """
    WITH RECURSIVE h AS (SELECT seq, last_hash FROM audit_head WHERE id = 1 FOR UPDATE),
    hashes AS (SELECT CAST(:hashes AS text[]) AS a),
    chain (i, seq, prev_hash, row_hash) AS (
      SELECT 0, h.seq, CAST(h.last_hash AS text), CAST(h.last_hash AS text) FROM h
      UNION ALL
      SELECT c.i + 1, c.seq + 1, c.row_hash,
             encode(sha256(convert_to(c.row_hash || ':' || (c.seq + 1)::text || ':' || hashes.a[c.i + 1], 'UTF8')), 'hex')
      FROM chain c, hashes WHERE c.i < cardinality(hashes.a)),
    rows AS (
      SELECT * FROM jsonb_to_recordset(CAST(:rows AS jsonb)) AS r(
        i integer, ts timestamptz, kind text, plan_id text, step integer, op text, status text,
        actor text, reason text, latency_ms integer, retries integer, details text,
        content_hash text)),
    ins AS (
      INSERT INTO audit_log (seq, ts, kind, plan_id, step, op, status, actor, reason, latency_ms,
                             retries, details, content_hash, prev_hash, row_hash)
      SELECT c.seq, r.ts, r.kind, r.plan_id, r.step, r.op, r.status, r.actor, r.reason,
             r.latency_ms, r.retries, CAST(r.details AS jsonb), r.content_hash, c.prev_hash,
             c.row_hash
      FROM chain c JOIN rows r ON r.i = c.i
      ORDER BY c.seq
      RETURNING seq, row_hash),
    last AS (SELECT seq, row_hash FROM ins ORDER BY seq DESC LIMIT 1)
    UPDATE audit_head SET seq = last.seq, last_hash = last.row_hash FROM last
    WHERE audit_head.id = 1
    RETURNING last.seq
    """
)


_NO_HEAD = (
    "audit append: the audit_head row is missing (deleted?), so the chain cannot be extended; "
    "run `countersign audit verify` and restore the head from the last row"
)


class AuditHeadMissingError(CountersignError):
    """The chain's head row is gone: nothing can be appended until it is restored."""

    code = "audit_head_missing"


@dataclass(frozen=True, slots=True)
class PreparedEntry:
    """One validated entry, time-stamped and hashed, waiting for its place in the chain.

    Made by ``AuditLog.prepare``; ``params`` are the row's content columns (``details`` as its
    canonical JSON text) and ``content_hash`` their hash. Only the place in the chain (``seq``,
    ``prev_hash``, ``row_hash``) is added when it is appended.
    """

    params: Mapping[str, Any]
    content_hash: str


@dataclass(frozen=True)
class ChainReport:
    """What ``verify`` found."""

    ok: bool
    rows: int
    first_bad_seq: int | None = None
    reason: str | None = None


class AuditLog:
    """Appends and verifies the chain. ``clock`` is injected (tests pin time)."""

    def __init__(self, *, clock: Callable[[], datetime]) -> None:
        self._clock = clock

    def append(self, conn: Connection, entry: AuditEntry | Mapping[str, Any]) -> int:
        """Append one row inside the caller's transaction; returns its sequence number.

        Raises:
            ContractError: the entry is not a valid ``AuditEntry``.
            AuditHeadMissingError: the ``audit_head`` row is gone.
        """
        return self.append_prepared(conn, [self.prepare(entry)])[0]

    def prepare(
        self, entry: AuditEntry | Mapping[str, Any], *, ts: str | None = None
    ) -> PreparedEntry:
        """Validate ``entry``, stamp it (now, by the clock, unless ``ts`` is given) and hash it.

        No database: a group-commit writer calls this in the caller's thread, so a bad entry
        fails its own caller only, before it joins a batch.

        Raises:
            ContractError: the entry is not a valid ``AuditEntry``.
        """
        e = (
            entry
            if isinstance(entry, AuditEntry)
            else parse_contract(AuditEntry, entry, what="audit entry")
        )
        content = _content(ts or format_utc(self._clock()), e.model_dump(mode="json"))
        ch = content_hash(content)
        return PreparedEntry(
            {**content, "details": canonical_bytes(content["details"]).decode()}, ch
        )

    def append_many(
        self, conn: Connection, entries: Sequence[AuditEntry | Mapping[str, Any]]
    ) -> list[int]:
        """Append several rows in one go (one head lock, one multi-row insert); their numbers.

        For writers that produce bursts (a plan's step events); the chain is the same as if each
        row had been appended alone. The rows share one time stamp.
        """
        ts = format_utc(self._clock())
        return self.append_prepared(conn, [self.prepare(e, ts=ts) for e in entries])

    def append_prepared(self, conn: Connection, entries: Sequence[PreparedEntry]) -> list[int]:
        """Append prepared rows, in order, inside the caller's transaction; their numbers.

        One statement (``_APPEND_MANY``; ``_APPEND`` for one row): the head locked
        (``SELECT … FOR UPDATE``, held to the end of the transaction, so other processes' appends
        queue behind it), the links computed, the rows inserted and the head moved.

        Raises:
            AuditHeadMissingError: the ``audit_head`` row is gone.
        """
        if not entries:
            return []
        if len(entries) == 1:  # one statement does lock, insert and move (one round trip)
            e = entries[0]
            one = conn.execute(
                _APPEND, {**e.params, "content_hash": e.content_hash}
            ).scalar_one_or_none()
            if one is None:
                raise AuditHeadMissingError(_NO_HEAD)
            _log_appended(entries, int(one))
            return [int(one)]
        rows = [
            {**e.params, "i": i, "content_hash": e.content_hash} for i, e in enumerate(entries, 1)
        ]
        last = conn.execute(
            _APPEND_MANY,
            {"hashes": [e.content_hash for e in entries], "rows": json.dumps(rows)},
        ).scalar_one_or_none()
        if last is None:
            raise AuditHeadMissingError(_NO_HEAD)
        _log_appended(entries, int(last))
        return list(range(int(last) - len(entries) + 1, int(last) + 1))

    def rows(
        self, conn: Connection, *, plan_id: str | None = None, limit: int = 1000
    ) -> list[dict[str, Any]]:
        """Recent rows (oldest first), optionally for one plan."""
        where = "WHERE plan_id = :plan_id" if plan_id else ""
        result = conn.execute(
            text(f"SELECT * FROM audit_log {where} ORDER BY seq DESC LIMIT :limit"),  # noqa: S608 - fixed text
            {"plan_id": plan_id, "limit": limit},
        )
        return [dict(r._mapping) for r in reversed(result.all())]

    def verify(self, conn: Connection, *, batch: int = 5000) -> ChainReport:
        """Walk the whole chain; the first row that does not hold, and why."""
        walk = _ChainWalk()
        for r in _scan(conn, batch):
            broken = walk.step(r)
            if broken is not None:
                return broken
        return walk.unnamed() or _check_head(conn, walk) or ChainReport(True, walk.count)


@dataclass
class _ChainWalk:
    """The chain walked so far by ``verify``: the last hash, the next seq, the rows counted."""

    prev: str = ZERO_HASH
    expected_seq: int = 1
    count: int = 0
    # rows a forget redacted (ContextRAG SPEC §5): their content is gone, so the stored
    # content hash stands in for it; each must be named by a later memory_forgotten row
    redacted: list[int] = field(default_factory=list)
    named: set[int] = field(default_factory=set)

    def step(self, r: dict[str, Any]) -> ChainReport | None:
        """Check one row against the chain so far (None: it holds, and the walk moves on)."""
        if r["seq"] != self.expected_seq:
            return ChainReport(
                False,
                self.count,
                self.expected_seq,
                f"row {self.expected_seq} is missing (next row is {r['seq']})",
            )
        if r["prev_hash"] != self.prev:
            return ChainReport(
                False,
                self.count,
                r["seq"],
                "prev_hash does not match the previous row (a row was deleted or inserted)",
            )
        content = self._content_of(r)
        if (
            content is None
            or content != r["content_hash"]
            or row_hash(self.prev, r["seq"], content) != r["row_hash"]
        ):
            return ChainReport(
                False,
                self.count,
                r["seq"],
                "row content does not match its hash (the row was changed)",
            )
        self.prev, self.expected_seq, self.count = (
            r["row_hash"],
            self.expected_seq + 1,
            self.count + 1,
        )
        return None

    def _content_of(self, r: dict[str, Any]) -> str | None:
        """The row's content hash as recomputed (the stored one for a redacted row); None when
        its content cannot be hashed. Notes what a redacted row and a forget's row name."""
        if r.get("redacted"):
            self.redacted.append(r["seq"])
            return str(r["content_hash"])
        try:
            content = content_hash(_content(format_utc(r["ts"]), r))
        except ContractError:  # e.g. details edited to hold a number JSON cannot carry
            content = None
        if r["kind"] == "memory_forgotten" and isinstance(r["details"], dict):
            for pair in r["details"].get("redacted_seqs") or []:
                if isinstance(pair, list) and len(pair) == 2:
                    self.named.update(range(int(pair[0]), int(pair[1]) + 1))
        return content

    def unnamed(self) -> ChainReport | None:
        """The first redacted row no ``memory_forgotten`` row names, if any."""
        unnamed = [s for s in self.redacted if s not in self.named]
        if not unnamed:
            return None
        return ChainReport(
            False,
            self.count,
            unnamed[0],
            f"row {unnamed[0]} is marked redacted but no memory_forgotten row names it",
        )


def _check_head(conn: Connection, walk: _ChainWalk) -> ChainReport | None:
    """The head must name the last row walked (it is what detects deleted newest rows)."""
    count = walk.count
    head = conn.execute(text("SELECT seq, last_hash FROM audit_head WHERE id = 1")).first()
    if head is None:
        # The head is what detects deleted newest rows; without it the chain is unprovable.
        return ChainReport(
            False,
            count,
            count + 1,
            f"the audit_head row is missing (deleted); {count} rows are there but whether "
            "newer rows were deleted cannot be checked",
        )
    if int(head.seq) != count or head.last_hash != walk.prev:
        return ChainReport(
            False,
            count,
            count + 1,
            f"the head says {head.seq} rows but {count} are there (newest rows deleted)",
        )
    return None


def _scan(conn: Connection, batch: int) -> Iterator[dict[str, Any]]:
    after = 0
    while True:
        rows = conn.execute(
            text("SELECT * FROM audit_log WHERE seq > :after ORDER BY seq LIMIT :n"),
            {"after": after, "n": batch},
        ).all()
        if not rows:
            return
        for r in rows:
            yield dict(r._mapping)
        after = rows[-1].seq
