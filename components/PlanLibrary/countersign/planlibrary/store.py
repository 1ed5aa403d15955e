"""The plan library in PostgreSQL (``plan_library``, migration 0001) and PlanRetrieval over it.

Lexical channel: the generated ``tsv`` ('simple' config, GIN index) against an OR-tsquery of the
query's ``terms`` (only ``[a-z0-9]+``, bound as a parameter), scored by ``ts_rank``. Vector channel:
pgvector cosine distance on the HNSW index (``hnsw.iterative_scan`` so the per-user filter still
returns ``k`` rows). Both are restricted to the caller's own plans. The candidates of both are
merged and ranked by the pure core (``core.rank``) with the Policy's ``retrieval`` weights.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import datetime
from typing import Any

from pgvector import Vector
from sqlalchemy import Connection, text

from countersign.kernel import Evidence, Intent, RetrievalWeights
from countersign.storage import Database

from .core import intent_text, merge, rank, terms, to_evidence
from .embeddings import Embedder, fit_dim
from .errors import EmbeddingError, LibraryInputError
from .models import Candidate, LibraryEntry, Ranked

__all__ = ["PlanLibrary"]

_COLS = "plan_id, user_id, intent, text, success_count, failure_count, last_used_at, created_at"


#: a user with at most this many plans is searched by an exact scan of their own rows
SMALL_LIBRARY = 5000
#: in a large library, the rows the selecting terms may match (estimated), and so rank
LEXICAL_ROWS = 3000
#: a small library's rows, materialized once per statement (the shared indexes are skipped)
_MINE = "(SELECT * FROM plan_library WHERE user_id = :u OFFSET 0)"

#: the lexical candidates of ``PlanLibrary.lexical`` (every value is bound; ``{source}`` is
#: ``plan_library`` or ``_MINE``)
_LEXICAL = """
SELECT top.plan_id, top.user_id, top.intent, top.text, top.success_count,
       top.failure_count, top.last_used_at, top.created_at, top.lex,
       1 - (top.embedding <=> CAST(:v AS vector)) AS cos,
       ARRAY(SELECT t FROM unnest(CAST(:terms AS text[])) AS t
             WHERE top.tsv @@ to_tsquery('simple', t)) AS matched
FROM (SELECT m.*, ts_rank(m.tsv, to_tsquery('simple', :tsq)) AS lex
      FROM (SELECT plan_id, user_id, intent, text, success_count, failure_count,
                   last_used_at, created_at, tsv, embedding
            FROM {source} AS pl
            WHERE user_id = :u AND tsv @@ to_tsquery('simple', :match)
              AND (CAST(:intent AS text) IS NULL OR intent = :intent)
            LIMIT :cap) AS m
      ORDER BY lex DESC, created_at DESC
      LIMIT :k) AS top
