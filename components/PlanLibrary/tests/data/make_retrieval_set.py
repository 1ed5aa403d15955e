"""Writes retrieval_set.jsonl: a labeled set for PlanRetrieval (issue 15.3), deterministic.

One user's library of stored plans over the five registry intents, and ≥ 200 requests a person
might type, each labeled with the stored plans that should come back: same intent AND the same
key entities (the attendee pair of a meeting, the city of a visa slot, the product of a
purchase). The set is built to be hard for each channel alone:

- paraphrases: a request never reuses its plans' verb phrase ("arrange a call" for "schedule a
  meeting"), and a third of the purchases name the product by a synonym ("notebook computer" for
  "laptop"), so word overlap alone misses them;
- distractors: the same people in a different intent (find a time vs schedule), the same city in
  the other visa intent (watch vs book), one attendee of the two in common, a neighbouring city,
  so semantic similarity alone ranks near-misses first.

Stored plan text is what ``plan_text`` indexes (intent words, the request, the entities, the
ops); queries are the person's words only. Run: ``python make_retrieval_set.py`` (rewrites the file
next to it; the test checks the shipped file is what this script writes).
"""

from __future__ import annotations

import json
import random
from pathlib import Path

OUT = Path(__file__).with_name("retrieval_set.jsonl")

PEOPLE = [
    "alice",
    "bob",
    "carol",
    "dave",
    "erin",
    "frank",
    "grace",
    "heidi",
    "ivan",
    "judy",
    "mallory",
    "oscar",
    "peggy",
    "trent",
    "victor",
    "wendy",
]
TOPICS = [
    "budget review",
    "roadmap",
    "hiring plan",
    "quarterly report",
    "design critique",
    "launch checklist",
    "onboarding",
    "security audit",
    "pricing",
    "customer feedback",
]
CITIES = [
    ("lisbon", "portugal"),
    ("porto", "portugal"),
    ("madrid", "spain"),
    ("barcelona", "spain"),
    ("paris", "france"),
    ("lyon", "france"),
    ("berlin", "germany"),
    ("munich", "germany"),
    ("rome", "italy"),
    ("milan", "italy"),
    ("vienna", "austria"),
    ("prague", "czechia"),
]
#: product -> words a person may use for it instead
ITEMS = {
    "laptop": ["notebook computer", "portable computer"],
    "headphones": ["headset", "earphones"],
    "monitor": ["display screen", "computer screen"],
    "keyboard": ["typing board", "mechanical keys"],
    "printer": ["inkjet", "laser printing machine"],
    "backpack": ["rucksack", "daypack"],
    "sneakers": ["running shoes", "trainers"],
    "umbrella": ["parasol for rain", "brolly"],
    "coffee beans": ["espresso roast", "ground coffee"],
    "desk lamp": ["reading light", "table light"],
    "water bottle": ["flask", "drinking canteen"],
    "phone charger": ["usb power adapter", "charging cable"],
    "office chair": ["ergonomic seat", "swivel chair"],
    "notebook": ["paper journal", "writing pad"],
    "bicycle": ["bike", "road cycle"],
}

LIB = {
    "schedule_meeting": [
        "schedule a meeting with {p} about {t}",
        "set up a meeting with {p} on {t}",
        "book a meeting with {p} to cover {t}",
    ],
    "find_meeting_time": ["find a time when {p} are free", "check when {p} are available to meet"],
    "book_visa_slot": [
        "book a visa appointment in {c} for {k}",
        "reserve a consulate slot in {c} ({k} visa)",
    ],
    "watch_visa_slots": [
        "watch for visa slots in {c}",
        "tell me when a consulate slot opens in {c}",
    ],
    "purchase_item": ["buy a {i}", "purchase {i} from the shop", "buy {i} for the office"],
}
QUERY = {
    "schedule_meeting": [
        "arrange a call with {p} to discuss {t}",
        "get {p} together for a {t} session",
        "organise a catch-up with {p} regarding {t}",
        "put a {t} sync in the calendar with {p}",
    ],
    "find_meeting_time": [
        "when are {p} both free",
        "look for an open slot that suits {p}",
        "which hours do {p} have open",
    ],
    "book_visa_slot": [
        "get me a visa interview at the {c} consulate",
        "secure an embassy appointment in {c}",
        "grab the {c} visa interview for {k}",
    ],
    "watch_visa_slots": [
        "keep an eye on {c} visa availability",
        "alert me once {c} appointments free up",
        "monitor the {c} consulate calendar for openings",
    ],
    "purchase_item": ["order {i}", "get me {i}", "i need new {i}, please check out"],
}
OPS = {
    "schedule_meeting": "calendar freebusy query gate calendar create event mail send",
    "find_meeting_time": "calendar freebusy query",
    "book_visa_slot": "visa sandbox search slots gate visa sandbox book slot",
    "watch_visa_slots": "visa sandbox watch slots gate visa sandbox hold slot",
    "purchase_item": "shop search items gate shop place order",
}


