"""Purchases (issue 24): the budget as a total cap with its currency (asked about, never
converted), the count (a measure is one item) and the thing to buy (without the count, the price,
the receipt address or another clause) — on the labelled dev sentences and on the hard cases one
by one, bare follow-up answers and joined conversations included.

Dev figures when this was written (50 purchase rows, each entity scored on every row: a value the
label does not have is wrong too): query 49/50, quantity 50/50, max_price 50/50. The miss left:
dev-081 "order 4 coffee mugs for the office, …" gives "coffee mugs for the office" where the label
says "coffee mugs" (dev-107 labels "plants for the office" the other way; no general rule tells
them apart). The floors below are those figures less one row."""

from __future__ import annotations

import json
import re
import statistics
import time
from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from countersign.intake import purchase
from countersign.intake.models import Need
from countersign.intake.purchase import budget, quantity, query

DATA = Path(__file__).parent / "data" / "sentences_dev.jsonl"


def _dev_rows() -> list[dict[str, Any]]:
    return [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]


def _content(words: str) -> set[str]:
    """A query's content words: case, order, articles and singular/plural ignored."""
    out = set()
    for word in re.findall(r"[a-z0-9]+(?:[-'][a-z0-9]+)*", words.lower()):
        if word in {"a", "an", "the"}:
            continue
        if word.endswith("ies") and len(word) > 4:
            out.add(word[:-3] + "y")
        elif word.endswith("s") and not word.endswith("ss") and len(word) > 3:
            out.add(word[:-1])
        else:
            out.add(word)
    return out


def _query_ok(label: str | None, got: Any) -> bool:
    value = got[0] if isinstance(got, tuple) else None
    if label is None or value is None:
        return label is None and value is None
    return _content(label) == _content(value)


def _quantity_ok(label: int | None, got: Any) -> bool:
    return (got[0] if isinstance(got, tuple) else None) == label


def _budget_ok(label: dict[str, Any] | None, got: Any) -> bool:
    """Label currency null or EUR: the value equals the amount; any other: a Need that heard it."""
    if label is None:
        return got is None
    if label["currency"] in (None, "EUR"):
        return isinstance(got, tuple) and Decimal(got[0]) == Decimal(label["amount"])
    return (
        isinstance(got, Need)
        and got.entity == "max_price"
        and got.heard["currency"] == label["currency"]
        and Decimal(got.heard["amount"]) == Decimal(label["amount"])
    )


# ---- the dev set ----------------------------------------------------------------------------------
def test_dev_purchases_per_entity() -> None:
    rows = [r for r in _dev_rows() if r["intent"] == "purchase_item"]
    assert len(rows) == 50
    right = {"query": 0, "quantity": 0, "max_price": 0}
    misses = []
    for r in rows:
        text, labels = r["text"], r["entities"]
        checks = {
            "query": _query_ok(labels.get("query"), query(text)),
            "quantity": _quantity_ok(labels.get("quantity"), quantity(text)),
            "max_price": _budget_ok(labels.get("max_price"), budget(text)),
        }
        for name, ok in checks.items():
            right[name] += ok
            if not ok:
                misses.append(f"{r['id']} {name}: {text}")
    assert right["query"] >= 48, misses
    assert right["quantity"] >= 49, misses
    assert right["max_price"] >= 49, misses


def test_dev_cannot_do_rows_name_nothing_to_buy() -> None:
    """Not scored, but sensible: "cancel my order", "transfer 200 euros", "send $50 to …" give
    no thing, no count and no budget."""
    rows = [r for r in _dev_rows() if r["cannot"]]
    read = [r["text"] for r in rows if query(r["text"]) or quantity(r["text"]) or budget(r["text"])]
    assert len(read) <= 2, read


def test_three_readers_take_under_a_millisecond_per_sentence() -> None:
    texts = [r["text"] for r in _dev_rows()]
    medians = []
    for _ in range(3):
        took = []
        for text in texts:
            purchase._lines.cache_clear()
            start = time.perf_counter()
            budget(text), quantity(text), query(text)
            took.append(time.perf_counter() - start)
        medians.append(statistics.median(took))
    assert min(medians) < 0.001, medians


