"""Person-supplied input the API refuses instead of misreading or crashing (GLOBAL_SPEC §11a).

- Every route that takes a JSON body — walked from the app's own routes, not listed here —
  refuses a key given twice (plainly, ``\\u``-escaped, nested, in a list) with 422
  ``document_duplicate_key`` naming the key and its path, before its handler runs: no table
  gains or loses a row.
- ``Last-Event-ID`` is ASCII digits or a 422 ``invalid_cursor`` problem: ``²`` used to be a
  plain-text 500 (``isdigit`` then ``int``), ``٣`` and ``０`` a second spelling of an event id.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from fastapi.routing import APIRoute, iter_route_contexts
from pydantic import TypeAdapter
from sqlalchemy import text

from countersign.api.bodies import StrictJsonRoute
from countersign.api.testing import ALICE, BOB, ApiHarness
from countersign.kernel import format_utc


def _counts(h: ApiHarness) -> dict[str, int]:
    with h.db.tx() as c:
        tables = c.execute(
            text("SELECT tablename FROM pg_tables WHERE schemaname = current_schema()")
        ).scalars()
        return {t: int(c.execute(text(f'SELECT count(*) FROM "{t}"')).scalar_one()) for t in tables}


def _body_routes(h: ApiHarness) -> list[APIRoute]:
    assert h.app is not None
    # routers are included as a whole: each route as its router declared it
    routes = [c.original_route for c in iter_route_contexts(h.app.routes)]
    return [r for r in routes if isinstance(r, APIRoute) and r.body_field is not None]


def _url(route: APIRoute) -> str:
    fill = {"plan_id": "01JZZZZZZZZZZZZZZZZZZZZZZZ", "gate_id": "gate-A", "kind": "connectors"}
    fill["name"] = "caldav"
    return route.path.format(**fill)


def _first_key(route: APIRoute) -> str:
    """A member the route's body really has (so the duplicate is of a meaningful key)."""
    assert route.body_field is not None
    schema = TypeAdapter(route.body_field.field_info.annotation or dict).json_schema()
    defs = schema.get("$defs", {})
    for option in [schema, *schema.get("anyOf", [])]:
        found = defs[option["$ref"].rsplit("/", 1)[-1]] if "$ref" in option else option
        if found.get("properties"):
            return str(next(iter(found["properties"])))
    return "id"  # a free-form object (a registry document)


def _bodies(key: str) -> list[tuple[bytes, str, str]]:
    """(body, the key named, the path named): the same key twice, spelled four ways."""
    esc = f"\\u{ord(key[0]):04x}{key[1:]}"
    return [
        (b'{"%s": null, "%s": null}' % (key.encode(), key.encode()), key, "$"),
        (b'{"%s": null, "%s": null}' % (esc.encode(), key.encode()), key, "$"),
        (b'{"%s": {"a": 1, "\\u0061": 2}}' % key.encode(), "a", f"$.{key}"),
        (b'{"%s": [{"x": 1}, {"x": 1, "x": 1}]}' % key.encode(), "x", f"$.{key}[1]"),
    ]


def test_every_json_body_route_refuses_duplicate_keys_and_stores_nothing(api: ApiHarness) -> None:
    routes = _body_routes(api)
    assert {r.path for r in routes} >= {
        "/v1/intents",
        "/v1/plans/{plan_id}/gates/{gate_id}/approve",
        "/v1/registry/{kind}/{name}",
        "/codec/decode",
    }
    assert all(isinstance(r, StrictJsonRoute) for r in routes)
    before = _counts(api)
    tried = 0
    for route in routes:
        user = "root" if route.path.startswith("/v1/registry") else ALICE
        with api.client(user) as c:
            for method in sorted(route.methods or ()):
                for body, key, path in _bodies(_first_key(route)):
                    r = c.request(
                        method,
                        _url(route),
                        content=body,
                        headers={"Content-Type": "application/json"},
                    )
                    where = f"{method} {route.path} {body!r}"
                    assert r.status_code == 422, (where, r.text)
                    assert r.headers["content-type"].startswith("application/problem+json")
                    doc = r.json()
                    assert doc["code"] == "document_duplicate_key", (where, doc)
                    assert (doc["key"], doc["path"]) == (key, path), (where, doc)
                    assert repr(key) in doc["detail"]
                    tried += 1
    assert tried >= 4 * len(routes)
    assert _counts(api) == before


@pytest.mark.parametrize(
    "body",
    [b'{"a": NaN}', b'{"a": 1e400, "b": Infinity}', b"\xff\xfe{}", b"[" * 70 + b"]" * 70],
)
def test_malformed_bodies_are_document_problems(api: ApiHarness, body: bytes) -> None:
    with api.client() as c:
        r = c.post("/v1/intents", content=body, headers={"Content-Type": "application/json"})
    assert r.status_code == 422 and r.json()["code"] == "document_malformed", r.text


@pytest.mark.parametrize("last", ["²", "٣", "０", "①", "𝟘", "1²", "٣٣", "+1", "1_0", "1e3", "-1"])
def test_last_event_id_is_ascii_digits_or_a_problem(api: ApiHarness, last: str) -> None:
    plan_id = _a_plan(api)
    with api.client() as c:
        ok = c.get(f"/v1/plans/{plan_id}/events?follow=false", headers={"Last-Event-ID": "1"})
        assert ok.status_code == 200, ok.text  # the control: ASCII digits resume
        # the header's bytes as a client sends them (UTF-8)
        r = c.get(
            f"/v1/plans/{plan_id}/events",
            params={"follow": "false"},
            headers={b"Last-Event-ID": last.encode()},
        )
    assert r.status_code == 422, r.text
    assert r.headers["content-type"].startswith("application/problem+json")
    assert r.json()["code"] == "invalid_cursor"


def _a_plan(api: ApiHarness) -> str:
    """One of Alice's plans: a meeting tomorrow afternoon (its preview reads the sandbox)."""
    day = datetime.now(UTC).replace(hour=0, minute=0, second=0, microsecond=0) + timedelta(days=1)
    entities = {
        "participants": [ALICE, BOB],
        "duration_min": 30,
        "title": "Sync",
        "window_start": format_utc(day + timedelta(hours=13)),
        "window_end": format_utc(day + timedelta(hours=18)),
    }
    with api.client() as c:
        r = c.post(
            "/v1/intents", json={"intent": {"intent": "schedule_meeting", "entities": entities}}
        )
    assert r.status_code == 201, r.text
    return str(r.json()["plan_id"])