def _pair(p: tuple[str, str]) -> str:
    return f"{p[0]} and {p[1]}"


def build() -> list[dict[str, object]]:
    rng = random.Random(15)
    plans: list[dict[str, object]] = []
    queries: list[dict[str, object]] = []
    n = 0

    def add(intent: str, request: str, entities: list[str], key: str) -> str:
        nonlocal n
        n += 1
        pid = f"01J{n:023d}"
        words = intent.replace("_", " ")
        plans.append(
            {
                "kind": "plan",
                "plan_id": pid,
                "intent": intent,
                "key": key,
                "text": f"{words} {request} {' '.join(entities)} {OPS[intent]}",
                "success": rng.randint(0, 6),
                "failure": rng.randint(0, 2),
                "days_ago": rng.randint(0, 120),
            }
        )
        return pid

    pairs: set[tuple[str, str]] = set()
    while len(pairs) < 36:
        a, b = rng.sample(PEOPLE, 2)
        pairs.add((a, b) if a < b else (b, a))
    pair_list = sorted(pairs)
    # meetings: each pair has one or two schedule plans and a find-time plan (distractor)
    for pair in pair_list:
        p = _pair(pair)
        for _ in range(rng.choice([1, 2])):
            t = rng.choice(TOPICS)
            add(
                "schedule_meeting",
                rng.choice(LIB["schedule_meeting"]).format(p=p, t=t),
                [*pair, t],
                f"schedule_meeting:{p}",
            )
        add(
            "find_meeting_time",
            rng.choice(LIB["find_meeting_time"]).format(p=p),
            list(pair),
            f"find_meeting_time:{p}",
        )
    # visas: each city has book and watch plans (each other's distractors)
    for city, country in CITIES:
        for intent in ("book_visa_slot", "watch_visa_slots"):
            for _ in range(rng.choice([1, 2])):
                add(
                    intent,
                    rng.choice(LIB[intent]).format(c=city, k=country),
                    [city, country],
                    f"{intent}:{city}",
                )
    for item in ITEMS:
        for _ in range(rng.choice([1, 2, 3])):
            add(
                "purchase_item",
                rng.choice(LIB["purchase_item"]).format(i=item),
                [item],
                f"purchase_item:{item}",
            )

    by_key: dict[str, list[str]] = {}
    for pl in plans:
        by_key.setdefault(str(pl["key"]), []).append(str(pl["plan_id"]))

    def ask(intent: str, text: str, key: str) -> None:
        queries.append({"kind": "query", "query": text, "intent": intent, "relevant": by_key[key]})

    for pair in pair_list:
        p = _pair(pair)
        for _ in range(2):
            order = pair if rng.random() < 0.5 else (pair[1], pair[0])
            ask(
                "schedule_meeting",
                rng.choice(QUERY["schedule_meeting"]).format(p=_pair(order), t=rng.choice(TOPICS)),
                f"schedule_meeting:{p}",
            )
        ask(
            "find_meeting_time",
            rng.choice(QUERY["find_meeting_time"]).format(p=p),
            f"find_meeting_time:{p}",
        )
    for city, country in CITIES:
        for intent in ("book_visa_slot", "watch_visa_slots"):
            for tpl in rng.sample(QUERY[intent], 2):
                ask(intent, tpl.format(c=city, k=country), f"{intent}:{city}")
    for item, synonyms in ITEMS.items():
        for word in (item, *synonyms):
            ask(
                "purchase_item",
                rng.choice(QUERY["purchase_item"]).format(i=word),
                f"purchase_item:{item}",
            )
    return plans + queries


def main() -> None:
    rows = build()
    OUT.write_text("".join(json.dumps(r, sort_keys=True) + "\n" for r in rows))
    print(
        f"{OUT.name}: {sum(r['kind'] == 'plan' for r in rows)} plans, "
        f"{sum(r['kind'] == 'query' for r in rows)} queries"
    )


if __name__ == "__main__":
    main()
