"""PlanLibrary / PlanRetrieval (PlanLibrary SPEC): signed plans with their outcomes, found again
for a new intent by a hybrid of BM25 (PostgreSQL full-text), pgvector similarity, success rate and
recency, and handed to the planner as ``exemplar`` evidence with a one-line why."""

from .core import intent_text, meaningful, merge, plan_text, rank, terms, to_evidence, why_line
from .embeddings import (
    Embedder,
    LiteLLMEmbedder,
    WordLlamaEmbedder,
    configured_embedder,
    default_embedder,
    fit_dim,
)
from .errors import EmbeddingError, EmbeddingUnavailableError, LibraryInputError
from .lexical import Bm25Index
from .models import Candidate, LibraryEntry, Ranked
from .store import PlanLibrary

__all__ = [
    "Bm25Index",
    "Candidate",
    "Embedder",
    "EmbeddingError",
    "EmbeddingUnavailableError",
    "LibraryEntry",
    "LibraryInputError",
    "LiteLLMEmbedder",
    "PlanLibrary",
    "Ranked",
    "WordLlamaEmbedder",
    "configured_embedder",
    "default_embedder",
    "fit_dim",
    "intent_text",
    "meaningful",
    "merge",
    "plan_text",
    "rank",
    "terms",
    "to_evidence",
    "why_line",
]
