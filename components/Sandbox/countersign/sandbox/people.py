"""The sandbox's demo people as contacts chat text may name ("find 30 minutes with Alice and Bob").

They are the people whose calendars the sandbox CalDAV server holds (``core.DEMO_PEOPLE``): the
sandbox stack (``countersign up``) and the tests hand them to the API as its contacts; a
deployment on real providers starts with none (Api SPEC, Not yet: each person's own contacts).
"""

from __future__ import annotations

from .core import DEMO_PEOPLE

__all__ = ["SANDBOX_CONTACTS"]

#: ``(name, e-mail)`` of each demo person: "Alice" for alice@example.com
SANDBOX_CONTACTS: tuple[tuple[str, str], ...] = tuple(
    (email.split("@")[0].title(), email) for email in DEMO_PEOPLE
)
