"""Plan revisions as a tree (issue 26 §4): ``GET /v1/plans/{id}/revisions`` from any plan of a
tree gives the same tree from its root, each revision with why it was made; a revision forked from
an older plan is a sibling, not a child of the newest; another person's tree is 404; an approval of
one revision never carries over to another (the token is bound to the plan hash)."""

from __future__ import annotations

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
