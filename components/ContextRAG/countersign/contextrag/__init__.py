"""ContextRAG: a person's memory (preferences, consent, facts, contacts, outcome history) and
the tiered, consent-gated, 2 KB evidence list the Planner reads (GLOBAL_SPEC §3)."""

from .core import (
    MAX_EVIDENCE_BYTES,
    PREF_ALIASES,
    TIER_RANK,
    history_items,
    pref_items,
    relevant_items,
    select_evidence,
)
from .forgetting import ANONYMIZED, FORGET_ACTOR, USER_TABLES, ForgetChangedError, ForgetTargets
from .models import ContactIn, FactIn, ForgetRequest, MemoryItem, MemoryWrite, PrefsUpdate
from .store import ExecutionEraser, ExemplarSource, MemoryStore, record_history

__all__ = [
    "ANONYMIZED",
    "FORGET_ACTOR",
    "MAX_EVIDENCE_BYTES",
    "PREF_ALIASES",
    "TIER_RANK",
    "USER_TABLES",
    "ContactIn",
    "ExecutionEraser",
    "ExemplarSource",
    "FactIn",
    "ForgetChangedError",
    "ForgetRequest",
    "ForgetTargets",
    "MemoryItem",
    "MemoryStore",
    "MemoryWrite",
    "PrefsUpdate",
    "history_items",
    "pref_items",
    "record_history",
    "relevant_items",
    "select_evidence",
]
