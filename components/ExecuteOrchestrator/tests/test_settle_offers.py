"""What a person is offered on a cut-short execute (``settle._offers``): a plan that asks always
offers something — a write left unknown with nothing done used to offer nothing, and the plan
waited for good (found by the shopping chaos runs)."""

from __future__ import annotations

import pytest

from countersign.execute.settle import Settlement, _offers


def _known(**writes: str) -> Settlement:
    return Settlement("p1", "needs_attention", {int(k[1:]): v for k, v in writes.items()}, {}, ())


@pytest.mark.parametrize(
    ("writes", "expired", "want"),
    [
        ({"s5": "unknown"}, "", ("undo",)),
        ({"s5": "unknown", "s6": "pending"}, "", ("undo",)),
        ({"s5": "done", "s6": "unknown"}, "", ("undo",)),
        ({"s5": "done", "s6": "pending"}, "", ("finish", "undo")),
        ({"s5": "failed", "s6": "pending"}, "", ("finish",)),
        ({"s5": "done", "s6": "pending"}, "the plan expired", ("undo",)),
    ],
)
def test_the_offers(writes: dict[str, str], expired: str, want: tuple[str, ...]) -> None:
    assert _offers(_known(**writes), expired) == want


@pytest.mark.parametrize("value", ["unknown", "done", "failed", "pending", "compensated"])
def test_a_plan_that_may_run_or_holds_an_unknown_always_offers_something(value: str) -> None:
    assert _offers(_known(s5=value, s6="pending"), "")
