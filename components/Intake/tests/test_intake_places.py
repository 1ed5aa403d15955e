"""Consulates as country × city (issue 24): the dev set's visa rows, and the rules one by one —
demonyms, embassies and high commissions, "X or Y", other languages' spellings, months after
"in", bare follow-up answers, and ids that survive a URL path."""

from __future__ import annotations

import json
import re
import statistics
import time
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from countersign.intake.models import Need
from countersign.intake.places import consulate, consulate_id, consulates, describe

DEV = Path(__file__).parent / "data" / "sentences_dev.jsonl"
_ID = re.compile(r"^[a-z0-9]+(?:-[a-z0-9]+)*$")


def _rows(intent: str) -> list[dict[str, Any]]:
    rows = [json.loads(line) for line in DEV.read_text().splitlines() if line.strip()]
    return [r for r in rows if r["intent"] == intent]


def _named(cid: str) -> dict[str, str | None]:
    country, city = describe(cid)
    return {"country": country, "city": city}


def _ids(text: str) -> list[str]:
    got = consulates(text)
    assert isinstance(got, tuple), got
    return list(got[0])


def _one(text: str) -> str:
    got = consulate(text)
    assert isinstance(got, tuple), got
    return str(got[0])


# -- the dev set -----------------------------------------------------------------------------------
# Measured when written: consulates 24/24 labelled book_visa_slot rows, consulate 24/24 labelled
# watch_visa_slots rows (and nothing found on the two rows that name no consulate). The floor
# leaves a margin of two rows each.


def _score(intent: str, entity: str) -> tuple[int, int, list[str]]:
    right, total, misses = 0, 0, []
    for row in _rows(intent):
        want = row["entities"].get(entity)
        got = consulates(row["text"]) if entity == "consulates" else consulate(row["text"])
        if want is None:
            if got is not None:
                misses.append(f"{row['id']}: found {got!r} where none is said")
            continue
        total += 1
        if isinstance(got, tuple):
            value = got[0]
            named: Any = [_named(c) for c in value] if entity == "consulates" else _named(value)
        else:
            named = got
        if named == want:
            right += 1
        else:
            misses.append(f"{row['id']}: {row['text']!r} → {named!r}, labelled {want!r}")
    return right, total, misses


@pytest.mark.parametrize(
    ("intent", "entity", "floor"),
    [("book_visa_slot", "consulates", 22), ("watch_visa_slots", "consulate", 22)],
)
def test_dev_set_consulates(intent: str, entity: str, floor: int) -> None:
    right, total, misses = _score(intent, entity)
    assert total == 24
    assert right >= floor, "\n".join(misses)


def test_reading_a_sentence_takes_well_under_a_millisecond() -> None:
    texts = [r["text"] for i in ("book_visa_slot", "watch_visa_slots") for r in _rows(i)]
    spent = []
    for text in texts * 3:
        start = time.perf_counter()
        consulates(text)
        spent.append(time.perf_counter() - start)
    assert statistics.median(spent) < 0.001


# -- country × city ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "country", "city"),
    [
        ("the Italian consulate in Chicago", "Italy", "Chicago"),
        ("grab a slot at the US embassy in London", "United States", "London"),
        ("watch US embassy london dec 8-12", "United States", "London"),
        ("book the UK high commission in Delhi", "United Kingdom", "Delhi"),
        ("the Indian High Commission in London", "India", "London"),
        ("keep watching the UK visa centre in Sydney", "United Kingdom", "Sydney"),
        ("the US visa center in Toronto", "United States", "Toronto"),
        ("the Brazilian consulate in Lisbon", "Brazil", "Lisbon"),
        ("the turkish consulate in zurich", "Turkey", "Zurich"),
        ("the Dutch consulate in New York", "Netherlands", "New York"),
        ("the South Korean embassy in Berlin", "South Korea", "Berlin"),
        ("consulate of spain in berlin", "Spain", "Berlin"),
        ("watch the embassy of the Netherlands in Washington, D.C.", "Netherlands", "Washington"),
        ("visa appt, Chinese embassy Berlin, book earliest in Dec", "China", "Berlin"),
        ("pls book fastest apointment for visa in warsaw, german consulate", "Germany", "Warsaw"),
        ("Book a UK visa appointment (VFS) in Madrid asap", "United Kingdom", "Madrid"),
        ("watch the Singapore embassy in Delhi", "Singapore", "Delhi"),
        ("the Italian consulate in São Paulo", "Italy", "São Paulo"),
        ("the Japanese consulate in Düsseldorf", "Japan", "Düsseldorf"),
    ],
)
def test_the_country_is_the_missions(text: str, country: str, city: str) -> None:
    assert describe(_one(text)) == (country, city)