# ---- budgets -------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "value", "words"),
    [
        ("order a kettle under 8€", "8.00", "under 8€"),
        ("I need some printer paper, my budget's 35 euros", "35.00", "budget's 35 euros"),
        ("get me 3 notebooks, no more than forty euro", "40.00", "no more than forty euro"),
        ("buy a phone case, twenty or less", "20.00", "twenty or less"),
        ("Don't spend more than 49,90 € please", "49.90", "Don't spend more than 49,90 €"),
        ("buy a desk, max 1.234,50 EUR", "1234.50", "max 1.234,50 EUR"),
        ("buy 3 packs of sticky notes under 9.99", "9.99", "under 9.99"),
        ("buy a usb c cable 15 euros", "15.00", "15 euros"),
        ("order 4 coffee mugs, €10 a piece at most", "40.00", "€10 a piece at most"),
        ("get 10 pens, 1.50 each max", "15.00", "1.50 each max"),
        ("buy 3 mugs, each under 10 euros", "30.00", "each under 10 euros"),
        (
            "order ten A4 ring binders, max fifty euros in total",
            "50.00",
            "max fifty euros in total",
        ),
        ("purchase 1 ergonomic mouse ≤ €60", "60.00", "≤ €60"),
        ("I need new earbuds. Max. budget: 80,00 EUR.", "80.00", "Max. budget: 80,00 EUR"),
        ("buy a monitor for 200-250 euros", "250.00", "for 200-250 euros"),
        ("between 20 and 30 euros", "30.00", "between 20 and 30 euros"),
        ("order an A3 frame under a hundred euros", "100.00", "under a hundred euros"),
        ("buy 2 of those usb sticks 64GB for max 30", "30.00", "for max 30"),
        ("spend at most 25 euros on a new keyboard", "25.00", "at most 25 euros"),
    ],
)
def test_a_budget_in_the_shops_currency_is_the_total_cap(text: str, value: str, words: str) -> None:
    assert budget(text) == (value, words)


@pytest.mark.parametrize(
    ("text", "amount", "currency"),
    [
        ("buy 2 usb-c hubs, max $15 each", "30", "USD"),
        ("USB hub, max 20 dollars, mail the receipt to lars@example.se", "20", "USD"),
        ("can you get me a desk lamp? something around 40 bucks", "40", "USD"),
        ("buy a 2m extension cord, max US$18", "18", "USD"),
        ("2 litres of white paint, up to £20", "20", "GBP"),
        ("can u order an hdmi adaptor pls, dont spend more then 15 quid", "15", "GBP"),
        ("buy a mug, twelve pounds fifty max", "12.50", "GBP"),
        ("Please purchase six AAA batteries, budget twenty-five pounds", "25", "GBP"),
        ("order 5 x AA batteries (4-pack) for max 12 CHF total", "12", "CHF"),
        ("buy a chair, 150 swiss francs max", "150", "CHF"),
        ("buy a water bottle under ₹800", "800", "INR"),
        ("buy a backpack ≤ ¥8000", "8000", "JPY"),
        ("buy 3 cups for R$ 50", "50", "BRL"),
        ("Buy 2 bicycle lights, budget 30 AUD", "30", "AUD"),
        ("max 40 SGD", "40", "SGD"),
        ("get a 65W charger, max 40 CAD", "40", "CAD"),
    ],
)
def test_another_currency_is_asked_about_never_converted(
    text: str, amount: str, currency: str
) -> None:
    need = budget(text)
    assert isinstance(need, Need)
    assert need.entity == "max_price"
    assert need.heard == {"amount": amount, "currency": currency}
    assert currency in need.question and "EUR" in need.question


def test_the_question_names_what_was_read_and_the_shops_currency() -> None:
    need = budget("buy a kettle, max 15 dollars")
    assert isinstance(need, Need)
    assert need.question == (
        "You wrote 15 USD, but this shop sells in EUR. What is the most you want to spend, in EUR?"
    )


def test_the_shops_currency_is_a_parameter() -> None:
    assert budget("buy a kettle, max $15", currency="USD") == ("15.00", "max $15")
    assert budget("buy a kettle under 20", currency="usd") == ("20.00", "under 20")
    need = budget("buy a kettle, max 15 euros", currency="USD")
    assert isinstance(need, Need) and need.heard == {"amount": "15", "currency": "EUR"}


def test_a_price_each_without_a_count_asks_for_the_total() -> None:
    need = budget("buy batteries, max 2€ each")
    assert isinstance(need, Need)
    assert need.heard == {"amount": "2", "currency": "EUR", "each": True}
    assert "in total" in need.question


@pytest.mark.parametrize(
    "text",
    [
        "get me a cheap umbrella",
        "buy a screen protector for an iPhone 15",
        "rent a car for up to 3 days",
        "get me 2 pounds of coffee beans",
        "buy a 5 kg bag of rice",
        "order 2 x 2 litres of oat milk",
        "buy 2 of those 64GB usb sticks",
        "book a table for 4 at an Italian restaurant",
        "transfer 200 euros to my landlord",
        "send $50 to mike@example.com",
        "2",
        "30",
        "",
    ],
)
def test_no_budget(text: str) -> None:
    assert budget(text) is None


