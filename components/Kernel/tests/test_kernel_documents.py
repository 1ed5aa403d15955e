"""The strict loaders: one reading per document (issue 10, holes 6 and 7; Kernel SPEC §7).

Every valid document reads as ``json.loads`` / ``yaml.safe_load`` read it; a key repeated in any
object at any depth, a non-UTF-8 encoding, or nesting beyond ``MAX_DEPTH`` is a ``DocumentError``
naming the document — never a silently kept last value, a ``UnicodeDecodeError`` or a
``RecursionError``.
"""

from __future__ import annotations

import json
import random
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from countersign.kernel import (
    MAX_DEPTH,
    DocumentError,
    DuplicateKeyError,
    loads_strict,
    loads_yaml_strict,
)

_keys = st.text(alphabet=st.characters(codec="utf-8", exclude_characters="\x00"), max_size=8)
_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**53) + 1, 2**53 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(codec="utf-8"), max_size=10)
)
json_values = st.recursive(
    _scalars,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(_keys, children, max_size=4),
    max_leaves=30,
)
documents = st.dictionaries(_keys, json_values, min_size=1, max_size=4)
# YAML keys: printable text (PyYAML itself does not round-trip keys such as "\x85").
_yaml_keys = st.text(
    alphabet=st.characters(codec="utf-8", categories=("L", "N", "P", "S", "Zs")), max_size=8
)
yaml_documents = st.dictionaries(
    _yaml_keys,
    st.recursive(
        _scalars,
        lambda children: (
            st.lists(children, max_size=4) | st.dictionaries(_yaml_keys, children, max_size=4)
        ),
        max_leaves=30,
    ),
    min_size=1,
    max_size=4,
)


def _objects(value: Any, path: str = "$") -> list[tuple[str, dict[str, Any]]]:
    out: list[tuple[str, dict[str, Any]]] = []
    if isinstance(value, dict):
        if value:
            out.append((path, value))
        for k, v in value.items():
            out += _objects(v, f"{path}.{k}")
    elif isinstance(value, list):
        for i, v in enumerate(value):
            out += _objects(v, f"{path}[{i}]")
    return out


def _dump_dup(value: Any, target: dict[str, Any], key: str, extra: Any, first: bool) -> str:
    if isinstance(value, dict):
        members = [
            (json.dumps(k), _dump_dup(v, target, key, extra, first)) for k, v in value.items()
        ]
        if value is target:
            i = list(value).index(key)
            members.insert(i if first else i + 1, (json.dumps(key), json.dumps(extra)))
        return "{" + ",".join(f"{k}:{v}" for k, v in members) + "}"
    if isinstance(value, list):
        return "[" + ",".join(_dump_dup(v, target, key, extra, first) for v in value) + "]"
    return json.dumps(value)


@settings(max_examples=300, deadline=None)
@given(doc=documents, indent=st.sampled_from([None, 1, "\t"]), ascii_only=st.booleans())
def test_a_valid_document_reads_as_json_reads_it(doc: Any, indent: Any, ascii_only: bool) -> None:
    text = json.dumps(doc, indent=indent, ensure_ascii=ascii_only)
    assert loads_strict(text.encode(), what="d.json") == json.loads(text)
    assert loads_strict(text, what="d.json") == json.loads(text)


@settings(max_examples=300, deadline=None)
@given(doc=documents, seed=st.integers(0, 2**64), extra=json_values, first=st.booleans())
def test_a_key_twice_at_any_depth_is_refused_naming_key_and_path(
    doc: Any, seed: int, extra: Any, first: bool
) -> None:
    rnd = random.Random(seed)
    path, target = rnd.choice(_objects(doc))
    key = rnd.choice(list(target))
    text = _dump_dup(doc, target, key, extra, first)
    with pytest.raises(DuplicateKeyError) as info:
        loads_strict(text.encode(), what="d.json")
    assert info.value.key == key and info.value.path == path
    assert info.value.code == "document_duplicate_key"