@pytest.mark.parametrize(
    ("text", "named"),
    [
        ("French consulate Mumbai or Delhi", [("France", "Mumbai"), ("France", "Delhi")]),
        (
            "the German embassy in Washington or the consulate in New York",
            [("Germany", "Washington"), ("Germany", "New York")],
        ),
        (
            "the Portuguese consulate in Boston or the one in New York",
            [("Portugal", "Boston"), ("Portugal", "New York")],
        ),
        (
            "Swiss embassy London or Manchester consulate",
            [("Switzerland", "London"), ("Switzerland", "Manchester")],
        ),
        (
            "consulates of Italy in Chicago, Houston, Los Angeles",
            [("Italy", "Chicago"), ("Italy", "Houston"), ("Italy", "Los Angeles")],
        ),
        ("consulates of Italy in Chicago, Houston and LA", None),
        (
            "the Italian consulate in Chicago or the Spanish one in Boston",
            [("Italy", "Chicago"), ("Spain", "Boston")],
        ),
        ("any visa slot in Lisbon or Porto", [(None, "Lisbon"), (None, "Porto")]),
    ],
)
def test_a_country_said_once_applies_to_each_place(
    text: str, named: list[tuple[str | None, str]] | None
) -> None:
    got = [describe(c) for c in _ids(text)]
    if named is None:  # the same three, by initials
        named = [("Italy", "Chicago"), ("Italy", "Houston"), ("Italy", "Los Angeles")]
    assert got == named


@pytest.mark.parametrize(
    ("text", "cid"),
    [
        ("the Polish embassy, Dublin", "poland-in-dublin"),
        ("book the German consulate: Chicago", "germany-in-chicago"),
        ("NYC Italian consulate", "italy-in-new-york"),
        ("the consulate in nyc", "new-york"),
        ("the consulate in Rio", "rio-de-janeiro"),
        ("at the Consulate General of India in San Francisco", "india-in-san-francisco"),
        ("watch the embassy in the Hague", "the-hague"),
        ("London's US embassy", "united-states-in-london"),
        ("Embajada de México en Madrid", "mexico-in-madrid"),
        ("consulado geral do Brasil em Lisboa", "brazil-in-lisbon"),
        ("New Zealand High Commission in London", "new-zealand-in-london"),
        ("the embassy of the United States in Mexico City", "united-states-in-mexico-city"),
        # a country right after its own city says where the city is, not whose mission it is
        ("watch the consulate in Lisbon, Portugal", "lisbon"),
        ("the US embassy in Paris, France", "united-states-in-paris"),
    ],
)
def test_more_ways_to_name_a_place(text: str, cid: str) -> None:
    assert _one(text) == cid


def test_a_country_alone_or_a_city_alone() -> None:
    assert _one("book the earliest visa slot at the Italian consulate, 1-15 Jan") == "italy"
    assert describe("italy") == ("Italy", None)
    assert _one("watch lisbon for visa appointments next month") == "lisbon"
    assert _one("Watch Porto for a slot on 15 December") == "porto"
    assert describe("lisbon") == (None, "Lisbon")


# -- spellings -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "country", "city"),
    [
        ("book the italienische Konsulat in München", "Italy", "Munich"),
        ("a slot at the Muenchen consulate", None, "Munich"),
        ("watch the consulado italiano em São Paulo", "Italy", "São Paulo"),
        ("book the first slot in Sao Paulo", None, "São Paulo"),
        ("consulat de France à Montréal", "France", "Montreal"),
        ("consulado de España en Boston", "Spain", "Boston"),
        ("book the consulate in Lisboa", None, "Lisbon"),
        ("watch the consulate in Bombay", None, "Mumbai"),
        ("book a slot in Duesseldorf", None, "Düsseldorf"),
        ("the consulate in Frankfurt am Main", None, "Frankfurt"),
        ("the consulate in Saint Petersburg", None, "Saint Petersburg"),
        ("the consulate in St. Petersburg", None, "St. Petersburg"),  # Florida's own name
        ("the Deutsche Botschaft in Lissabon", "Germany", "Lisbon"),
    ],
)
def test_other_languages_and_spellings(text: str, country: str | None, city: str) -> None:
    assert describe(_one(text)) == (country, city)


# -- what is never a place -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "text",
    [
        "book a visa slot in may in madrid",
        "book the madrid consulate in two weeks",
        "watch the madrid consulate at least once a day, in the morning",
        "book madrid on Monday or in March",
        "watch the madrid consulate for at most 100 checks, in the next 10 days",
    ],
)
def test_months_weekdays_and_time_words_after_in_are_not_places(text: str) -> None:
    assert _ids(text) == ["madrid"]


