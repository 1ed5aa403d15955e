"""The words Intake reads: tokens for ranking, number words, and the repair of misspelt date and
entity words (Intake LLD, "Misspellings"). Pure tables and functions; no I/O."""

from __future__ import annotations

import difflib
import re

from countersign.kernel import ascii_digits

__all__ = [
    "COMMON",
    "MONTHS",
    "NUMBERS",
    "STOP",
    "WEEKDAYS",
    "number",
    "repair_entity_words",
    "stem",
    "tokens",
]

_WORD = re.compile(r"[a-z0-9@.\-+]+")
NUMBERS = {
    "a": 1, "an": 1, "one": 1, "two": 2, "three": 3, "four": 4, "five": 5, "six": 6,
    "seven": 7, "eight": 8, "nine": 9, "ten": 10, "twelve": 12, "fifteen": 15, "twenty": 20,
    "thirty": 30, "forty": 40, "forty-five": 45, "sixty": 60, "ninety": 90,
}  # fmt: skip
#: common words spelling repair leaves alone (close to registry words, but not misspellings)
COMMON = frozenset(
    [
        "which",
        "where",
        "there",
        "their",
        "these",
        "those",
        "about",
        "would",
        "could",
        "should",
        "please",
        "thanks",
        "think",
        "thing",
        "things",
        "other",
        "under",
        "after",
        "before",
        "since",
        "while",
        "whose",
    ]
)
WEEKDAYS = ["monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday"]
MONTHS = [
    "january", "february", "march", "april", "may", "june", "july", "august", "september",
    "october", "november", "december",
]  # fmt: skip
STOP = {
    "a",
    "an",
    "the",
    "with",
    "and",
    "for",
    "to",
    "me",
    "my",
    "i",
    "please",
    "of",
    "in",
    "on",
    "at",
    # words that say nothing of which intent is meant (they occur in descriptions too)
    "is", "are", "was", "be", "it", "its", "this", "that", "what", "who", "how", "can", "you",
    "your", "do", "does", "some", "any", "or", "by", "from", "as", "so", "if", "then", "when",
    "one", "we", "us", "our", "let", "lets", "let's", "want", "would", "like", "need",
    # small talk: no intent in it
    "thanks", "thank", "thx", "hi", "hello", "hey", "joke",
}  # fmt: skip


def tokens(text: str) -> list[str]:
    """The words Intake reads (lower case, stop words dropped; for ranking, explanations and
    tests)."""
    return [w.rstrip(".") for w in _WORD.findall(text.lower()) if w not in STOP]


def stem(word: str) -> str:
    """A light suffix stem (``-ing``, ``-es``, ``-s``) on words longer than four letters."""
    for suffix in ("ing", "es", "s"):
        if len(word) > 4 and word.endswith(suffix):
            return word[: -len(suffix)]
    return word


def number(word: str) -> int:
    """``word`` as a whole number: ASCII digits, or a number word ("two", "forty-five")."""
    return int(word) if ascii_digits(word) else NUMBERS[word.lower()]


#: the words entity extraction looks for, which misspellings are repaired to ("tomorow")
_ENTITY_WORDS = [
    "tomorrow", "today", "afternoon", "morning", "evening", "minutes", "hours", "consulate",
    "monday", "tuesday", "wednesday", "thursday", "friday", "saturday", "sunday", "weeks",
    *MONTHS,
]  # fmt: skip


def repair_entity_words(text: str) -> str:
    """``text`` with misspelt date and entity words repaired (difflib, cutoff 0.8; words of five
    letters or more; anything else untouched)."""

    def fix(m: re.Match[str]) -> str:
        word = m.group(0)
        low = word.lower()
        if len(low) < 5 or low in _ENTITY_WORDS:
            return word
        close = difflib.get_close_matches(low, _ENTITY_WORDS, n=1, cutoff=0.8)
        return close[0] if close else word

    return re.sub(r"[A-Za-z]+", fix, text)
