"""Text embeddings behind one interface (PlanLibrary SPEC §5).

``Embedder`` is the Protocol every provider implements: ``name`` (what the library row records),
``dim`` (the vector length it returns) and ``embed(texts)`` (unit-length float vectors, one per
text, in order). Two providers ship:

- ``WordLlamaEmbedder`` — the offline default: the WordLlama ``l2_supercat`` token embeddings
  (256 dims) that the ``wordllama`` wheel carries inside it (19 MB; numpy + tokenizers +
  safetensors). Its weights and tokenizer are read from the installed package; nothing is
  downloaded at run time (the library's own ``WordLlama.load`` looks for the tokenizer in a folder
  its wheel does not use and then tries the network, so we load both files ourselves).
- ``LiteLLMEmbedder`` — any hosted or local-server model through ``litellm.embedding`` when one is
  configured (``COUNTERSIGN_EMBEDDING_MODEL`` and ``_API_BASE`` / ``_API_KEY`` / ``_DIM``;
  :func:`configured_embedder` picks); optional dependency (``.[llm]``).

The database column has a fixed dimension (``plan_library.embedding``, a migration parameter,
384 by default). ``fit_dim`` pads a shorter unit vector with zeros (cosine similarity unchanged)
and refuses a longer one, naming both lengths; ``PlanLibrary.check_embedder`` makes the same
check once at start, so a model that does not fit stops the process there, not at an insert.
Choice and recall figures: LLD.md.
"""

from __future__ import annotations

import functools
import os
import threading
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

import numpy as np

from countersign.kernel import Settings

from .errors import EmbeddingError, EmbeddingUnavailableError

__all__ = [
    "Embedder",
    "LiteLLMEmbedder",
    "WordLlamaEmbedder",
    "configured_embedder",
    "default_embedder",
    "fit_dim",
]

#: the longest text we embed (characters); longer text is cut, never sent whole
MAX_TEXT = 4000


@runtime_checkable
class Embedder(Protocol):
    """Turns texts into unit-length vectors of ``dim`` floats."""

    @property
    def name(self) -> str:
        """The provider and model, e.g. ``wordllama/l2_supercat_256``."""
        ...

    @property
    def dim(self) -> int:
        """The length of each vector."""
        ...

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        """One unit vector per text, in order."""
        ...


def _check_texts(texts: Sequence[str]) -> list[str]:
    if isinstance(texts, str):
        raise EmbeddingError("embed takes a sequence of texts, not one string")
    out = []
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise EmbeddingError(f"text {i} is {type(t).__name__}, expected str")
        out.append(t[:MAX_TEXT])
    return out


def _unit(rows: Any) -> list[list[float]]:
    m = np.asarray(rows, dtype=np.float32)
    norms = np.linalg.norm(m, axis=1, keepdims=True)
    norms[norms == 0] = 1.0
    return (m / norms).tolist()  # type: ignore[no-any-return]


def fit_dim(vector: Sequence[float], dim: int) -> list[float]:
    """``vector`` as ``dim`` floats: zero-padded when shorter (cosine unchanged).

    Raises:
        EmbeddingError: the vector is longer than the column.
    """
    if len(vector) > dim:
        raise EmbeddingError(
            f"an embedding of {len(vector)} dims does not fit the library's vector({dim}) column; "
            "migrate with a larger embedding_dim or choose a smaller model"
        )
    return [float(x) for x in vector] + [0.0] * (dim - len(vector))


class WordLlamaEmbedder:
    """The offline default: WordLlama ``l2_supercat`` (256 dims) from the installed wheel.

    Loads lazily (about 0.5 s, once per instance; thread-safe) and embeds a short text in about
    40 µs on one core."""

    def __init__(self, *, config: str = "l2_supercat", dim: int = 256) -> None:
        self._config = config
        self._dim = dim
        self._model: Any = None
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return f"wordllama/{self._config}_{self._dim}"

    @property
    def dim(self) -> int:
        return self._dim

    def _load(self) -> Any:
        with self._lock:
            if self._model is not None:
                return self._model
            try:
                import wordllama  # noqa: PLC0415 - 0.3 s; only when first used
                from safetensors import safe_open  # noqa: PLC0415
                from tokenizers import Tokenizer  # noqa: PLC0415
                from wordllama.inference import WordLlamaInference  # noqa: PLC0415
            except ImportError as e:
                raise EmbeddingError(
                    f"the offline embedder needs the 'wordllama' package: {e}"
                ) from e
            root = Path(wordllama.__file__).resolve().parent
            weights = root / "weights" / f"{self._config}_{self._dim}.safetensors"
            tokenizer = root / "tokenizers" / f"{self._config}_tokenizer_config.json"
            for f in (weights, tokenizer):
                if not f.is_file():
                    raise EmbeddingError(
                        f"the wordllama package has no {f.name} (looked in {f.parent}); "
                        "reinstall wordllama"
                    )
            with safe_open(str(weights), framework="np", device="cpu") as fh:
                matrix = fh.get_tensor("embedding.weight")
            self._model = WordLlamaInference(matrix, Tokenizer.from_file(str(tokenizer)))
            return self._model

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        items = _check_texts(texts)
        if not items:
            return []
        return _unit(self._load().embed(items, norm=True))


