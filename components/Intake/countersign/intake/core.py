"""Chat text → an intent and its entities, deterministically (no I/O, no wall clock).

Which intent: BM25 (``rank-bm25``) over each registry intent's name, title, description and
examples, after spelling repair against the registry's own vocabulary (``difflib``); below the
threshold it asks which one was meant. Entities by the types the registry declares, each with the
words that gave it (``entities.py``; windows of time in ``when.py``, resolved in the caller's time
zone from ``received_at``). Whatever a required entity still lacks becomes the registry's question
(the readiness gate). With a proposer (a model), its checked proposal decides the intent instead
(Intake SPEC, "An LLM proposer seam").
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from zoneinfo import ZoneInfo

from rank_bm25 import BM25Okapi

from countersign.kernel import InputError
from countersign.registry import IntentSpec, Registry

from .entities import extract, warm
from .models import Contact, Explained, Need, Understanding
from .proposer import IntentProposer, ProposalError, catalogue, check_proposal
from .refusals import LEAD, refuser
from .words import COMMON, repair_entity_words, stem, tokens

__all__ = ["Contact", "Explained", "Intake", "Need", "Understanding", "tokens"]


@dataclass(frozen=True)
class _Decided:
    """The intent a message is about, who decided it, and what a model proposed for it."""

    intent: str
    confidence: float
    source: str
    seeded: Mapping[str, Any]


class Intake:
    """Understands chat text against one registry (build once; ``understand`` per message)."""

    def __init__(
        self, registry: Registry, *, threshold: float = 0.5, min_score: float = 1.3
    ) -> None:
        """``threshold``: the Policy's ``intake_threshold`` (0..1) — an intent understood with
        less confidence than this, by the ranking or by a model, is asked about, not planned."""
        if not 0.0 <= threshold <= 1.0:  # NaN fails both comparisons
            raise InputError(
                f"Intake: the confidence threshold must be within 0..1, got {threshold!r}"
            )
        self.registry = registry
        self.threshold = threshold
        #: below this BM25 score nothing in the registry matches: answer with what it can do
        self.min_score = min_score
        self.names = sorted(registry.intents)
        docs = []
        for name in self.names:
            spec = registry.intents[name]
            # what people say (the examples) ranks; the name and title say what the intent is
            # (the description talks of steps and gates, words people do not use)
            text = " ".join([name.replace("_", " "), spec.title, *spec.examples])
            docs.append([stem(t) for t in tokens(text)])
        self.vocabulary = sorted({t for d in docs for t in d})
        self._family = {n: registry.intents[n].steps[0].uses for n in self.names}
        #: the words each intent's examples lead with ("find", "schedule", "watch")
        self._leads = {n: {_lead(e) for e in registry.intents[n].examples} for n in self.names}
        self.bm25 = BM25Okapi(docs)
        warm()  # the place index, once per process, at build time rather than mid-message
        #: what a proposer may know of the registry (names, titles, entities; nothing else)
        self.catalogue = catalogue(registry)

    # ---- which intent ---------------------------------------------------------------------------
    def rank(self, text: str) -> list[tuple[str, float]]:
        """Intents by score (best first) and the top one's share of the scores (confidence)."""
        words = []
        for t in tokens(text):
            s = stem(t)
            # repair misspellings of the registry's words, never a short or common word into
            # one ("what" is not "watch")
            if s not in self.vocabulary and len(s) > 4 and "@" not in s and s not in COMMON:
                close = difflib.get_close_matches(s, self.vocabulary, n=1, cutoff=0.8)
                s = close[0] if close else s
            words.append(s)
        scores = self.bm25.get_scores(words)
        return sorted(
            ((n, float(sc)) for n, sc in zip(self.names, scores, strict=True)),
            key=lambda x: -x[1],
        )

    def understand(
        self,
        text: str,
        *,
        received_at: datetime,
        tz: str = "UTC",
        contacts: Sequence[Contact] = (),
        intent: str | None = None,
        known: Mapping[str, Any] | None = None,
        proposer: IntentProposer | None = None,
        me: Contact | None = None,
    ) -> Understanding:
        """Read one message (``intent`` and ``known`` carry what earlier turns settled). With a
        ``proposer`` (a model), its checked proposal decides the intent and seeds the entities;
        an invalid answer is asked again once, then the deterministic path answers."""
        ranked = self.rank(text)
        refusal = refuser().check(text, [self.registry.intents[n].title for n in self.names])
        if refusal is not None and (intent is None or refusal.kind == "hostile"):
            titles = [self.registry.intents[n].title for n in self.names]
            return Understanding(None, 0.0, ranked, {}, [], [], titles, refusal=refusal)
        decided = self._decide(text, ranked, intent, known or {}, received_at, tz, proposer)
        if isinstance(decided, Understanding):
            return decided
        spec = self.registry.intents[decided.intent]
        entities: dict[str, Any] = dict(known or {})
        explained: list[Explained] = []
        for name, value in decided.seeded.items():
            if name not in entities:
                entities[name] = value
                explained.append(Explained(name, value, "proposed by the model"))
        local = received_at.astimezone(ZoneInfo(tz))
        needs = _read_entities(
            spec, text, local, contacts, entities, explained, me, follow_up=intent is not None
        )
        if intent is not None:  # an earlier turn settled the intent and asked
            _take_reply(spec, text, entities, explained, needs)
        for ent in spec.required:
            if ent.name not in entities and not any(n.entity == ent.name for n in needs):
                needs.append(Need(ent.name, ent.question))
        return Understanding(
            decided.intent, decided.confidence, ranked, entities, explained, needs,
            source=decided.source,
        )  # fmt: skip

    def _decide(
        self,
        text: str,
        ranked: list[tuple[str, float]],
        intent: str | None,
        known: Mapping[str, Any],
        received_at: datetime,
        tz: str,
        proposer: IntentProposer | None,
    ) -> _Decided | Understanding:
        """Which intent: the model's checked proposal if there is one (it never changes an
        intent an earlier turn settled), else the one settled, else the ranking's. An
        ``Understanding`` when it must ask (or nothing fits) instead."""
        confidence = self._confidence(ranked)
        source = "deterministic"
        if proposer is not None:
            proposal, why = self._propose(proposer, text, known, received_at, tz)
            if proposal is None:
                source = f"deterministic (the model's answer was refused: {why})"
            elif (p_intent := proposal[0]) is not None and intent in (None, p_intent):
                _, p_entities, p_conf = proposal
                if p_conf < self.threshold and intent is None:
                    title = self.registry.intents[p_intent].title
                    return Understanding(
                        None, p_conf, ranked, {}, [],
                        [Need("intent", f"Did you mean: {title}?", options=[p_intent])],
                        source="model",
                    )  # fmt: skip
                return _Decided(p_intent, p_conf, "model", p_entities)
        if intent is not None:
            return _Decided(intent, confidence, source, {})
        named = self._named(text)
        if named is not None:  # the answer to "which did you mean", or the intent named outright
            return _Decided(named, 1.0, source, {})
        return self._by_rank(text, ranked, confidence, source)

    def _sibling(self, text: str, ranked: list[tuple[str, float]]) -> str:
        """The ranking's best intent, unless the message leads with a verb that only one of
        its siblings' examples lead with ("schedule an hour with …" is scheduling even where
        the words after it rank finding first)."""
        best = ranked[0][0]
        lead = _lead(text)
        siblings = [n for n, _ in ranked if self._family[n] == self._family[best]]
        led = [n for n in siblings if lead in self._leads[n]]
        return led[0] if len(led) == 1 else best

    def _named(self, text: str) -> str | None:
        """The one intent whose title or name the text says ("Find a meeting time and book
        it", "schedule_meeting"): how a person answers "Which did you mean"."""
        low = text.lower()
        said = [n for n in self.names if n in low or self.registry.intents[n].title.lower() in low]
        return said[0] if len(said) == 1 else None

    def _confidence(self, ranked: list[tuple[str, float]]) -> float:
        """The top intent's family's share of the scores: intents whose first step uses the
        same connector (find / schedule a meeting; book / watch a visa slot) are siblings, and a
        close call between siblings is no doubt about what the person wants done."""
        if not ranked:
            return 0.0
        total = sum(max(s, 0.0) for _, s in ranked) or 1.0
        family = self._family[ranked[0][0]]
        return sum(max(s, 0.0) for n, s in ranked if self._family[n] == family) / total

    def _by_rank(
        self, text: str, ranked: list[tuple[str, float]], confidence: float, source: str
    ) -> _Decided | Understanding:
        """The ranking's best intent; below ``min_score`` what the registry can do, below the
        threshold a question naming the close candidates."""
        top = ranked[0][1] if ranked else 0.0
        if top < self.min_score:
            return Understanding(
                None, 0.0, ranked, {}, [], [],
                can_do=[self.registry.intents[n].title for n in self.names],
            )  # fmt: skip
        if confidence < self.threshold:
            close = [n for n, s in ranked[:3] if s >= top * 0.6]
            titles = [self.registry.intents[n].title for n in close]
            question = (
                f"Did you mean: {titles[0]}?"
                if len(titles) == 1
                else "Which did you mean: " + "; ".join(titles) + "?"
            )
            return Understanding(
                None, confidence, ranked, {}, [], [Need("intent", question, options=close)]
            )
        return _Decided(self._sibling(text, ranked), confidence, source, {})

    def _propose(
        self,
        proposer: IntentProposer,
        text: str,
        known: Mapping[str, Any],
        received_at: datetime,
        tz: str,
    ) -> tuple[tuple[str | None, dict[str, Any], float] | None, str]:
        """The proposer's checked answer, asked at most twice; or None and why not."""
        why = ""
        for _ in range(2):
            try:
                raw = proposer.propose(
                    text,
                    catalogue=self.catalogue,
                    known=dict(known),
                    received_at=received_at,
                    tz=tz,
                )
                return check_proposal(raw, self.registry), ""
            except ProposalError as e:
                why = str(e)
            except Exception as e:
                why = f"the model failed ({type(e).__name__})"
        return None, why


