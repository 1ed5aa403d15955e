"""Plan revisions as a tree (issue 26 §4): ``GET /v1/plans/{id}/revisions`` from any plan of a
tree gives the same tree from its root, each revision with why it was made; a revision forked from
an older plan is a sibling, not a child of the newest; another person's tree is 404; an approval of
one revision never carries over to another (the token is bound to the plan hash) — after three
re-plans by the person and one by the failure table, revision 1's approval is refused on every
other revision, which the refusal leaves as it was."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import httpx
import pytest

from countersign.api.testing import ALICE, BOB, ApiHarness, meeting_body

pytestmark = pytest.mark.slow


def _revise(c: httpx.Client, plan_id: str, **entities: Any) -> str:
    r = c.post(f"/v1/plans/{plan_id}/revise", json={"entities": entities})
    assert r.status_code == 201, r.text
    return str(r.json()["plan_id"])


def _ids(node: dict[str, Any]) -> list[Any]:
    return [node["plan_id"], [_ids(n) for n in node["revisions"]]]


def test_the_tree_from_any_revision_with_reasons_and_forks(api: ApiHarness) -> None:
    with api.client() as c:
        r = c.post("/v1/intents", json=meeting_body("Tree", day=3))
        assert r.status_code == 201, r.text
        root = r.json()["plan_id"]
        first = _revise(c, root, duration_min=45)
        deeper = _revise(c, first, title="Tree, longer")
        fork = _revise(c, root, duration_min=60)  # back to the first plan, another way
        tree = c.get(f"/v1/plans/{deeper}/revisions")
        assert tree.status_code == 200, tree.text
        body = tree.json()
        same = c.get(f"/v1/plans/{fork}/revisions").json()
        statuses = {p: c.get(f"/v1/plans/{p}").json()["status"] for p in (root, first, fork)}
    assert _ids(body["root"]) == [root, [[first, [[deeper, []]]], [fork, []]]]
    assert _ids(same["root"]) == _ids(body["root"]), "one tree, whichever plan is asked"
    assert body["plan_id"] == deeper and body["truncated"] is False
    top = body["root"]
    assert top["reason"] is None and top["changed"] == [] and not top["current"]
    a, b = top["revisions"]
    assert a["reason"] == "edited" and a["changed"] == ["duration_min"]
    assert a["revisions"][0]["changed"] == ["title"] and a["revisions"][0]["current"] is True
    assert b["reason"] == "edited" and b["changed"] == ["duration_min"] and not b["current"]
    assert [top["status"], a["status"], b["status"]] == [statuses[p] for p in (root, first, fork)]
    assert all(n["intent"] == "schedule_meeting" for n in (top, a, b))


def test_another_persons_tree_is_not_found(api: ApiHarness) -> None:
    with api.client() as c:
        root = c.post("/v1/intents", json=meeting_body("Tree", day=3)).json()["plan_id"]
        _revise(c, root, duration_min=45)
    with api.client(BOB) as other:
        r = other.get(f"/v1/plans/{root}/revisions")
    assert r.status_code == 404, r.text
    assert root not in r.text or r.json()["code"] == "plan_not_found"


def test_an_approval_never_carries_over_to_another_revision(api: ApiHarness) -> None:
    with api.client() as c:
        root = c.post("/v1/intents", json=meeting_body("Tree", day=3)).json()["plan_id"]
        assert c.post(f"/v1/plans/{root}/preview").status_code == 200
        child = _revise(c, root, duration_min=45)
        assert c.post(f"/v1/plans/{child}/preview").status_code == 200
        for source, target in ((root, child), (child, root)):
            options = c.get(f"/v1/plans/{source}").json()["gates"][0]["choices"]["options"]
            token = c.post(
                f"/v1/plans/{source}/gates/gate-A/approve", json={"choice": options[0]["value"]}
            ).json()["token"]
            r = c.post(f"/v1/plans/{target}/execute", json={"tokens": {"gate-A": token}})
            assert r.status_code in (403, 409, 422), r.text
            assert r.json()["code"].startswith(("approval_", "token_")), r.text
    assert api.radicale.events(ALICE) == [] and api.smtp.messages == []


def _shape(node: dict[str, Any]) -> list[Any]:
    """A tree node as its id, why it was made, what changed, and its children (in order)."""
    failure = (node.get("failure") or {}).get("class")
    kids = [_shape(n) for n in node["revisions"]]
    return [node["plan_id"], node["reason"], node["changed"], failure, node["status"], kids]


def _view(c: httpx.Client, plan_id: str) -> dict[str, Any]:
    r = c.get(f"/v1/plans/{plan_id}")
    assert r.status_code == 200, r.text
    return dict(r.json())


def _option(c: httpx.Client, plan_id: str) -> Any:
    return _view(c, plan_id)["gates"][0]["choices"]["options"][0]["value"]


def _told(c: httpx.Client, plan_id: str) -> list[str]:
    """The kinds of the plan's events, in order, read from its event stream."""
    with c.stream("GET", f"/v1/plans/{plan_id}/events", params={"follow": "false"}) as r:
        assert r.status_code == 200
        return [line[6:].strip() for line in r.iter_lines() if line.startswith("event:")]


