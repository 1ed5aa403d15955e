"""A plan's revisions as the tree a person navigates (issue 26 §4, Api SPEC "Revisions").

Every revision names the plan it revises (``plan_revised`` on both plans: ``revises`` on the new
one, ``revised_by`` on the old one, with why: ``reason`` and what ``changed``). From any plan of a
tree, the root is found by following ``revises`` up, and each plan's children by its
``revised_by`` events, oldest first. Each node says what the plan is now (status folded from its
events) and why it exists; the plan asked about is marked ``current``. A revision is a new plan,
signed and approved on its own: an approval of one never carries over to another (the token is
bound to the plan hash).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from countersign.kernel import format_utc

from ..errors import PlanNotFoundError
from .views import PlanViews

__all__ = ["MAX_DEPTH", "MAX_NODES", "revision_tree"]

#: how far up a tree is followed, and how many plans one answer holds at most
MAX_DEPTH = 64
MAX_NODES = 200


def revision_tree(views: PlanViews, plan_id: str, user_id: str) -> dict[str, Any]:
    """The tree of revisions ``plan_id`` belongs to (the caller's plans only; another's is 404).

    Raises:
        PlanNotFoundError: no such plan of the caller.
    """
    views.row(plan_id, user_id)
    root, seen = plan_id, {plan_id}
    for _ in range(MAX_DEPTH):
        parent = views.parent_of(root)
        if parent is None or parent in seen:
            break
        seen.add(parent)
        root = parent
    budget = [MAX_NODES]
    tree = _node(views, root, user_id, plan_id, {}, budget, set())
    if tree is None:  # the root is not the caller's: start from the plan asked about
        tree = _node(views, plan_id, user_id, plan_id, {}, budget, set())
    return {"plan_id": plan_id, "root": tree, "truncated": budget[0] <= 0}


def _node(
    views: PlanViews,
    pid: str,
    user_id: str,
    current: str,
    why: Mapping[str, Any],
    budget: list[int],
    visited: set[str],
) -> dict[str, Any] | None:
    """One plan and its revisions below it (depth first, oldest child first)."""
    if pid in visited or budget[0] <= 0:
        return None
    visited.add(pid)
    try:
        row = views.row(pid, user_id)
    except PlanNotFoundError:
        return None
    budget[0] -= 1
    events = views.events.since(pid, 0, limit=500)
    out: dict[str, Any] = {
        "plan_id": pid,
        "intent": row["intent"],
        "created_at": format_utc(row["created_at"]),
        "status": views.state(pid).status,
        "current": pid == current,
        "reason": why.get("reason") or ("edited" if why.get("changed") else None),
        "changed": list(why.get("changed") or []),
    }
    if why.get("dropped"):
        out["dropped"] = list(why["dropped"])
    if isinstance(why.get("failure"), Mapping):  # re-planned after a failure: its class, words
        out["failure"] = dict(why["failure"])
    children = []
    for child, details in _revised_by(events):
        node = _node(views, child, user_id, current, details, budget, visited)
        if node is not None:
            children.append(node)
    out["revisions"] = children
    return out


def _revised_by(events: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """The plans that revise this one, oldest first, each once, with the event's details."""
    found: dict[str, dict[str, Any]] = {}
    for e in events:
        details = e.get("details") or {}
        child = details.get("revised_by") if e.get("kind") == "plan_revised" else None
        if isinstance(child, str) and child not in found:
            found[child] = dict(details)
    return list(found.items())