def _read_entities(
    spec: IntentSpec,
    text: str,
    local: datetime,
    contacts: Sequence[Contact],
    entities: dict[str, Any],
    explained: list[Explained],
    me: Contact | None = None,
    *,
    follow_up: bool = False,
) -> list[Need]:
    """Each declared entity not yet known, read from ``text`` into ``entities`` and
    ``explained``; the questions an ambiguous reading raised. In a follow-up turn that leaves
    one required entity to answer, the text is read as its answer (a bare "30" is the budget)."""
    needs: list[Need] = []
    fixed = repair_entity_words(text)
    missing = [e.name for e in spec.required if e.name not in entities]
    for ent in [*spec.required, *spec.optional]:
        if ent.name in entities:
            continue
        # dates, lengths and places read the repaired text; titles and queries as written
        source_text = (
            fixed if ent.type in {"datetime", "integer"} or ent.name == "consulate" else text
        )
        got = extract(
            ent.name, ent.type, source_text, local, contacts, me,
            currency=ent.currency, asked=follow_up and missing == [ent.name],
        )  # fmt: skip
        if isinstance(got, Need):
            needs.append(got)
        elif got is not None:
            value, words = got
            entities[ent.name] = value
            explained.append(Explained(ent.name, value, words))
    return needs


def _take_reply(
    spec: IntentSpec,
    text: str,
    entities: dict[str, Any],
    explained: list[Explained],
    needs: list[Need],
) -> None:
    """A reply in a conversation that was asked for one free-text value is that value ("Which
    country?" → "PT"), when nothing else in it was understood (Intake LLD)."""
    missing = [e for e in spec.required if e.name not in entities]
    if len(missing) != 1 or missing[0].type != "string" or explained:
        return
    answer = text.strip().strip(".!?").strip()
    if 0 < len(answer) <= 200 and not any(n.entity == missing[0].name for n in needs):
        entities[missing[0].name] = answer
        explained.append(Explained(missing[0].name, answer, answer))


def _lead(text: str) -> str:
    """The first word of a message after politeness ("please", "can you"), stemmed."""
    words = tokens(LEAD.sub("", text.lower().strip()))
    return stem(words[0]) if words else ""