def test_a_bare_number_is_a_budget_when_it_was_asked_for_or_has_cents() -> None:
    assert budget("30", asked=True) == ("30.00", "30")
    assert budget("two hundred", asked=True) == ("200.00", "two hundred")
    assert budget("49.90") == ("49.90", "49.90")
    assert budget("buy a usb hub\n30", asked=True) == ("30.00", "30")


# ---- counts --------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "count"),
    [
        ("buy 2 usb-c hubs, max $15 each", 2),
        ("order a kettle under 8€", 1),
        ("get me 3 notebooks, no more than forty euro", 3),
        ("Buy three HDMI cables (2m)", 3),
        ("Please purchase six AAA rechargeable batteries", 6),
        ("order ten A4 ring binders", 10),
        ("buy a hundred envelopes", 100),
        ("purchase 1 ergonomic mouse", 1),
        ("order 1 x 'Logitech MX Keys' keyboard", 1),
        ("order 5 x AA batteries (4-pack)", 5),
        ("order 2 x 2 litres of oat milk", 2),
        ("buy 10 pcs of AA batteries", 10),
        ("I need new wireless earbuds. Quantity: 1.", 1),
        ("get a couple of notebooks", 2),
        ("buy a pair of running socks", 1),
        ("order one pair of headphones", 1),
        ("get 3 pairs of socks", 3),
        ("order a dozen eggs", 1),
        ("2 litres of white paint, up to £20", 1),
        ("buy a 5 kg bag of rice", 1),
        ("need 500g coffee beans", 1),
        ("buy 2 bags of rice of 5kg", 2),
        ("buy 3 packs of sticky notes", 3),
        ("buy 1 pack of 100 paper cups", 1),
        ("buy 2 of those usb sticks 64GB", 2),
        ("get me two of the cheapest HDMI switches", 2),
        ("buy a a4 printer paper box", 1),
        ("buy a 20 x 30 cm frame", 1),
        ("Buy a screen protector for an iPhone 15", 1),
        ("i wanna by a yoga mat", 1),
        ("ordr a kettle", 1),
    ],
)
def test_a_count(text: str, count: int) -> None:
    got = quantity(text)
    assert isinstance(got, tuple) and got[0] == count


@pytest.mark.parametrize(
    "text",
    [
        "buy toner",
        "buy cables",
        "order some AA batteries for 5.50€",
        "I want to buy noise cancelling headphones",
        "USB hub, max 20 dollars",
        "buy a few pens",
        "buy something",
        "30 euros",
        "under 30 euros",
        "49.90",
        "cancel my order from yesterday",
    ],
)
def test_no_count(text: str) -> None:
    assert quantity(text) is None


@pytest.mark.parametrize(
    ("answer", "count"),
    [
        ("2", 2),
        ("two", 2),
        ("3 please", 3),
        ("just one", 1),
        ("make it 4", 4),
        ("a couple", 2),
        ("a pair", 2),
        ("a dozen", 12),
        ("I want 2", 2),
    ],
)
def test_a_bare_answer_is_a_count(answer: str, count: int) -> None:
    got = quantity(answer)
    assert isinstance(got, tuple) and got[0] == count