@functools.cache
def default_embedder() -> WordLlamaEmbedder:
    """The process's one offline embedder (loaded on first use, then shared)."""
    return WordLlamaEmbedder()


class LiteLLMEmbedder:
    """A hosted or local-server model through ``litellm.embedding``.

    Args:
        model: the litellm model name (``openai/text-embedding-3-small``,
            ``ollama/nomic-embed-text``, ``openai/<name>`` with ``api_base`` for a local
            OpenAI-compatible server, …).
        dim: the length the model returns (checked on every answer); None: learnt from the
            model's first answer (``dim`` asks it once, embedding a short probe text).
        api_base: a local server's URL, when not the provider's default.
        api_key: the provider's key (never logged; ``"none"`` is sent when unset, as local
            servers want some key).
        embedding: the function to call (``litellm.embedding`` unless given).
    """

    #: what ``dim`` embeds to learn an unknown length
    PROBE = "countersign embedding check"

    def __init__(
        self,
        model: str,
        *,
        dim: int | None = None,
        api_base: str | None = None,
        api_key: str | None = None,
        embedding: Callable[..., Any] | None = None,
        timeout_s: float = 10.0,
    ) -> None:
        if not model:
            raise EmbeddingError("an embedding model name is required")
        if dim is not None and dim < 1:
            raise EmbeddingError(f"embedding dim must be positive, got {dim}")
        self._model = model
        self._dim = dim
        self._api_base = api_base
        self._api_key = api_key
        self._embedding = embedding
        self._timeout_s = timeout_s

    def __repr__(self) -> str:  # never show the key
        return (
            f"LiteLLMEmbedder(model={self._model!r}, dim={self._dim}, api_base={self._api_base!r})"
        )

    @property
    def name(self) -> str:
        return f"litellm/{self._model}"

    @property
    def dim(self) -> int:
        if self._dim is None:
            self._dim = len(self._call([self.PROBE], expect=None)[0])
        return self._dim

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        items = _check_texts(texts)
        if not items:
            return []
        return _unit(self._call(items, expect=self.dim))

    def _call(self, items: list[str], *, expect: int | None) -> list[list[float]]:
        call = self._embedding
        if call is None:
            # never fetch litellm's model price list from the internet at import
            os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")
            try:
                import litellm  # noqa: PLC0415 - optional dependency
            except ImportError as e:
                raise EmbeddingError(
                    "COUNTERSIGN_EMBEDDING_MODEL needs litellm: pip install 'countersign[llm]'"
                ) from e
            call = litellm.embedding
        kwargs: dict[str, Any] = {
            "model": self._model,
            "input": items,
            "timeout": self._timeout_s,
            "api_key": self._api_key or "none",
        }
        if self._api_base:
            kwargs["api_base"] = self._api_base
        try:
            answer = call(**kwargs)
        except Exception as e:  # litellm raises many provider-specific types
            raise EmbeddingUnavailableError(
                f"embedding model {self._model!r} failed: {type(e).__name__}"
            ) from e
        data = answer["data"] if isinstance(answer, dict) else getattr(answer, "data", None)
        if not isinstance(data, list) or len(data) != len(items):
            raise EmbeddingError(
                f"embedding model {self._model!r} answered {0 if not isinstance(data, list) else len(data)} "
                f"vectors for {len(items)} texts"
            )
        rows = []
        for i, d in enumerate(data):
            vec = d["embedding"] if isinstance(d, dict) else getattr(d, "embedding", None)
            if not isinstance(vec, list) or not vec or (expect is not None and len(vec) != expect):
                got = len(vec) if isinstance(vec, list) else type(vec).__name__
                raise EmbeddingError(
                    f"embedding model {self._model!r}: vector {i} has {got} dims, "
                    f"expected {expect if expect is not None else 'at least 1'}"
                )
            rows.append(vec)
        return rows


def configured_embedder(settings: Settings) -> Embedder:
    """The embedder a process's settings choose: ``LiteLLMEmbedder`` when
    ``embedding_model`` is set (with ``embedding_api_base``, ``embedding_api_key``,
    ``embedding_dim``), else the shared offline :func:`default_embedder`. No I/O: a composition
    root checks it against the database at start (``PlanLibrary.check_embedder``)."""
    if not settings.embedding_model:
        return default_embedder()
    key = settings.embedding_api_key
    return LiteLLMEmbedder(
        settings.embedding_model,
        dim=settings.embedding_dim,
        api_base=settings.embedding_api_base,
        api_key=key.get_secret_value() if key is not None else None,
    )
