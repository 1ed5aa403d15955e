"""The API's composition root selects the embedder from settings (issue 15.4): with
``COUNTERSIGN_EMBEDDING_MODEL`` set, ``open_stack`` builds the PlanWriter, the PlanLibrary and
ContextRAG's exemplar source over ``LiteLLMEmbedder``, checked at start against the real
database's vector column; planning then asks the model (through litellm, over HTTP) for the
intent's vector. A model that does not fit the column stops ``open_stack``."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from pydantic import SecretStr

from countersign.api.stack import open_stack
from countersign.api.testing import ALICE
from countersign.kernel import Settings
from countersign.planlibrary import EmbeddingError, LiteLLMEmbedder
from countersign.planlibrary.testing import FakeEmbeddings
from countersign.storage import Database

KEY = "sk-test-embedding-key-0456"


@pytest.fixture
def model() -> Iterator[FakeEmbeddings]:
    server = FakeEmbeddings(dim=96)
    try:
        yield server
    finally:
        server.close()


def _settings(pg_url: str, home: Path, base: str) -> Settings:
    return Settings(
        home=home,
        embedding_model="openai/fake-embed",
        embedding_api_base=base,
        embedding_api_key=SecretStr(KEY),
        **{"DATABASE_URL": SecretStr(pg_url)},  # type: ignore[arg-type]
    )


def test_open_stack_plans_with_the_configured_model(
    db: Database, pg_url: str, tmp_path: Path, model: FakeEmbeddings
) -> None:
    stack = open_stack(_settings(pg_url, tmp_path / "home", model.base))
    try:
        services = stack.services
        writer = services.runtime.executor.plan_writer
        assert writer is not None
        library = writer.library
        assert isinstance(library.embedder, LiteLLMEmbedder)
        assert library.embedder.dim == 96 and services.memory.store.exemplars is library
        checked = len(model.requests)
        assert checked == 2  # the start-up probe and check

        day = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0)
        intent = services.planning.intent_from(
            {
                "intent": "schedule_meeting",
                "context_budget": 5,
                "entities": {
                    "participants": [ALICE],
                    "title": "Roadmap review",
                    "duration_min": 30,
                    "window_start": (day + timedelta(days=1, hours=13)).isoformat(),
                    "window_end": (day + timedelta(days=1, hours=18)).isoformat(),
                },
            },
            ALICE,
        )
        services.planning.plan(intent, ALICE)
        asked = model.requests[checked:]
        assert asked and all(r["authorization"] == f"Bearer {KEY}" for r in asked)
        assert any("roadmap" in str(r["body"]["input"]).lower() for r in asked), asked
    finally:
        if stack.services.reads is not None:
            stack.services.reads.close()


def test_open_stack_refuses_a_model_wider_than_the_column(
    db: Database, pg_url: str, tmp_path: Path
) -> None:
    wide = FakeEmbeddings(dim=1536)
    try:
        with pytest.raises(EmbeddingError, match=r"returns 1536 dims.*vector\(384\)"):
            open_stack(_settings(pg_url, tmp_path / "home", wide.base))
    finally:
        wide.close()
