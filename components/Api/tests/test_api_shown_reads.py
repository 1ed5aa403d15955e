"""What the preview card shows of a plan's reads and writes (``shown_reads``): whose calendar each
read is with its busy and free stretches, offers as rows with totals and currency, appointment
times, one sentence per write — for every read op the registry has, for the use cases' plans,
and for outputs of no known shape (words, never JSON)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from countersign.api.shown_reads import person, readable, shown_plan, shown_reads, shown_writes
from countersign.intake import Contact
from countersign.registry import Registry

ROOT = Path(__file__).resolve().parents[3]
PEOPLE = [Contact("Alice", "alice@example.com"), Contact("Bob", "bob@example.com")]
WINDOW = {"time_min": "2026-11-23T13:00:00Z", "time_max": "2026-11-23T18:00:00Z"}

#: one realistic normalized output per read op of the registry (its args, its output, the kind
#: of read the card shows); a read op added to the registry without one fails the test below
SAMPLES: dict[str, tuple[dict[str, Any], Any, str]] = {
    "caldav.list_free_busy": (
        {"user": "bob@example.com", **WINDOW},
        {"status": 207, "busy": [["2026-11-23T14:00:00Z", "2026-11-23T14:45:00Z"]]},
        "busy",
    ),
    "google.calendar.list_free_busy": (
        {"user": "alice@example.com", **WINDOW},
        {"busy": [{"start": "2026-11-23T16:00:00Z", "end": "2026-11-23T17:00:00Z"}]},
        "busy",
    ),
    "system.analyze.find_overlap": (
        {
            "inputs": [{"$ref": "steps.1.output"}],
            "duration_min": 30,
            "window_start": WINDOW["time_min"],
            "window_end": WINDOW["time_max"],
        },
        {"slots": [{"start": "2026-11-23T14:45:00Z", "end": "2026-11-23T16:00:00Z"}]},
        "free",
    ),
    "shop.sandbox.search": (
        {"query": "usb-c cable 2m", "max_price": "15.00"},
        {"query": "usb-c cable 2m", "offers": [{"item": "cable-a", "title": "A", "price": "9.9"}]},
        "offers",
    ),
    "system.analyze.rank_offers": (
        {"inputs": {"$ref": "steps.1.output"}, "max_price": "25.00", "quantity": 2},
        {"shortlist": [{"item": "cable-a", "title": "A", "price": "9.90", "total": "19.80"}]},
        "offers",
    ),
    "shop.sandbox.view_cart": (
        {"customer": "alice"},
        {
            "customer": "alice",
            "lines": [{"id": "line-1", "item": "cable-a", "quantity": 2, "unit_price": "9.90"}],
            "total": "19.80",
            "cart_total": "19.80",
        },
        "offers",
    ),
    "visa.sandbox.find_slots": (
        {
            "consulate": "lisbon",
            "date_from": "2027-03-01T00:00:00Z",
            "date_to": "2027-03-31T00:00:00Z",
        },
        {"slots": [{"id": "slot-1", "at": "2027-03-14T09:00:00Z"}]},
        "times",
    ),
    "http.get": ({"url": "https://example.org/x"}, {"name": "x", "tags": ["a", "b"]}, "fields"),
}


def _plan(
    uses: str, call: str, args: dict[str, Any], intent: str = "schedule_meeting"
) -> dict[str, Any]:
    step = {"step": 1, "uses": uses, "call": call, "args": args, "gate_id": None, "role": "Fetcher"}
    return {"intent": {"intent": intent}, "graph": [step]}


def _texts(item: Any) -> str:
    """Every string the card words (labels, lines, row values), joined."""
    if isinstance(item, dict):
        return " ".join(_texts(v) for v in item.values())
    if isinstance(item, list):
        return " ".join(_texts(v) for v in item)
    return str(item) if isinstance(item, str) else ""


def _read_ops(registry: Registry) -> list[str]:
    return sorted(
        f"{cid}.{name}"
        for cid, conn in registry.connectors.items()
        for name, op in conn.ops.items()
        if op.safety == "read" and not op.gate
    )


def test_every_read_op_of_the_registry_has_a_known_shape(registry: Registry) -> None:
    assert _read_ops(registry) == sorted(SAMPLES)


@pytest.mark.parametrize("op", sorted(SAMPLES))
def test_each_read_op_reads_as_a_person_reads_it(registry: Registry, op: str) -> None:
    uses, call = op.rsplit(".", 1)
    args, out, kind = SAMPLES[op]
    intent = "purchase_item" if uses.startswith(("shop", "system.analyze")) else "schedule_meeting"
    [item] = shown_reads(_plan(uses, call, args, intent), {"1": out}, registry, PEOPLE)
    assert item["kind"] == kind and item["step"] == 1
    words = _texts(item)
    assert "{" not in words and "[" not in words and item["line"]


def test_a_calendar_read_names_its_owner_and_its_busy_and_free_stretches(
    registry: Registry,
) -> None:
    args, out, _ = SAMPLES["caldav.list_free_busy"]
    [bob] = shown_reads(_plan("caldav", "list_free_busy", args), {1: out}, registry, PEOPLE)
    assert bob["owner"] == "Bob" and bob["label"] == "Bob's calendar"
    assert bob["line"] == "Bob: 1 busy stretch in this window"
    assert bob["busy"] == [{"start": "2026-11-23T14:00:00Z", "end": "2026-11-23T14:45:00Z"}]
    assert bob["free"] == [
        {"start": "2026-11-23T13:00:00Z", "end": "2026-11-23T14:00:00Z"},
        {"start": "2026-11-23T14:45:00Z", "end": "2026-11-23T18:00:00Z"},
    ]
    # a person the contacts do not know is named by their address
    [who] = shown_reads(_plan("caldav", "list_free_busy", args), {1: out}, registry, ())
    assert who["owner"] == "bob@example.com" and who["label"] == "the calendar of bob@example.com"


def test_busy_stretches_outside_or_across_the_window_leave_the_right_free_time(
    registry: Registry,
) -> None:
    busy = [
        ["2026-11-23T12:00:00Z", "2026-11-23T13:30:00Z"],  # starts before the window
        ["2026-11-23T15:00:00Z", "2026-11-23T16:00:00Z"],
        ["2026-11-23T15:30:00Z", "2026-11-23T19:00:00Z"],  # overlaps, ends after the window
        ["nonsense", "2026-11-23T15:00:00Z"],
    ]
    plan = _plan("caldav", "list_free_busy", {"user": "alice@example.com", **WINDOW})
    [alice] = shown_reads(plan, {1: {"busy": busy}}, registry, PEOPLE)
    assert alice["free"] == [{"start": "2026-11-23T13:30:00Z", "end": "2026-11-23T15:00:00Z"}]
    assert len(alice["busy"]) == 3


def test_offers_are_rows_with_price_quantity_total_and_currency(registry: Registry) -> None:
    args, out, _ = SAMPLES["system.analyze.rank_offers"]
    plan = _plan("system.analyze", "rank_offers", args, "purchase_item")
    [item] = shown_reads(plan, {2: {}, 1: out}, registry, PEOPLE)
    assert item["currency"] == "EUR"  # the intent's max_price declares it (registry)
    assert item["rows"] == [
        {"item": "cable-a", "title": "A", "price": "9.90", "quantity": 2, "total": "19.80"}
    ]
    assert item["label"] == "Offers within your budget of 25.00 EUR for 2, cheapest first"
    args, out, _ = SAMPLES["shop.sandbox.search"]
    [found] = shown_reads(
        _plan("shop.sandbox", "search", args, "purchase_item"), {1: out}, registry
    )
    assert found["rows"][0]["price"] == "9.90" and found["rows"][0]["total"] == "9.90"
    args, out, _ = SAMPLES["shop.sandbox.view_cart"]
    [cart] = shown_reads(
        _plan("shop.sandbox", "view_cart", args, "purchase_item"), {1: out}, registry, PEOPLE
    )
    assert cart["label"] == "Alice's cart" and cart["total"] == "19.80"
    assert cart["line"] == "Alice's cart: 1 line, total 19.80 EUR"


def test_a_watcher_with_nothing_found_yet_says_so(registry: Registry) -> None:
    args, _, _ = SAMPLES["visa.sandbox.find_slots"]
    plan = _plan("visa.sandbox", "find_slots", args)
    plan["graph"][0]["mode"] = "durable"
    [item] = shown_reads(plan, {1: {"slots": []}}, registry)
    assert item["kind"] == "times" and item["times"] == []
    assert item["line"] == "Free appointments at Lisbon: none yet — the watcher keeps looking"


def test_a_refused_read_says_what_the_provider_answered(registry: Registry) -> None:
    plan = _plan("caldav", "list_free_busy", {"user": "bob@example.com"})
    [item] = shown_reads(plan, {1: {"status": 404, "busy": []}}, registry, PEOPLE)
    assert item["kind"] == "failed" and item["line"].endswith("the provider answered 404")


def test_no_reads_show_nothing_and_gates_are_not_reads(registry: Registry) -> None:
    plan = json.loads((ROOT / "usecases/meeting/plans/default.plan.json").read_text())["plan"]
    assert shown_reads(plan, {}, registry, PEOPLE) == []
    assert shown_reads(plan, {4: {"approved": True}}, registry, PEOPLE) == []
    assert shown_plan(plan, None, registry)["reads"] == []


def test_an_unknown_op_reads_as_words_not_json(registry: Registry) -> None:
    plan = _plan("nowhere", "thing", {})
    out = {"status": 200, "a": {"b": [1, {"c": "d"}]}, "ok": True, "who": "bob@example.com"}
    [item] = shown_reads(plan, {1: out}, registry, PEOPLE)
    assert item["kind"] == "fields" and item["label"] == "nowhere: thing"
    assert item["rows"] == [
        {"field": "a", "value": "b: 1, c: d"},
        {"field": "ok", "value": "yes"},
        {"field": "who", "value": "Bob"},
    ]
    [bare] = shown_reads(plan, {1: [1, 2]}, registry)
    assert bare["rows"] == [{"field": "value", "value": "1, 2"}]


_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4)
    ),
    max_leaves=30,
)


@settings(max_examples=150, deadline=None)
@given(
    op=st.sampled_from(sorted(SAMPLES)),
    out=st.dictionaries(
        st.sampled_from(["busy", "slots", "offers", "shortlist", "lines", "status", "total", "x"]),
        _JSON,
        max_size=4,
    ),
)
def test_any_output_of_any_read_op_is_worded_without_raising(
    registry: Registry, op: str, out: dict[str, Any]
) -> None:
    uses, call = op.rsplit(".", 1)
    [item] = shown_reads(_plan(uses, call, SAMPLES[op][0]), {1: out}, registry, PEOPLE)
    json.dumps(item)
    assert item["line"] and item["kind"] in {"busy", "free", "offers", "times", "fields", "failed"}
    if item["kind"] == "fields":
        assert all(not r["value"].startswith(("{", "[")) or "{" in str(out) for r in item["rows"])


def _usecase(name: str) -> dict[str, Any]:
    doc = json.loads((ROOT / f"usecases/{name}/plans/default.plan.json").read_text())
    return dict(doc.get("plan", doc))


def test_writes_are_one_sentence_per_thing_done(registry: Registry) -> None:
    meeting = shown_writes(_usecase("meeting"), registry, PEOPLE)
    assert [w["steps"] for w in meeting] == [[5, 6], [7, 8]]
    assert meeting[0]["text"] == (
        "Create the event “Quarterly sync” in Alice's and Bob's calendars at the time you pick"
        " below, with Alice and Bob invited (Google Calendar)"
    )
    assert meeting[1]["text"].startswith("Mail Alice and Bob “Quarterly sync”: You are invited")
    shopping = [w["text"] for w in shown_writes(_usecase("shopping"), registry, PEOPLE)]
    assert shopping[:2] == [
        "Add 2 × the offer you pick below to Alice's cart",
        "Buy what is in Alice's cart, only if its total is at most 15.00 EUR",
    ]
    visa = [w["text"] for w in shown_writes(_usecase("visa"), registry, PEOPLE)]
    assert visa[0] == "Book the appointment at Lisbon: the slot you pick below"
    assert "with the details of what step 3 returns (Book the chosen slot)" in visa[1]
    for name in ("meeting", "shopping", "visa", "parallel"):
        for w in shown_writes(_usecase(name), registry):
            assert "{" not in w["text"] and "$ref" not in w["text"], w


def test_a_write_at_a_known_time_carries_its_instants(registry: Registry) -> None:
    plan = _usecase("meeting")
    for s in plan["graph"]:
        if s["call"] == "create_event":
            s["args"]["start"], s["args"]["end"] = "2026-11-25T14:30:00Z", "2026-11-25T15:00:00Z"
    [event, _] = shown_writes(plan, registry, ())
    assert (event["start"], event["end"]) == ("2026-11-25T14:30:00Z", "2026-11-25T15:00:00Z")
    assert "calendars of alice@example.com and bob@example.com" in event["text"]


def test_an_unknown_write_says_what_it_does_in_words(registry: Registry) -> None:
    plan = {
        "intent": {"intent": "x"},
        "graph": [
            {
                "step": 1,
                "uses": "slack",
                "call": "post_message",
                "args": {"channel": "ops", "text": "hi"},
            },
            {
                "step": 2,
                "uses": "http",
                "call": "request",
                "args": {"method": "POST", "url": "https://e.org", "json": {"a": 1}},
            },
        ],
    }
    texts = [w["text"] for w in shown_writes(plan, registry)]
    assert texts[0] == "Post to #ops: “hi”"
    assert texts[1].startswith("A request that changes something (POST/PUT/PATCH/DELETE)")
    assert "json: a: 1" in texts[1] and "{" not in texts[1]


def test_people_and_values_in_words() -> None:
    assert (
        person("BOB@example.com", PEOPLE) == "Bob"
        and person("carol@x.org", PEOPLE) == "carol@x.org"
    )
    assert readable({"$ref": "gates.gate-A.choice.item"}) == "what you pick at the gate (item)"
    assert readable([]) == "none" and readable(None) == "none" and readable(False) == "no"
    assert len(readable("x" * 500)) == 160


def test_the_person_asking_is_you(registry: Registry) -> None:
    plan = _usecase("meeting")
    outputs: dict[int, Any] = {1: {"busy": []}, 2: {"busy": []}}
    shown = shown_plan(plan, outputs, registry, PEOPLE, me="alice@example.com")
    assert [r["label"] for r in shown["reads"]] == ["your calendar", "Bob's calendar"]
    assert shown["reads"][0]["line"] == "You: free in this window"
    assert shown["writes"][0]["text"].startswith(
        "Create the event “Quarterly sync” in your and Bob's calendars"
    )
    assert shown["writes"][1]["text"].startswith("Mail you and Bob “Quarterly sync”")
    cart = shown_plan(_usecase("shopping"), {}, registry, (), me="alice")["writes"]
    assert cart[0]["text"] == "Add 2 × the offer you pick below to your cart"


def test_people_the_contacts_do_not_know_are_named_by_address_beside_you(
    registry: Registry,
) -> None:
    shown = shown_plan(_usecase("meeting"), {2: {"busy": []}}, registry, (), me="alice@example.com")
    assert shown["reads"][0]["line"] == "bob@example.com: free in this window"  # not capitalized
    assert shown["writes"][0]["text"].startswith(
        "Create the event “Quarterly sync” in your calendar and the calendar of bob@example.com"
    )


_ARG = st.one_of(
    _JSON,
    st.just({"$ref": "gates.gate-A.choice.item"}),
    st.just({"$ref": "steps.3.output"}),
    st.sampled_from(["bob@example.com", "2026-11-25T14:30:00Z", "15.00"]),
)


@settings(max_examples=150, deadline=None)
@given(data=st.data())
def test_any_args_of_any_write_op_read_as_a_sentence(
    registry: Registry, data: st.DataObject
) -> None:
    ops = sorted(
        (cid, name, op)
        for cid, conn in registry.connectors.items()
        for name, op in conn.ops.items()
        if op.safety == "write"
    )
    cid, name, op = data.draw(st.sampled_from(ops))
    names = [*op.args.required, *op.args.optional]
    args = data.draw(st.fixed_dictionaries({}, optional={n: _ARG for n in names}))
    step = {"step": 1, "uses": cid, "call": name, "args": args, "gate_id": None}
    [write] = shown_writes(
        {"intent": {"intent": "purchase_item"}, "graph": [step]}, registry, PEOPLE
    )
    assert write["steps"] == [1] and write["text"]
    assert "$ref" not in write["text"] and "{'" not in write["text"] and '{"' not in write["text"]


def test_an_invitation_with_the_event_says_it_is_attached(registry: Registry) -> None:
    plan = _usecase("meeting")
    for s in plan["graph"]:
        if s["call"] == "send":
            s["args"]["event"] = {"uid": "u-1", "title": "Quarterly sync"}
    mail = shown_writes(plan, registry, PEOPLE)[1]["text"]
    assert "with the event attached, for their calendar" in mail and "{" not in mail
