"""PlanLibrary's errors (GLOBAL_SPEC §11)::

CountersignError
├── InputError
│   └── LibraryInputError          library_invalid_input   a query or entry the library refuses
└── EmbeddingError                 embedding_failed        the embedder is missing or broken
    └── EmbeddingUnavailableError  embedding_unavailable   a configured model did not answer (retryable)
"""

from __future__ import annotations

from countersign.kernel import CountersignError, InputError

__all__ = ["EmbeddingError", "EmbeddingUnavailableError", "LibraryInputError"]


class LibraryInputError(InputError):
    """A query or library entry that can never succeed as given (names the field)."""

    code = "library_invalid_input"


class EmbeddingError(CountersignError):
    """The embedder is missing, misconfigured or answered vectors of the wrong shape."""

    code = "embedding_failed"


class EmbeddingUnavailableError(EmbeddingError):
    """A configured embedding model (litellm) did not answer; trying again may work."""

    code = "embedding_unavailable"
    retryable = True
