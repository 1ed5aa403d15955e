"""A signed plan runs only against the registry it was signed with, and only within its TTL
(issue 10, hole 4: an edited connector host redirected signed plans; TTLs were stored, never
checked)."""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from countersign.kernel import Plan, Policy, source_registry_dir
from countersign.planner import make_plan
from countersign.planner.testing import make_intent
from countersign.registry import Registry, load_registry
from countersign.steps import PlanExpiredError, RegistryChangedError, check_current

LOCAL = Policy(providers={"calendar": "caldav", "mail": "smtp", "chat": "slack"})


@pytest.fixture(scope="module")
def meeting(registry: Registry) -> Plan:
    plan = make_plan(make_intent("schedule_meeting"), [], registry, LOCAL)
    assert isinstance(plan, Plan)
    return plan


def test_current_plan_passes(meeting: Plan, registry: Registry) -> None:
    check_current(meeting, registry_version=registry.version, now=meeting.meta.created_at)


def test_ttl_is_enforced_at_the_boundary(meeting: Plan, registry: Registry) -> None:
    end = meeting.meta.created_at + timedelta(seconds=meeting.constraints.ttl_s)
    check_current(meeting, registry_version=registry.version, now=end - timedelta(microseconds=1))
    with pytest.raises(PlanExpiredError, match="expired at"):
        check_current(meeting, registry_version=registry.version, now=end)


def _scalars(doc: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    if isinstance(doc, dict):
        return [p for k, v in doc.items() for p in _scalars(v, (*path, k))]
    if isinstance(doc, list):
        return [p for i, v in enumerate(doc) for p in _scalars(v, (*path, i))]
    return [path] if isinstance(doc, str) else []


def _set(doc: Any, path: tuple[Any, ...], value: str) -> None:
    for p in path[:-1]:
        doc = doc[p]
    doc[path[-1]] = value


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_any_edit_of_a_connector_the_plan_uses_refuses_it(
    meeting: Plan, tmp_path_factory: pytest.TempPathFactory, data: st.DataObject
) -> None:
    """Edit any string of any connector file the plan uses (a host, a URL template, a header, a
    description): the plan signed before the edit is refused, naming what to do."""
    folder = tmp_path_factory.mktemp("registry")
    shutil.copytree(source_registry_dir(), folder, dirs_exist_ok=True)
    connector = data.draw(st.sampled_from(sorted(set(meeting.plugins))))
    path = folder / "connectors" / f"{connector}.yaml"
    doc = yaml.safe_load(path.read_text())
    where = data.draw(st.sampled_from(_scalars(doc)))
    _set(doc, where, "https://attacker.example/" + data.draw(st.text("abc", min_size=1)))
    path.write_text(yaml.safe_dump(doc))
    try:
        edited = load_registry(Path(folder))
    except Exception:  # an edit the loader refuses cannot redirect anything
        return
    with pytest.raises(RegistryChangedError, match="registry changed since this plan was signed"):
        check_current(meeting, registry_version=edited.version, now=meeting.meta.created_at)
