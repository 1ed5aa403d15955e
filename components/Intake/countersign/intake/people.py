"""Who a meeting is with (Intake SPEC, "People"): e-mail addresses as written, and the person's
contacts by full or first name (never inside an e-mail address: "alice@example.com" does not also
name the contact Alice). A first name two contacts share asks which one; a capitalised name after
"with" / "and" that no contact has asks for that person's address. The person asking is an
attendee of their own meeting unless the text leaves them out ("without me"). Pure."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from .models import Contact, Need
from .words import MONTHS, WEEKDAYS

__all__ = ["EMAIL", "people"]

EMAIL = re.compile(r"\b[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}\b")
#: a capitalised word after "with" / "w/" / "and" / "&" / "+" / "," that may be a person's name
_NAMED = re.compile(
    r"(?:\bwith|\bw/|\bw|\band|&|\+|,|\bmeet|\binvite)\s+(?:Dr\.?\s+|Mr\.?\s+|Ms\.?\s+|Mrs\.?\s+)?"
    r"([A-ZÀ-ÖØ-ÞŁŚŻŹĆŃ][\w'-]+)"
)
#: capitalised words that are not people
_NOT_NAMES = {w.title() for w in [*WEEKDAYS, *MONTHS]} | {
    "I", "Me", "The", "My", "Our", "Team", "Everyone", "Candidate", "Berlin", "London", "Paris",
    "Today", "Tomorrow", "Next", "This", "Q1", "Q2", "Q3", "Q4", "Mon", "Tue", "Wed", "Thu",
    "Fri", "Sat", "Sun", "Tmrw", "Friday", "Him", "Her", "Them", "Us", "A", "An", "His",
}  # fmt: skip
_WITHOUT_ME = re.compile(r"\b(?:without me|not me|i won't be there|i will not attend)\b", re.I)


def people(text: str, contacts: Sequence[Contact], me: Contact | None = None) -> Any:
    """The attendees' addresses and the words that named them, a ``Need`` (which of two
    contacts; an unknown name's address), or None when the text names nobody."""
    emails = list(dict.fromkeys(EMAIL.findall(text)))
    words = list(emails)
    rest = EMAIL.sub(" ", text)
    low = rest.lower()
    taken: set[str] = set()
    for name, matches in _by_name(contacts, low):
        if len(matches) > 1:
            return Need(
                "participants",
                f"Which {name.title()} do you mean: "
                + " or ".join(f"{c.name} <{c.email}>" for c in matches)
                + "?",
                options=[c.email for c in matches],
            )
        taken.update(name.split())
        if matches[0].email not in emails:
            emails.append(matches[0].email)
            words.append(name.title())
    unknown = [n for n in _named(rest) if n.lower() not in taken]
    if unknown:
        return Need(
            "participants",
            f"I don't have an address for {' and '.join(unknown)}: what is their e-mail?",
        )
    if not emails:
        return None
    if me is not None and me.email not in emails and not _WITHOUT_ME.search(text):
        emails.append(me.email)
    return emails, ", ".join(words)


def _by_name(contacts: Sequence[Contact], low: str) -> list[tuple[str, list[Contact]]]:
    """Each contact name said in ``low`` (a full name before a first name; a first name the
    full names already took is not said again), with the contacts it may mean."""
    said: list[tuple[str, list[Contact]]] = []
    words = set(re.findall(r"[\w'-]+", low))  # a name is said only if its words are
    contacts = [c for c in contacts if c.name.split()[0].lower().strip(".,") in words]
    full = [c for c in contacts if " " in c.name and _says(low, c.name.lower())]
    for c in full:
        said.append((c.name.lower(), [c]))
    named = {w for c in full for w in c.name.lower().split()}
    by_first: dict[str, list[Contact]] = {}
    for c in contacts:
        by_first.setdefault(c.name.split()[0].lower(), []).append(c)
    for first, matches in by_first.items():
        if first not in named and _says(low, first):
            said.append((first, matches))
    return said


def _says(low: str, name: str) -> bool:
    return re.search(rf"(?<![\w@.]){re.escape(name)}(?![\w@])", low) is not None


def _named(text: str) -> list[str]:
    """Capitalised words where a person's name would stand ("with Dave", "and Łukasz")."""
    found = [m.group(1) for m in _NAMED.finditer(text)]
    return list(dict.fromkeys(n for n in found if n not in _NOT_NAMES and not n.isupper()))
