"""Registry files are parsed strictly (issue 10, holes 6 and 7).

PyYAML keeps the last of two equal keys, so a connector file could show a reviewer one host and
hand the runtime another. Each case takes a shipped registry file, picks any mapping at any depth
and any key in it, writes the file with that key a second time (altered value, before or after
the original), and checks that loading the registry refuses it naming the file, the place and the
key. Files in another encoding are refused naming the file, never a UnicodeDecodeError.
"""

from __future__ import annotations

import random
import shutil
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from countersign.kernel import RegistryFileError, source_registry_dir
from countersign.registry import load_registry

_FILES = sorted(p.relative_to(source_registry_dir()) for p in source_registry_dir().rglob("*.yaml"))
_MARKER = "zz_duplicate_marker_zz"


def _mappings(value: Any, path: str = "$") -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    if isinstance(value, dict):
        if value:
            out.append((path, value))
        for k, v in value.items():
            out += _mappings(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _mappings(v, f"{path}[{i}]")
    return out


def _altered(value: Any) -> Any:
    if isinstance(value, str):
        return value + ".attacker.example"
    if isinstance(value, bool):
        return not value
    if isinstance(value, int | float):
        return value + 1
    return "attacker"


@pytest.fixture(scope="module")
def reg_copy(tmp_path_factory: pytest.TempPathFactory) -> Path:
    target = tmp_path_factory.mktemp("strict") / "registry"
    shutil.copytree(source_registry_dir(), target)
    return target


@settings(
    max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(file=st.sampled_from(_FILES), seed=st.integers(0, 2**64), first=st.booleans())
def test_a_key_twice_in_any_registry_file_is_refused(
    reg_copy: Path, file: Path, seed: int, first: bool
) -> None:
    path = reg_copy / file
    original = (source_registry_dir() / file).read_text(encoding="utf-8")
    doc = yaml.safe_load(original)
    rnd = random.Random(seed)
    where, target = rnd.choice(_mappings(doc))
    key = rnd.choice(list(target))
    items = list(target.items())
    i = [k for k, _ in items].index(key)
    items.insert(i if first else i + 1, (_MARKER, _altered(target[key])))
    target.clear()
    target.update(items)
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=10**6)
    quoted = yaml.safe_dump(key, default_style='"', allow_unicode=True, width=10**6)
    path.write_text(text.replace(_MARKER, quoted.splitlines()[0]), encoding="utf-8")
    try:
        with pytest.raises(RegistryFileError) as info:
            load_registry(reg_copy)
    finally:
        path.write_text(original, encoding="utf-8")
    assert info.value.file == str(path)
    assert info.value.field == where
    assert f"key {key!r} appears more than once" in info.value.message


@pytest.mark.parametrize("encoding", ["utf-16", "utf-16-be", "utf-32", "utf-8-sig", "latin-1"])
def test_a_registry_file_in_another_encoding_is_refused(tmp_path: Path, encoding: str) -> None:
    reg = tmp_path / "registry"
    shutil.copytree(source_registry_dir(), reg)
    path = reg / "connectors" / "slack.yaml"
    text = path.read_text(encoding="utf-8").replace("Slack", "Slack Bürochat", 1)
    path.write_bytes(text.encode(encoding))
    with pytest.raises(RegistryFileError) as info:
        load_registry(reg)
    assert info.value.file == str(path) and "UTF-8" in info.value.message


def test_the_shipped_registry_still_loads_strictly() -> None:
    reg = load_registry(source_registry_dir())
    assert reg.connectors and reg.intents