def _busy(api: ApiHarness, slot: dict[str, str]) -> None:
    """Bob's calendar gets an event over ``slot`` (the world moves)."""
    start, end = (
        datetime.fromisoformat(slot[k].replace("Z", "+00:00")).strftime("%Y%m%dT%H%M%SZ")
        for k in ("start", "end")
    )
    api.radicale.add_event(BOB, "moved-world", start, end, "dentist")


def test_the_tree_after_three_replans_and_a_failure_refuses_revision_1s_approval_everywhere(
    api: ApiHarness,
) -> None:
    """Three re-plans by the person (an edit, a dropped evidence item, an edit forked from the
    first plan) and one by the failure table (the approved slot taken: stale): one tree from
    every plan of it, each revision with its reason and its parent; an approval of revision 1 is
    refused on every other revision and writes nothing."""
    with api.client() as c:
        prefs = {"work_hours": {"start": "00:00", "end": "23:59"}}
        assert c.put("/v1/memory/prefs", json={"prefs": prefs}).status_code == 200
        body = meeting_body("Three re-plans", day=6)
        body["intent"]["context_budget"] = 5  # the work hours are evidence the person can drop
        made = c.post("/v1/intents", json=body)
        assert made.status_code == 201, made.text
        root = made.json()["plan_id"]
        evidence = made.json()["evidence"]
        assert "work_hours" in {e["key"] for e in evidence}, evidence
        first_token = c.post(
            f"/v1/plans/{root}/gates/gate-A/approve", json={"choice": _option(c, root)}
        ).json()["token"]
        longer = _revise(c, root, duration_min=45)
        r = c.post(f"/v1/plans/{longer}/replan", json={"drop": ["pref:work_hours"]})
        assert r.status_code == 201, r.text
        dropped = r.json()["plan_id"]
        fork = _revise(c, root, title="Three re-plans, renamed")
        # the person approves the dropped-evidence revision; the slot is taken before it runs
        slot = _option(c, dropped)
        token = c.post(f"/v1/plans/{dropped}/gates/gate-A/approve", json={"choice": slot}).json()[
            "token"
        ]
        _busy(api, slot)
        try:
            r = c.post(f"/v1/plans/{dropped}/execute", json={"tokens": {"gate-A": token}})
            assert r.status_code == 409 and r.json()["code"] == "stale_world", r.text
            trees = {p: c.get(f"/v1/plans/{p}/revisions") for p in (root, longer, dropped, fork)}
            (after,) = trees[dropped].json()["root"]["revisions"][0]["revisions"][0]["revisions"]
            failed = after["plan_id"]
            trees[failed] = c.get(f"/v1/plans/{failed}/revisions")
            nodes = (longer, dropped, fork, failed)
            views = {p: _view(c, p) for p in nodes}
            statuses = {p: views[p]["status"] for p in (*nodes,)}
            statuses[root] = _view(c, root)["status"]
            # revision 1's approval, on every other revision: refused, nothing written
            for target in nodes:
                told = _told(c, target)
                r = c.post(f"/v1/plans/{target}/execute", json={"tokens": {"gate-A": first_token}})
                assert r.status_code in (403, 409, 422), (target, r.text)
                code = r.json()["code"]
                assert code.startswith(("approval_", "token_", "plan_")), (target, r.text)
                # only the refusal is told on the plan's stream; the plan is as it was
                new = _told(c, target)[len(told) :]
                assert new == ["token_refused"], (target, new)
                now = _view(c, target)
                assert now.pop("events") == views[target]["events"] + 1
                assert now == {k: v for k, v in views[target].items() if k != "events"}, target
            assert api.radicale.events(ALICE) == [] and api.smtp.messages == []
            assert len(api.radicale.events(BOB)) == 1, "only the event that moved the world"
            # the failure's revision, approved on its own, writes (once)
            own = c.post(
                f"/v1/plans/{failed}/gates/gate-A/approve", json={"choice": _option(c, failed)}
            ).json()["token"]
            done = c.post(f"/v1/plans/{failed}/execute", json={"tokens": {"gate-A": own}})
            assert done.status_code == 202 and done.json()["status"] == "completed", done.text
            assert len(api.radicale.events(ALICE)) == 1
        finally:
            for name in api.radicale.events(BOB):
                httpx.delete(api.radicale.calendar_url(BOB) + name, timeout=5)
    want = [
        root,
        None,
        [],
        None,
        statuses[root],
        [
            [
                longer,
                "edited",
                ["duration_min"],
                None,
                statuses[longer],
                [
                    [
                        dropped,
                        "evidence_dropped",
                        ["evidence"],
                        None,
                        statuses[dropped],
                        [[failed, "failure", ["failure"], "stale", statuses[failed], []]],
                    ]
                ],
            ],
            [fork, "edited", ["title"], None, statuses[fork], []],
        ],
    ]
    for asked, tree in trees.items():
        assert tree.status_code == 200, tree.text
        assert tree.json()["plan_id"] == asked and tree.json()["truncated"] is False
        assert _shape(tree.json()["root"]) == want, asked
    assert statuses[dropped] == "stale" and statuses[failed] == "previewed", statuses