@settings(max_examples=200, deadline=None)
@given(doc=yaml_documents, seed=st.integers(0, 2**64), extra=json_values, first=st.booleans())
def test_yaml_a_key_twice_at_any_depth_is_refused(
    doc: Any, seed: int, extra: Any, first: bool
) -> None:
    """Block-style YAML: the duplicate goes in as a placeholder key and is renamed in the text."""
    assert loads_yaml_strict(yaml.safe_dump(doc), what="d.yaml") == yaml.safe_load(
        yaml.safe_dump(doc)
    )
    rnd = random.Random(seed)
    path, target = rnd.choice(_objects(doc))
    key = rnd.choice(list(target))
    marker = "zz_duplicate_marker_zz"
    items = list(target.items())
    i = [k for k, _ in items].index(key)
    items.insert(i if first else i + 1, (marker, extra))
    target.clear()
    target.update(items)
    text = yaml.safe_dump(doc, sort_keys=False, allow_unicode=True, width=10**6)
    assert text.count(marker) == 1
    quoted = yaml.safe_dump(key, default_style='"', allow_unicode=True, width=10**6)
    text = text.replace(marker, quoted.splitlines()[0])
    # PyYAML itself keeps one of the two silently
    assert isinstance(yaml.safe_load(text), dict)
    with pytest.raises(DuplicateKeyError) as info:
        loads_yaml_strict(text.encode(), what="d.yaml")
    assert info.value.key == key and info.value.path == path


@settings(max_examples=200, deadline=None)
@given(
    doc=documents,
    encoding=st.sampled_from(
        [
            "utf-16",
            "utf-16-le",
            "utf-16-be",
            "utf-32",
            "utf-32-le",
            "utf-8-sig",
            "latin-1",
            "cp1252",
        ]
    ),
    yaml_too=st.booleans(),
)
def test_other_encodings_are_refused_naming_the_file(
    doc: Any, encoding: str, yaml_too: bool
) -> None:
    text = json.dumps(doc, ensure_ascii=False)
    if encoding in {"latin-1", "cp1252"}:
        text = json.dumps({"name": "Müller café", "doc": doc}, ensure_ascii=False)
    try:
        data = text.encode(encoding)
    except UnicodeEncodeError:
        data = json.dumps({"name": "Müller"}, ensure_ascii=False).encode(encoding)
    load = loads_yaml_strict if yaml_too else loads_strict
    with pytest.raises(DocumentError) as info:
        load(data, what="/x/policy.json")
    assert info.value.message.startswith("/x/policy.json: ")
    assert "UTF-8" in info.value.message


@pytest.mark.parametrize("depth", [MAX_DEPTH + 1, 5_000, 200_000])
@pytest.mark.parametrize("open_close", [("[", "]"), ('{"a":', "}")])
def test_deep_nesting_is_refused_not_a_recursion_error(
    depth: int, open_close: tuple[str, str]
) -> None:
    o, c = open_close
    text = o * depth + "1" + c * depth
    with pytest.raises(DocumentError, match="nests deeper"):
        loads_strict(text.encode(), what="deep.json")
    with pytest.raises(DocumentError):
        loads_yaml_strict(text.encode(), what="deep.yaml")


def test_nesting_up_to_the_bound_reads() -> None:
    text = "[" * MAX_DEPTH + "]" * MAX_DEPTH
    assert loads_strict(text, what="ok.json") is not None


@pytest.mark.parametrize(
    "text", ["a: &x 1\nb: *x\n", "base: &b {k: 1}\nuse:\n  <<: *b\n  k: 2\n", "a: 1\n---\nb: 2\n"]
)
def test_yaml_aliases_merges_and_streams_are_refused(text: str) -> None:
    with pytest.raises(DocumentError):
        loads_yaml_strict(text, what="r.yaml")


@pytest.mark.parametrize("text", ['{"a": NaN}', '{"a": Infinity}', "[-Infinity]", "{"])
def test_not_json_is_refused(text: str) -> None:
    with pytest.raises(DocumentError, match="not JSON"):
        loads_strict(text, what="x.json")
