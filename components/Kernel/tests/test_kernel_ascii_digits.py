"""``ascii_digits``: a number a person or a peer sends is ``0``–``9`` only (Kernel ``ids.py``).

``str.isdigit()`` holds for ``²`` (then ``int()`` raises: a 500) and for ``٣`` / ``０`` (then
``int()`` reads them: a second spelling of one number). The check here is the one the tree uses,
and the tree uses no other: no ``isdigit`` / ``isnumeric`` / ``isdecimal`` anywhere in the
components' code but in the helper itself.
"""

from __future__ import annotations

import re
import unicodedata
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from countersign.kernel import ascii_digits

ROOT = Path(__file__).resolve().parents[3]
UNICODE_DIGITS = [c for c in map(chr, range(0x110000)) if c.isdigit() and c not in "0123456789"]


def test_there_are_many_unicode_digits_and_none_passes() -> None:
    assert len(UNICODE_DIGITS) > 500  # ², ³, ٣, ０, ①, 𝟘 ...
    assert {"²", "٣", "０", "①", "𝟘", "߁", "৩"} <= set(UNICODE_DIGITS)
    assert not any(ascii_digits(c) for c in UNICODE_DIGITS)


@given(st.text(alphabet=st.sampled_from(UNICODE_DIGITS + list("0123456789")), min_size=1))
def test_ascii_digits_is_exactly_0_to_9(text: str) -> None:
    assert ascii_digits(text) == (re.fullmatch(r"[0-9]+", text) is not None)
    if ascii_digits(text):
        assert int(text) >= 0  # never raises


def test_empty_signed_and_spaced_numbers_are_not_digits() -> None:
    for text in [
        "",
        "+1",
        "-1",
        " 1",
        "1 ",
        "1_0",
        "1.0",
        "0x1",
        "١",
        unicodedata.lookup("SUPERSCRIPT TWO"),
    ]:
        assert not ascii_digits(text), text


def test_the_tree_checks_digits_only_through_the_helper() -> None:
    found = [
        f"{p.relative_to(ROOT)}:{n}"
        for p in sorted(ROOT.glob("components/*/countersign/**/*.py"))
        for n, line in enumerate(p.read_text(encoding="utf-8").splitlines(), 1)
        if re.search(r"\.(isdigit|isnumeric|isdecimal)\(\)", line)
        and not (p.name == "ids.py" and "text.isascii() and text.isdigit()" in line)
    ]
    assert not found, f"use countersign.kernel.ascii_digits: {found}"
