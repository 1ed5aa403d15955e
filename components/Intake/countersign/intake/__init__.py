"""Intake: chat text → an intent and its entities, deterministic by default (BM25 over the
registry's intents; typed entity extraction; the readiness gate's questions), with a seam for a
model that proposes the intent (``IntentProposer``; its answers are checked, then used)."""

from .core import Intake
from .models import Contact, Explained, Need, Refusal, Understanding
from .proposer import IntentProposer, Proposal, ProposalError, catalogue, check_proposal
from .revisions import change_request

__all__ = [
    "Contact",
    "Explained",
    "Intake",
    "IntentProposer",
    "Need",
    "Proposal",
    "ProposalError",
    "Refusal",
    "Understanding",
    "catalogue",
    "change_request",
    "check_proposal",
]
