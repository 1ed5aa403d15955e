"""Embeddings through litellm when configured (issue 15.4): ``COUNTERSIGN_EMBEDDING_*`` settings
select ``LiteLLMEmbedder``; litellm really calls a local OpenAI-compatible ``/v1/embeddings``
server the test starts (``FakeEmbeddings``); the vectors land in the real pgvector column and
retrieval uses them; a model whose vectors do not fit the column, or are not of the declared
length, stops the entry point at start with an error naming both lengths."""

from __future__ import annotations

import math
from collections.abc import Iterator
from datetime import UTC, datetime

import pytest
from pydantic import SecretStr
from sqlalchemy import text

from countersign.kernel import Settings
from countersign.planlibrary import (
    EmbeddingError,
    LibraryEntry,
    LiteLLMEmbedder,
    WordLlamaEmbedder,
    configured_embedder,
    default_embedder,
)
from countersign.planlibrary.testing import FakeEmbeddings, bag_of_words
from countersign.planwriter import PlanWriter
from countersign.storage import Database

T = datetime(2026, 11, 25, 12, tzinfo=UTC)
KEY = "sk-test-embedding-key-0123"


@pytest.fixture
def model() -> Iterator[FakeEmbeddings]:
    server = FakeEmbeddings(dim=64)
    try:
        yield server
    finally:
        server.close()


def _settings(server: FakeEmbeddings, **more: object) -> Settings:
    return Settings(
        embedding_model="openai/fake-embed",
        embedding_api_base=server.base,
        embedding_api_key=SecretStr(KEY),
        **more,  # type: ignore[arg-type]
    )


def test_unconfigured_is_the_offline_default() -> None:
    chosen = configured_embedder(Settings(embedding_model=None))
    assert chosen is default_embedder() and isinstance(chosen, WordLlamaEmbedder)


def test_configured_model_is_called_through_litellm(db: Database, model: FakeEmbeddings) -> None:
    writer = PlanWriter.for_settings(db, _settings(model), clock=lambda: T)
    embedder = writer.library.embedder
    assert isinstance(embedder, LiteLLMEmbedder) and embedder.name == "litellm/openai/fake-embed"
    assert KEY not in repr(embedder)
    # the start-up check asked the model (its length was not declared): the probe, then a check
    assert embedder.dim == 64 and len(model.requests) == 2
    first = model.requests[0]
    assert first["path"] == "/v1/embeddings" and first["body"]["model"] == "fake-embed"
    assert first["authorization"] == f"Bearer {KEY}"

    lib = writer.library
    entries = {
        "01JDR8Z9Y0000000000000000A": "dentist appointment on thursday morning",
        "01JDR8Z9Y0000000000000000B": "buy milk and bread at the grocery shop",
    }
    vectors = lib.embed(list(entries.values()))
    assert model.requests[-1]["body"]["input"] == list(entries.values())
    with db.tx() as c:
        for (pid, body), vec in zip(entries.items(), vectors, strict=True):
            lib.upsert(
                c,
                LibraryEntry(plan_id=pid, user_id="u1", intent="note", text=body, created_at=T),
                vector=vec,
            )
        stored = c.execute(
            text("SELECT embedding::text FROM plan_library WHERE plan_id = :p"),
            {"p": "01JDR8Z9Y0000000000000000A"},
        ).scalar_one()
    # what the column holds is the model's vector, unit length, padded with zeros to vector(384)
    got = [float(x) for x in stored.strip("[]").split(",")]
    raw = bag_of_words(entries["01JDR8Z9Y0000000000000000A"], 64)
    norm = math.sqrt(sum(x * x for x in raw))
    assert len(got) == lib.column_dim() == 384 and got[64:] == [0.0] * 320
    assert got[:64] == pytest.approx([x / norm for x in raw], abs=1e-6)

    # retrieval embeds the query through the model too and finds the plan sharing its words
    before = len(model.requests)
    ranked = lib.retrieve("u1", "dentist on thursday", channels=("vector",))
    assert ranked[0].entry.plan_id == "01JDR8Z9Y0000000000000000A"
    assert model.requests[before]["body"]["input"] == ["dentist on thursday"]


def test_a_model_longer_than_the_column_stops_the_start(db: Database) -> None:
    wide = FakeEmbeddings(dim=1024)
    try:
        with pytest.raises(EmbeddingError) as e:
            PlanWriter.for_settings(db, _settings(wide), clock=lambda: T)
    finally:
        wide.close()
    msg = e.value.message
    assert "1024 dims" in msg and "vector(384)" in msg and "openai/fake-embed" in msg, msg
    assert KEY not in msg


def test_a_declared_length_the_model_does_not_answer_stops_the_start(
    db: Database, model: FakeEmbeddings
) -> None:
    with pytest.raises(EmbeddingError) as e:
        PlanWriter.for_settings(db, _settings(model, embedding_dim=128), clock=lambda: T)
    assert "64 dims" in e.value.message and "128" in e.value.message, e.value.message
    # declared too long for the column: refused before the model is asked at all
    asked = len(model.requests)
    with pytest.raises(EmbeddingError, match=r"returns 4096 dims.*vector\(384\)"):
        PlanWriter.for_settings(db, _settings(model, embedding_dim=4096), clock=lambda: T)
    assert len(model.requests) == asked