# ---- the thing to buy ----------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "thing"),
    [
        ("USB hub, max 20 dollars, mail the receipt to lars@example.se", "USB hub"),
        ("buy 2 usb-c hubs, max $15 each", "usb-c hubs"),
        ("2 litres of white paint, up to £20", "2 litres of white paint"),
        ("buy a 5 kg bag of rice, max 12 euro", "5 kg bag of rice"),
        ("need 500g coffee beans, ≤ 15 EUR", "500g coffee beans"),
        ("Buy three HDMI cables (2m) for at most 25 EUR total", "HDMI cables (2m)"),
        ("order 5 x AA batteries (4-pack) for max 12 CHF total", "AA batteries (4-pack)"),
        ("order 2 x 2 litres of oat milk", "2 litres of oat milk"),
        ("buy 3 packs of sticky notes under 9.99", "sticky notes"),
        ("buy 1 pack of 100 paper cups, max 6 euros", "pack of 100 paper cups"),
        ("buy a pair of running socks, max 15 euros", "running socks"),
        ("get me two of the cheapest HDMI switches", "HDMI switches"),
        ("get me a cheap umbrella", "umbrella"),
        ("can you get me a new desk lamp? something around 40 bucks", "desk lamp"),
        (
            "Could you buy a replacement charger for my Lenovo laptop? Don't spend more than "
            "49,90 € and mail the receipt to me@example.com",
            "replacement charger for Lenovo laptop",
        ),
        ("Buy a screen protector for an iPhone 15 — max 12 €", "screen protector for an iPhone 15"),
        ("order 1 x 'Logitech MX Keys' keyboard, limit €120", "Logitech MX Keys keyboard"),
        ("purchase a french press, 1 litre, up to 35 euros", "french press 1 litre"),
        ("I need a webcam for video calls, 1080p, nothing over 70 euros", "webcam 1080p"),
        ("buy a gift for my mum: a silk scarf, max 60 euros", "silk scarf"),
        ("I'd like a birthday present for Tom — a board game, under €35", "board game"),
        (
            "I want to buy noise cancelling headphones for around €200 max",
            "noise cancelling headphones",
        ),
        (
            "Necesito comprar 2 toner cartridges for the HP LaserJet, hasta 90 euros",
            "toner cartridges for the HP LaserJet",
        ),
        ("i wanna by a yoga mat for less then 30 eur", "yoga mat"),
        ("can u order a new hdmi adaptor pls, dont spend more then 15 quid", "hdmi adaptor"),
        ("buy a usb c cable 15 euros", "usb c cable"),
        ("order some AA batteries for 5.50€", "AA batteries"),
        ("buy 10 pcs of AA batteries", "AA batteries"),
        ("buy 2 webcams at €45 each", "webcams"),
        ("please buy printer paper — A4, 500 sheets — max 8 €", "printer paper A4 500 sheets"),
        (
            "Could you please order three boxes of green tea for me? Up to 18 euros.",
            "boxes of green tea",
        ),
        ("acheter une lampe, max 25 €", "lampe"),
        ("spend at most 25 euros on a new keyboard", "keyboard"),
        ("buy a 20 x 30 cm frame max 15€", "20 x 30 cm frame"),
        ("buy toner", "toner"),
        ("a usb hub", "usb hub"),
        ("I'd like to have a desk lamp", "desk lamp"),
        ("book about python, max 20 euros", "book about python"),
        ("wire cutters", "wire cutters"),
        ("clear tape, 2 rolls", "clear tape"),
    ],
)
def test_the_thing_to_buy(text: str, thing: str) -> None:
    got = query(text)
    assert isinstance(got, tuple) and got[0] == thing


def test_the_words_are_those_written() -> None:
    assert query("Please purchase six AAA rechargeable batteries, budget 25 pounds") == (
        "AAA rechargeable batteries",
        "AAA rechargeable batteries",
    )
    assert query("buy a replacement charger for my laptop") == (
        "replacement charger for laptop",
        "replacement charger for my laptop",
    )


@pytest.mark.parametrize(
    "text",
    [
        "buy something",
        "buy smth nice",
        "buy a gift for dad",
        "2",
        "two",
        "a pair",
        "30 euros",
        "under 30 euros",
        "thanks!",
        "send the receipt to me@example.com",
        "cancel my order from yesterday",
        "I want to move my 10:00 with carol",
        "book me a flight to Lisbon",
        "send a gift to my sister in Lyon for her birthday",
        "",
    ],
)
def test_nothing_to_buy(text: str) -> None:
    assert query(text) is None


# ---- conversations (one message a line) ----------------------------------------------------------
def test_a_conversation_keeps_the_thing_and_takes_the_answers() -> None:
    talk = "buy a usb hub\n2\nunder 30 euros"
    assert query(talk) == ("usb hub", "usb hub")
    assert quantity(talk) == (2, "2")
    assert budget(talk) == ("30.00", "under 30 euros")


def test_a_vague_request_is_answered_by_the_next_message() -> None:
    talk = "buy something\na 1TB external drive\nless than 80 euros"
    assert query(talk) == ("1TB external drive", "1TB external drive")
    assert quantity(talk) == (1, "a 1TB")
    assert budget(talk) == ("80.00", "less than 80 euros")


def test_a_later_budget_replaces_an_earlier_one() -> None:
    talk = "buy a kettle, max 20 euros\nwhat about 30 euros?"
    assert budget(talk) == ("30.00", "about 30 euros")


# ---- any text ------------------------------------------------------------------------------------
_PIECES = [
    "buy ", "a ", "2 ", "x ", "max ", "under ", "each ", "€", "$", "euros ", "CHF ", "pounds of ",
    "twenty ", "hundred ", "for ", "to ", ", ", " — ", ": ", "\n", "kg ", "1,5 ", "9.99 ",
    "usb hub ", "cancel ", "book ", "something ", "@", "(2m) ",
]  # fmt: skip


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_PIECES) | st.text(max_size=8), max_size=14).map("".join))
def test_any_text_gives_a_value_and_its_words_a_question_or_nothing(text: str) -> None:
    for reader in (budget, quantity, query):
        got = reader(text)
        assert (
            got is None
            or isinstance(got, Need)
            or (isinstance(got, tuple) and isinstance(got[1], str))
        )
    spent = budget(text)
    if isinstance(spent, tuple):
        assert re.fullmatch(r"\d+\.\d{2}", spent[0])
    count = quantity(text)
    if isinstance(count, tuple):
        assert isinstance(count[0], int) and count[0] > 0
