"""Intake: chat text → an intent and its entities, deterministic by default (BM25 over the
registry's intents; typed entity extraction; the readiness gate's questions)."""

from .core import Contact, Explained, Intake, Need, Understanding

__all__ = ["Contact", "Explained", "Intake", "Need", "Understanding"]
