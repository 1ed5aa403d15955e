"""PlanRetrieval's pure core and the embedding providers (no database)."""

from __future__ import annotations

import socket
import string
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from countersign.kernel import Evidence, Policy, RetrievalWeights
from countersign.planlibrary import (
    Bm25Index,
    Candidate,
    EmbeddingError,
    EmbeddingUnavailableError,
    LibraryEntry,
    LiteLLMEmbedder,
    WordLlamaEmbedder,
    fit_dim,
    meaningful,
    merge,
    rank,
    terms,
    to_evidence,
)

NOW = datetime(2026, 11, 25, tzinfo=UTC)


def _entry(n: int, **kw: Any) -> LibraryEntry:
    base: dict[str, Any] = {
        "plan_id": f"01J{n:023d}",
        "user_id": "u",
        "intent": "book_visa_slot",
        "text": f"plan {n}",
        "created_at": NOW - timedelta(days=100),
    }
    return LibraryEntry(**(base | kw))


def test_terms_are_tsquery_safe_words_without_stop_words() -> None:
    assert terms("Book a visa at the LISBON consulate, please! visa") == [
        "book",
        "visa",
        "lisbon",
        "consulate",
    ]
    # operators and quotes never survive, so a term can go into to_tsquery as it is
    assert terms("a & !bob | cat:* 'dog' <-> (eel)") == ["bob", "cat", "dog", "eel"]
    assert len(terms(" ".join(f"w{i}" for i in range(100)))) == 32


def test_rank_scales_channels_and_orders_by_hybrid_score() -> None:
    a = Candidate(entry=_entry(1), lexical=4.0, cosine=0.50, matched=("lisbon",))
    b = Candidate(entry=_entry(2), lexical=1.0, cosine=0.90, matched=("visa",))
    c = Candidate(entry=_entry(3), lexical=0.0, cosine=0.40)
    w = RetrievalWeights(success=0.0, recency=0.0, min_score=0.0)
    got = rank([a, b, c], weights=w, now=NOW)
    # min-max: a has the best lexical (1.0) and vector 0.2; b lexical 0.25 and vector 1.0
    assert [r.entry.plan_id for r in got] == [b.entry.plan_id, a.entry.plan_id, c.entry.plan_id]
    assert got[0].parts["vector"] == 1.0 and got[-1].parts["bm25"] == 0.0
    only_lex = rank([a, b, c], weights=w.model_copy(update={"vector": 0.0}), now=NOW)
    assert only_lex[0].entry.plan_id == a.entry.plan_id
    assert len(rank([a, b, c], weights=w, now=NOW, top_k=2)) == 2
    # min_score drops the weakest
    assert c.entry.plan_id not in {
        r.entry.plan_id
        for r in rank([a, b, c], weights=w.model_copy(update={"min_score": 0.1}), now=NOW)
    }


def test_success_and_recency_break_ties() -> None:
    good = _entry(1, success_count=9, failure_count=0, last_used_at=NOW - timedelta(days=1))
    bad = _entry(2, success_count=0, failure_count=9, last_used_at=NOW - timedelta(days=300))
    cands = [Candidate(entry=e, lexical=1.0, cosine=0.7) for e in (bad, good)]
    got = rank(cands, weights=RetrievalWeights(min_score=0.0), now=NOW)
    assert got[0].entry.plan_id == good.plan_id
    assert got[0].parts["success"] == pytest.approx(10 / 11, abs=1e-3)
    assert got[1].parts["recency"] < 0.01


def test_why_sentence_and_exemplar_evidence() -> None:
    e = _entry(7, success_count=3, failure_count=1, last_used_at=NOW - timedelta(days=2))
    ranked = rank(
        [Candidate(entry=e, lexical=2.0, cosine=0.81, matched=("book", "lisbon", "visa"))],
        weights=RetrievalWeights(),
        now=NOW,
    )
    # the intent's own words ("book", "visa") are not news: only what else it shares is said
    assert ranked[0].why == (
        "A book visa slot plan like this one ran 4 times, 3 of 4 successfully, last 2 days ago; "
        "it shares lisbon with this request (similarity 0.81)."
    )
    (ev,) = to_evidence(ranked)
    assert isinstance(ev, Evidence) and ev.type == "exemplar" and ev.key == e.plan_id
    assert ev.source_ref == f"plan_library:{e.plan_id}"
    assert ev.why == ranked[0].why and "{" not in ev.why
    assert isinstance(ev.value, dict) and ev.value["last_used_at"] == "2026-11-23T00:00:00.000Z"
    assert ev.value["matched"] == ["book", "lisbon", "visa"] and ev.value["successes"] == 3
    # a lone candidate has the best hybrid score of its query (~1); its confidence is its
    # similarity, an absolute measure
    assert ranked[0].score > 0.85 and ev.confidence == 0.81


def test_one_run_is_said_as_one_run() -> None:
    ok = _entry(1, success_count=1, last_used_at=NOW - timedelta(days=1))
    bad = _entry(2, failure_count=1, last_used_at=NOW)
    new = _entry(3)
    whys = {
        r.entry.plan_id: r.why
        for r in rank(
            [Candidate(entry=x, cosine=0.5) for x in (ok, bad, new)],
            weights=RetrievalWeights(min_score=0.0),
            now=NOW,
        )
    }
    assert "ran yesterday and succeeded" in whys[ok.plan_id]
    assert "ran today and failed" in whys[bad.plan_id]
    assert "was made 100 days ago and has not run" in whys[new.plan_id]
    assert all("runs succeeded" not in w and "/" not in w for w in whys.values())