@pytest.mark.parametrize(
    "text",
    [
        "book a visa appointment",
        "watch for a visa slot in the afternoon",
        "book whatever is free first, in January",
        "let us know when anything opens",
        "book a slot in Flobbertown",  # no such city: no guessing
        "book whatever is for sale in time, at best",
    ],
)
def test_no_place_is_guessed(text: str) -> None:
    assert consulates(text) is None
    assert consulate(text) is None


def test_us_is_a_country_only_when_it_says_so() -> None:
    assert _ids("book us a slot at the consulate in Houston") == ["houston"]
    assert _ids("book us a slot at the US consulate in Frankfurt") == ["united-states-in-frankfurt"]
    assert _ids("in New Jersey: the Italian consulate in Newark") == ["italy-in-newark"]


# -- watch: one consulate, and follow-up answers -------------------------------------------------


def test_watching_two_consulates_asks_which() -> None:
    got = consulate("watch the Italian consulate in Chicago or Houston")
    assert isinstance(got, Need)
    assert got.entity == "consulate"
    assert got.options == ["italy-in-chicago", "italy-in-houston"]
    assert "Italy × Chicago" in got.question and "Italy × Houston" in got.question


@pytest.mark.parametrize(
    ("text", "cid"),
    [
        ("Chicago", "chicago"),
        ("chicago please", "chicago"),
        ("the Italian one in Chicago", "italy-in-chicago"),
        ("Italian", "italy"),
        ("italy-in-chicago", "italy-in-chicago"),  # an offered option sent back as it is
        ("Italy × Chicago", "italy-in-chicago"),  # or as the card shows it
        ("watch the Italian consulate for a slot in January\nChicago", "italy-in-chicago"),
        ("watch the Italian consulate in Chicago or Houston\nChicago", "italy-in-chicago"),
        ("watch the Italian consulate in Chicago or Houston\nthe Houston one", "italy-in-houston"),
        ("watch the consulate in Chicago\nthe Italian one", "italy-in-chicago"),
        ("watch the Italian consulate in Chicago\nactually Houston", "italy-in-houston"),
    ],
)
def test_bare_follow_up_answers(text: str, cid: str) -> None:
    assert _one(text) == cid


def test_a_follow_up_adds_the_city_to_a_booking() -> None:
    text = "book the earliest visa slot at the Italian consulate, 1-15 Jan\nChicago or Houston"
    assert _ids(text) == ["italy-in-chicago", "italy-in-houston"]


def test_the_words_that_gave_it() -> None:
    got = consulates("book the first slot at the Italian consulate in Chicago in January")
    assert got == (["italy-in-chicago"], "Italian consulate in Chicago")


# -- ids -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("country", "city", "cid"),
    [
        ("Italy", "Chicago", "italy-in-chicago"),
        ("United States", "London", "united-states-in-london"),
        (None, "Lisbon", "lisbon"),
        (None, "São Paulo", "sao-paulo"),
        ("Italy", None, "italy"),
        ("Turkey", "Zurich", "turkey-in-zurich"),
        (None, "Singapore", "in-singapore"),  # a city whose slug is also a country's
        ("Singapore", None, "singapore"),
    ],
)
def test_ids_are_url_safe_and_read_back(country: str | None, city: str | None, cid: str) -> None:
    assert consulate_id(country, city) == cid
    assert _ID.match(cid) and quote(cid, safe="@") == cid
    assert describe(cid) == (country, city)


def test_ids_of_the_existing_table_still_read() -> None:
    assert _ids("book the first visa slot in lisbon or porto in march") == ["lisbon", "porto"]
    assert _one("watch the lisbon consulate for a visa slot in march") == "lisbon"
    assert _one("watch teh lisbon consulat for a vissa slot in march") == "lisbon"
    assert _one("keep an eye on visa slots at the berlin consulate within two weeks") == "berlin"
    assert _one("watch the rome consulate in may every day for two weeks") == "rome"
    assert describe("porto") == (None, "Porto") and describe("madrid") == (None, "Madrid")


def test_an_id_that_names_nothing() -> None:
    assert describe("nowhere-in-particular") == (None, None)
    with pytest.raises(ValueError):
        consulate_id(None, None)


def test_every_dev_id_is_url_safe() -> None:
    for intent in ("book_visa_slot", "watch_visa_slots"):
        for row in _rows(intent):
            got = consulates(row["text"])
            for cid in got[0] if isinstance(got, tuple) else []:
                assert _ID.match(cid) and quote(cid, safe="@") == cid, cid
                assert consulate_id(*describe(cid)) == cid
