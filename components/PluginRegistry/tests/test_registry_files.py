"""Registry files: every broken file names the file and the field; the version tracks content."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml

from countersign.kernel import RegistryFileError, source_registry_dir
from countersign.registry import Registry, load_registry


@pytest.fixture
def reg_dir(tmp_path: Path) -> Path:
    target = tmp_path / "registry"
    shutil.copytree(source_registry_dir(), target)
    return target


def _edit(path: Path, change: Callable[[dict[str, object]], None]) -> None:
    doc = yaml.safe_load(path.read_text())
    change(doc)
    path.write_text(yaml.safe_dump(doc))


def test_shipped_registry_is_valid(registry: Registry) -> None:
    assert {
        "google.calendar",
        "gmail",
        "slack",
        "http",
        "caldav",
        "smtp",
        "system.analyze",
        "system.approval",
    } <= set(registry.connectors)
    assert set(registry.intent_names()) >= {"schedule_meeting", "purchase_item", "watch_visa_slots"}
    cal = registry.connectors["google.calendar"]
    assert set(cal.ops) >= {"list_free_busy", "create_event", "delete_event"}


def test_version_ignores_comments_and_layout(reg_dir: Path, registry: Registry) -> None:
    p = reg_dir / "connectors" / "gmail.yaml"
    p.write_text("# a comment\n" + yaml.safe_dump(yaml.safe_load(p.read_text()), indent=4))
    assert load_registry(reg_dir).version == registry.version


def test_version_changes_with_content(reg_dir: Path, registry: Registry) -> None:
    _edit(reg_dir / "connectors" / "gmail.yaml", lambda d: d.update(title="Gmail (work)"))
    assert load_registry(reg_dir).version != registry.version


def _set_op(field: str, value: object) -> Callable[[dict[str, object]], None]:
    def change(d: dict[str, object]) -> None:
        ops = d["ops"]
        assert isinstance(ops, dict)
        ops["send"][field] = value

    return change


@pytest.mark.parametrize(
    ("change", "field", "words"),
    [
        (_set_op("safety", "maybe"), "ops.send.safety", "Input should be"),
        (_set_op("previewable", True), "ops.send", "cannot be previewable"),
        (_set_op("idempotency", None), "ops.send", "idempotency"),
        (_set_op("colour", "red"), "ops.send.colour", "unknown field"),
        (_set_op("node", {"type": "x"}), "ops.send.node.type_version", "missing field"),
        (_set_op("params", {"sendTo": {"arg": "recipient"}}), "ops.send", "undeclared arg"),
        (
            _set_op("params", {"sendTo": {"arg": "to", "const": "x"}}),
            "ops.send.params.sendTo",
            "exactly one",
        ),
        (lambda d: d.pop("id"), "id", "missing field"),
    ],
)
def test_broken_connector_names_file_and_field(
    reg_dir: Path, change: Callable[[dict[str, object]], None], field: str, words: str
) -> None:
    path = reg_dir / "connectors" / "gmail.yaml"
    _edit(path, change)
    with pytest.raises(RegistryFileError) as info:
        load_registry(reg_dir)
    assert info.value.file == str(path)
    assert info.value.field == field
    assert words in info.value.message


def test_compensation_must_name_a_write(reg_dir: Path) -> None:
    path = reg_dir / "connectors" / "caldav.yaml"

    def change(d: dict[str, object]) -> None:
        ops = d["ops"]
        assert isinstance(ops, dict)
        ops["create_event"]["compensation"]["call"] = "list_free_busy"

    _edit(path, change)
    with pytest.raises(RegistryFileError, match="not a write op") as info:
        load_registry(reg_dir)
    assert info.value.field == "ops.create_event.compensation.call"


def test_intent_naming_unknown_op(reg_dir: Path) -> None:
    path = reg_dir / "intents" / "purchase_item.yaml"

    def change(d: dict[str, object]) -> None:
        steps = d["steps"]
        assert isinstance(steps, list)
        steps[0]["call"] = "teleport"

    _edit(path, change)
    with pytest.raises(RegistryFileError, match="no op 'teleport'") as info:
        load_registry(reg_dir)
    assert info.value.field == "steps[0].call"


def test_bad_yaml_names_the_line(reg_dir: Path) -> None:
    path = reg_dir / "connectors" / "slack.yaml"
    path.write_text("id: slack\nops: [\n")
    with pytest.raises(RegistryFileError) as info:
        load_registry(reg_dir)
    assert info.value.file == str(path)
    assert info.value.field is not None and info.value.field.startswith("line ")


def test_duplicate_connector_id(reg_dir: Path) -> None:
    shutil.copy(reg_dir / "connectors" / "gmail.yaml", reg_dir / "connectors" / "_gmail.yaml")
    with pytest.raises(RegistryFileError, match="also defined"):
        load_registry(reg_dir)


def test_file_name_must_match_id(reg_dir: Path) -> None:
    (reg_dir / "connectors" / "gmail.yaml").rename(reg_dir / "connectors" / "mail.yaml")
    with pytest.raises(RegistryFileError, match=r"gmail\.yaml"):
        load_registry(reg_dir)


def test_adding_a_connector_is_a_registry_edit(reg_dir: Path) -> None:
    """A new connector and an intent that uses it plan without any code change."""
    from countersign.kernel import Intent, Plan, Policy
    from countersign.planner import make_plan

    (reg_dir / "connectors" / "teams.yaml").write_text(
        yaml.safe_dump(
            {
                "id": "teams",
                "title": "Teams",
                "ops": {
                    "post": {
                        "node": {"type": "n8n-nodes-base.microsoftTeams", "type_version": 2},
                        "safety": "write",
                        "previewable": False,
                        "role": "Notifier",
                        "scopes": ["chat.write"],
                        "args": {"required": ["text"]},
                        "params": {"message": {"arg": "text"}},
                        "idempotency": {"via": "ledger"},
                    }
                },
            }
        )
    )
    (reg_dir / "intents" / "say_hello.yaml").write_text(
        yaml.safe_dump(
            {
                "name": "say_hello",
                "title": "Say hello",
                "required": [{"name": "text", "type": "string", "question": "Say what?"}],
                "steps": [
                    {
                        "id": "post",
                        "uses": "teams",
                        "call": "post",
                        "args": {"text": "$entities.text"},
                    }
                ],
            }
        )
    )
    reg = load_registry(reg_dir)
    intent = Intent.model_validate(
        {
            "intent": "say_hello",
            "intent_id": "01JDQ3Z0000000000000000000",
            "received_at": "2026-11-22T10:00:00Z",
            "user_id": "u1",
            "entities": {"text": "hi"},
        }
    )
    plan = make_plan(intent, [], reg, Policy())
    assert isinstance(plan, Plan)
    assert [(s.uses, s.gate_id) for s in plan.graph] == [
        ("system.approval", "gate-A"),
        ("teams", None),
    ]