def test_a_lone_candidate_matched_on_nothing_meaningful_is_not_confident() -> None:
    """The card showed 0.99 for a plan matched on "00": the score is relative (a lone candidate
    scores ~1), so confidence is the similarity; a plan found without a vector gets at most
    0.5."""
    e = _entry(1)
    far = rank([Candidate(entry=e, lexical=0.1, cosine=0.2)], weights=RetrievalWeights(), now=NOW)
    assert far[0].score > 0.45 and to_evidence(far)[0].confidence == 0.2
    lex_only = rank([Candidate(entry=e, lexical=0.3)], weights=RetrievalWeights(), now=NOW)
    assert to_evidence(lex_only)[0].confidence <= 0.5


def test_numbers_times_dates_and_short_tokens_are_never_terms() -> None:
    assert terms("meeting 30 min 2027 at 00:00") == ["meeting"]
    assert terms("Sync with Bob on 3 Nov 2027 at 9am, 15th, 30min, next Monday, UTC") == [
        "sync",
        "bob",
    ]
    assert terms("bob@example.com") == ["bob", "example"]
    assert not meaningful("00") and not meaningful("2027") and not meaningful("ok")
    assert meaningful("ps5") and meaningful("lisbon")
    # the in-memory index never matches on them either
    doc = _entry(1, text="schedule meeting 30 min 2027 00 00")
    assert Bm25Index([doc]).search("visa 30 2027 00", 5) == []
    numbers = _entry(2, text="30 00 2027 at 9am")
    assert Bm25Index([numbers]).search("meeting 30 min 2027 at 00:00", 5) == []
    visa = _entry(3, text="book visa slot lisbon")
    index = Bm25Index([numbers, doc, visa])
    assert [c.entry.plan_id for c in index.search("meeting 30", 5)] == [doc.plan_id]


@settings(max_examples=200, deadline=None)
@given(st.text(alphabet=string.ascii_letters + string.digits + " :-/.,@", max_size=80))
def test_no_term_is_a_number_a_short_token_or_a_stop_word(text: str) -> None:
    got = terms(text)
    assert len(got) == len(set(got)) <= 32
    for t in got:
        assert len(t) > 2 and not ("0" <= t[0] <= "9") and meaningful(t)
        assert t.isascii() and t.isalnum() and t == t.lower()


def test_merge_keeps_one_candidate_per_plan_with_both_scores() -> None:
    lex = [Candidate(entry=_entry(1), lexical=2.0, matched=("x",))]
    vec = [Candidate(entry=_entry(1), cosine=0.5), Candidate(entry=_entry(2), cosine=0.4)]
    got = {c.entry.plan_id: c for c in merge(lex, vec)}
    assert len(got) == 2 and got[_entry(1).plan_id].cosine == 0.5
    assert got[_entry(1).plan_id].matched == ("x",)


def test_default_retrieval_weights_keep_the_policy_version() -> None:
    p = Policy()
    assert "retrieval" not in p.to_json()
    changed = Policy(retrieval=RetrievalWeights(bm25=0.9))
    assert changed.to_json()["retrieval"]["bm25"] == 0.9 and changed.version != p.version
    with pytest.raises(ValueError, match="at least one retrieval weight"):
        RetrievalWeights(bm25=0, vector=0, success=0, recency=0)


def test_fit_dim_pads_and_refuses_longer() -> None:
    assert fit_dim([1.0, 0.0], 4) == [1.0, 0.0, 0.0, 0.0]
    with pytest.raises(EmbeddingError, match=r"5 dims does not fit .*vector\(4\)"):
        fit_dim([0.1] * 5, 4)


def test_offline_embedder_reads_the_wheel_and_never_opens_a_socket(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def refuse(*a: Any, **k: Any) -> None:
        raise AssertionError("the offline embedder tried the network")

    monkeypatch.setattr(socket, "getaddrinfo", refuse)
    monkeypatch.setattr(socket.socket, "connect", refuse)
    emb = WordLlamaEmbedder()
    v = np.array(
        emb.embed(["book a visa slot in lisbon", "order a laptop", "buy a notebook computer"])
    )
    assert v.shape == (3, 256) and emb.dim == 256 and emb.name == "wordllama/l2_supercat_256"
    assert np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-5)
    assert float(v[1] @ v[2]) > float(v[0] @ v[1])  # laptop is nearer a notebook computer
    assert emb.embed([]) == []
    with pytest.raises(EmbeddingError, match="sequence of texts"):
        emb.embed("one string")


def test_litellm_embedder_checks_shapes_and_maps_failures() -> None:
    calls: list[dict[str, Any]] = []

    def fake(**kw: Any) -> dict[str, Any]:
        calls.append(kw)
        return {"data": [{"embedding": [3.0, 4.0]} for _ in kw["input"]]}

    emb = LiteLLMEmbedder(
        "ollama/nomic-embed-text", dim=2, api_base="http://127.0.0.1:11434", embedding=fake
    )
    assert np.allclose(emb.embed(["a", "b"]), [[0.6, 0.8], [0.6, 0.8]])
    assert calls[0]["model"] == "ollama/nomic-embed-text" and calls[0]["api_base"].endswith("11434")
    wrong = LiteLLMEmbedder("m", dim=3, embedding=fake)
    with pytest.raises(EmbeddingError, match="vector 0 has 2 dims, expected 3"):
        wrong.embed(["a"])

    def down(**kw: Any) -> Any:
        raise ConnectionError("refused")

    with pytest.raises(EmbeddingUnavailableError, match="failed: ConnectionError") as e:
        LiteLLMEmbedder("m", dim=2, embedding=down).embed(["a"])
    assert e.value.retryable
    with pytest.raises(EmbeddingError, match="model name is required"):
        LiteLLMEmbedder("", dim=2)