ORDER BY lex DESC, created_at DESC
"""


def _entry(row: Any) -> LibraryEntry:
    m = row._mapping
    return LibraryEntry(**{k: m[k] for k in LibraryEntry.model_fields})


class PlanLibrary:
    """Stored plans with their outcome counts, and hybrid retrieval over them.

    Args:
        db: the migrated database.
        embedder: turns text into vectors (``WordLlamaEmbedder`` by default at the roots).
        clock: now, for recency.
    """

    def __init__(self, db: Database, *, embedder: Embedder, clock: Callable[[], datetime]) -> None:
        self.db = db
        self.embedder = embedder
        self._clock = clock
        self._dim: int | None = None

    # ---- writing ----------------------------------------------------------------------------
    def column_dim(self) -> int:
        """The ``plan_library.embedding`` column's dimension (read once)."""
        if self._dim is None:
            with self.db.tx() as c:
                row = c.execute(
                    text(
                        "SELECT atttypmod FROM pg_attribute WHERE attrelid = 'plan_library'::regclass "
                        "AND attname = 'embedding'"
                    )
                ).scalar_one()
            self._dim = int(row)
        return self._dim

    def check_embedder(self) -> int:
        """At start: the embedder answers, with vectors of its declared length, and they fit
        the ``plan_library.embedding`` column (one probe text embedded). Returns the length.

        Raises:
            EmbeddingError: the model's vectors are longer than the column (naming both, the
                model and the two ways out), or not of the declared length.
            EmbeddingUnavailableError: the model did not answer.
        """
        dim, column = self.embedder.dim, self.column_dim()
        if dim > column:
            raise EmbeddingError(
                f"embedding model {self.embedder.name!r} returns {dim} dims; the database's "
                f"plan_library.embedding column is vector({column}): choose a model of at most "
                f"{column} dims, or migrate a new database with embedding_dim >= {dim}"
            )
        [probe] = self.embedder.embed(["countersign embedding check"])
        if len(probe) != dim:
            raise EmbeddingError(
                f"embedding model {self.embedder.name!r} answered {len(probe)} dims, "
                f"{dim} declared (COUNTERSIGN_EMBEDDING_DIM)"
            )
        return dim

    def embed(self, texts: Sequence[str]) -> list[Vector]:
        """The texts' vectors fitted to the column, as pgvector values (Storage registers
        pgvector's psycopg adapter on every connection: they are bound as ``vector``)."""
        dim = self.column_dim()
        return [Vector(fit_dim(v, dim)) for v in self.embedder.embed(list(texts))]

    def upsert(self, c: Connection, entry: LibraryEntry, *, vector: Vector | None) -> None:
        """Insert or refresh one plan's row (text, embedding) in the caller's transaction; its
        outcome counts and last use are kept (PlanWriter sets them)."""
        c.execute(
            text(
                """
                INSERT INTO plan_library (plan_id, user_id, intent, text, embedding,
                                          success_count, failure_count, last_used_at, created_at)
                VALUES (:plan_id, :user_id, :intent, :text, CAST(:vec AS vector),
                        :success_count, :failure_count, :last_used_at, :created_at)
                ON CONFLICT (plan_id) DO UPDATE SET text = EXCLUDED.text,
                    embedding = EXCLUDED.embedding
                """
            ),
            {**entry.model_dump(), "vec": vector},
        )

    def get(self, plan_id: str) -> LibraryEntry | None:
        """One entry, or None."""
        with self.db.tx() as c:
            row = c.execute(
                text("SELECT " + _COLS + " FROM plan_library WHERE plan_id = :p"),  # noqa: S608 - constant columns
                {"p": plan_id},
            ).first()
        return None if row is None else _entry(row)

    # ---- retrieval --------------------------------------------------------------------------
    def _small(self, c: Connection, user_id: str) -> bool:
        """True when the user holds at most ``SMALL_LIBRARY`` plans (an index-only count that
        stops there): their rows are then scanned exactly instead of through the shared
        GIN / HNSW indexes, whose matches are mostly other users' rows."""
        n = c.execute(
            text(
                "SELECT count(*) FROM (SELECT 1 FROM plan_library WHERE user_id = :u LIMIT :n) AS x"
            ),
            {"u": user_id, "n": SMALL_LIBRARY + 1},
        ).scalar_one()
        return int(n) <= SMALL_LIBRARY

    def _term_rows(self, c: Connection) -> tuple[dict[str, float], float, float]:
        """PostgreSQL's own statistics of ``tsv`` (kept by ANALYZE / autovacuum): the share of
        rows holding each tracked lexeme, the share assumed for an untracked one (the smallest
        tracked), and the table's row estimate. Empty before the first ANALYZE."""
        row = c.execute(
            text(
                "SELECT s.most_common_elems::text::text[], s.most_common_elem_freqs, c.reltuples "
                "FROM pg_class c LEFT JOIN pg_stats s ON s.tablename = 'plan_library' "
                "AND s.attname = 'tsv' WHERE c.oid = 'plan_library'::regclass"
            )
        ).first()
        if row is None or row[0] is None or not row[1]:
            return {}, 0.0, 0.0
        elems, freqs = list(row[0]), [float(f) for f in row[1]]
        # the array ends with three extra numbers: minimum, maximum, frequency of nulls
        shares = dict(zip(elems, freqs[: len(elems)], strict=False))
        floor = freqs[len(elems)] if len(freqs) > len(elems) else min(shares.values())
        return shares, floor, max(0.0, float(row[2]))

    def _match_terms(self, c: Connection, q: list[str]) -> list[str]:
        """The terms that select lexical candidates in a large library: rarest first, while
        the rows they would select (estimated from the statistics) stay within
        ``LEXICAL_ROWS``; at least the rarest one. Every term still counts in ``ts_rank``."""
        shares, floor, rows = self._term_rows(c)
        if not shares or rows <= 0:
            return q
        ranked = sorted(q, key=lambda t: shares.get(t, floor))
        chosen: list[str] = []
        budget = 0.0
        for t in ranked:
            budget += shares.get(t, floor) * rows
            if chosen and budget > LEXICAL_ROWS:
                break
            chosen.append(t)
        return chosen

    def lexical(
        self,
        c: Connection,
        user_id: str,
        query: str,
        k: int,
        *,
        intent: str | None = None,
        vector: Vector | None = None,
        small: bool = False,
    ) -> list[Candidate]:
        """Full-text candidates: the ``k`` best by ``ts_rank`` of an OR of the query's terms
        (with their cosine similarity to ``vector`` when given, so both channels score them).

        In a large library only the rarest terms select candidates (``_match_terms``): a term
        in many rows adds little to BM25 and would make every query rank a large part of the
        table; at most ``4 * LEXICAL_ROWS`` matching rows are ranked."""
        q = terms(query)
        if not q:
            return []
        match = q if small else self._match_terms(c, q)
        source = _MINE if small else "plan_library"
        rows = c.execute(
            # only a constant fragment (the table, or the person's rows) is formatted in
            text(_LEXICAL.format(source=source)),
            {
                "tsq": " | ".join(q),
                "match": " | ".join(match),
                "terms": q,
                "u": user_id,
                "k": k,
                "cap": None if small else 4 * LEXICAL_ROWS,
                "intent": intent,
                "v": vector,
            },
        ).all()
        return [
            Candidate(
                entry=_entry(r),
                lexical=float(r.lex),
                cosine=None if r.cos is None else float(r.cos),
                matched=tuple(r.matched),
            )
            for r in rows
        ]

    def nearest(
        self,
        c: Connection,
        user_id: str,
        vector: Vector,
        k: int,
        *,
        intent: str | None = None,
        small: bool = False,
    ) -> list[Candidate]:
        """Vector candidates: the ``k`` nearest by cosine distance — exact over a small
        library's rows, else on the HNSW index (iterative scan, so the per-user filter still
        yields ``k`` rows)."""
        if not small:
            c.execute(text("SET LOCAL hnsw.iterative_scan = relaxed_order"))
            c.execute(text(f"SET LOCAL hnsw.ef_search = {max(40, 2 * k)}"))
        source = _MINE if small else "plan_library"
        rows = c.execute(
            text(  # only constant fragments are formatted in; every value is bound
                f"""
                SELECT plan_id, user_id, intent, text, success_count, failure_count,
                       last_used_at, created_at, embedding <=> CAST(:v AS vector) AS dist
                FROM {source} AS pl
                WHERE user_id = :u AND embedding IS NOT NULL
                  AND (CAST(:intent AS text) IS NULL OR intent = :intent)
                ORDER BY embedding <=> CAST(:v AS vector)
                LIMIT :k
                """  # noqa: S608
            ),
            {"v": vector, "u": user_id, "k": k, "intent": intent},
        ).all()
        return [Candidate(entry=_entry(r), cosine=1.0 - float(r.dist)) for r in rows]

    def retrieve(
        self,
        user_id: str,
        query: str,
        *,
        weights: RetrievalWeights | None = None,
        limit: int | None = None,
        intent: str | None = None,
        channels: tuple[str, ...] = ("bm25", "vector"),
    ) -> list[Ranked]:
        """The user's stored plans that best match ``query``, ranked (hybrid by default).

        Args:
            channels: ``("bm25",)`` or ``("vector",)`` to use one channel only (the recall
                comparison); weights of the other channel then count nothing.

        Raises:
            LibraryInputError: an empty user or query, a limit out of 1..50, an unknown channel.
        """
        w = weights or RetrievalWeights()
        k = limit or w.top_k
        if not user_id or not query.strip():
            raise LibraryInputError("plan retrieval needs a user_id and a non-empty query")
        if not 1 <= k <= 50:
            raise LibraryInputError(f"plan retrieval limit must be 1..50, got {k}")
        if not channels or set(channels) - {"bm25", "vector"}:
            raise LibraryInputError(f"unknown retrieval channels {channels!r}")
        pool = max(20, 4 * k)
        vector = self.embed([query])[0] if "vector" in channels else None
        with self.db.tx() as c:
            small = self._small(c, user_id)
            lex = (
                self.lexical(c, user_id, query, pool, intent=intent, vector=vector, small=small)
                if "bm25" in channels
                else []
            )
            vec = (
                self.nearest(c, user_id, vector, pool, intent=intent, small=small)
                if vector is not None
                else []
            )
        if channels == ("bm25",):
            w = w.model_copy(update={"vector": 0.0})
        elif channels == ("vector",):
            w = w.model_copy(update={"bm25": 0.0})
        return rank(merge(lex, vec), weights=w, now=self._clock(), top_k=k)

    def exemplars(
        self,
        intent: Intent,
        *,
        weights: RetrievalWeights | None = None,
        request: str | None = None,
        limit: int | None = None,
    ) -> list[Evidence]:
        """The stable entry point ContextRAG calls (SPEC §4): the intent's user's best stored
        plans **of the same intent** as ``exemplar`` evidence, each with its one-sentence why
        (a plan of another intent is never evidence for this one, however many there are)."""
        ranked = self.retrieve(
            intent.user_id,
            intent_text(intent, request),
            weights=weights,
            limit=limit,
            intent=intent.intent,
        )
        return to_evidence([r for r in ranked if r.entry.intent == intent.intent])
