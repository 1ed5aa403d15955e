"""Strict parsing of signed and security-relevant documents: one text, one reading.

Invariant (Kernel SPEC §7): a document that reaches a verifier, a planner or a runtime means the
same thing to every reader. ``json.loads`` and PyYAML keep the *last* of two equal keys, so a
file can show a reviewer one value and hand the program another (``{"user": "mallory",
"user": "alice"}`` hashes like the signed plan). Every plan, envelope, registry file, policy,
key ring and request body is therefore parsed here, and refused with a ``DocumentError``
naming the document (``what``) and the place when it:

- is not UTF-8 (``bytes`` are decoded strictly; a byte-order mark, UTF-16/32 or a NUL byte is
  named as such — ``json.loads(bytes)`` would silently guess UTF-16);
- repeats a key in any object or mapping (``DuplicateKeyError``, naming the key and its path);
- nests deeper than ``MAX_DEPTH`` (refused before the recursion limit turns it into a crash);
- holds ``NaN``/``Infinity`` (not JSON; RFC 8785 cannot carry them);
- (YAML) uses aliases or merge keys ``<<`` (a merged key is overridden silently; an alias
  makes one node two places, and expands exponentially).

Pure: no I/O. Callers read the bytes and pass them in with a name for the message.
"""

from __future__ import annotations

import json
from typing import Any, NoReturn

import yaml

from .errors import DocumentError, DuplicateKeyError

__all__ = ["MAX_DEPTH", "loads_strict", "loads_yaml_strict"]

#: Deepest nesting of objects/lists a document may have. Plans nest about 8 deep; person-supplied
#: values inside them are bounded by this too. Far below the interpreter's recursion limit, so
#: canonicalization and validation of an accepted document cannot hit it either.
MAX_DEPTH = 64

_BOMS = (
    (b"\x00\x00\xfe\xff", "UTF-32 (big-endian byte-order mark)"),
    (b"\xff\xfe\x00\x00", "UTF-32 (little-endian byte-order mark)"),
    (b"\xef\xbb\xbf", "UTF-8 with a byte-order mark"),
    (b"\xfe\xff", "UTF-16 (big-endian byte-order mark)"),
    (b"\xff\xfe", "UTF-16 (little-endian byte-order mark)"),
)


def _fail(what: str, message: str, path: str | None = None, line: int | None = None) -> NoReturn:
    raise DocumentError(message, what=what, path=path, line=line)


def _text(data: bytes | str, what: str) -> str:
    """The document as text: strict UTF-8, no byte-order mark, no NUL."""
    if isinstance(data, bytes | bytearray | memoryview):
        raw = bytes(data)
        for bom, name in _BOMS:
            if raw.startswith(bom):
                _fail(what, f"is {name}; documents must be UTF-8 without a byte-order mark")
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            _fail(
                what,
                f"is not UTF-8 (byte 0x{raw[e.start]:02x} at offset {e.start}); save it as UTF-8",
            )
    elif isinstance(data, str):
        text = data
        if text.startswith("\ufeff"):
            _fail(what, "starts with a byte-order mark; documents must be UTF-8 without one")
    else:
        _fail(what, f"expected bytes or str to parse, found {type(data).__name__}")
    nul = text.find("\x00")
    if nul >= 0:
        _fail(
            what,
            f"holds a NUL character at offset {nul} (UTF-16 or UTF-32 text?); "
            "documents must be UTF-8",
        )
    return text


class _Duplicate(dict[str, Any]):
    """Stands in for an object that repeated ``key``; found and reported after the parse."""

    def __init__(self, key: str) -> None:
        super().__init__()
        self.key = key


def _pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            # Not raised here: the hook does not know where it is; the walk below names the path.
            return _Duplicate(k)
        out[k] = v
    return out


def _constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def _step(path: str, key: object) -> str:
    if isinstance(key, int) and not isinstance(key, bool):
        return f"{path}[{key}]"
    return f"{path}.{key}"


def _walk(value: Any, what: str) -> None:
    """Iteratively: the first duplicate-key marker (by document order) and the depth bound."""
    stack: list[tuple[Any, str, int]] = [(value, "$", 0)]
    while stack:
        v, path, depth = stack.pop()
        if isinstance(v, _Duplicate):
            raise DuplicateKeyError(key=v.key, what=what, path=path)
        if isinstance(v, dict | list):
            if depth >= MAX_DEPTH:
                _fail(what, f"nests deeper than {MAX_DEPTH} levels")
            items = list(v.items()) if isinstance(v, dict) else list(enumerate(v))
            stack.extend((c, _step(path, k), depth + 1) for k, c in reversed(items))


def loads_strict(data: bytes | str, *, what: str) -> Any:
    """Parse one JSON document strictly (module docstring).

    Args:
        data: the document's bytes (preferred: the encoding is checked) or text.
        what: names the document in errors (a file path, ``"request body"``, ...).

    Raises:
        DuplicateKeyError: an object repeats a key (message names the key and its path).
        DocumentError: not UTF-8, not JSON, NaN/Infinity, or nested deeper than ``MAX_DEPTH``.
    """
    text = _text(data, what)
    try:
        value = json.loads(text, object_pairs_hook=_pairs, parse_constant=_constant)
    except json.JSONDecodeError as e:
        _fail(what, f"not JSON: {e.msg} at line {e.lineno} column {e.colno}", line=e.lineno)
    except ValueError as e:
        _fail(what, f"not JSON: {e}")
    except RecursionError:
        _fail(what, f"nests deeper than {MAX_DEPTH} levels")
    _walk(value, what)
    return value


class _StrictLoader(yaml.SafeLoader):
    """SafeLoader whose node tree is checked before anything is constructed."""


def _yaml_check(loader: _StrictLoader, root: yaml.Node, what: str) -> None:
    stack: list[tuple[yaml.Node, str, int]] = [(root, "$", 0)]
    visited: set[int] = set()
    while stack:
        node, path, depth = stack.pop()
        # An alias is the same node object reached twice.
        if id(node) in visited:
            line = node.start_mark.line + 1
            _fail(what, f"an alias repeats the node anchored at line {line}; not allowed", path)
        visited.add(id(node))
        if isinstance(node, yaml.MappingNode | yaml.SequenceNode) and depth >= MAX_DEPTH:
            _fail(what, f"nests deeper than {MAX_DEPTH} levels")
        if isinstance(node, yaml.SequenceNode):
            stack.extend(
                (child, f"{path}[{i}]", depth + 1)
                for i, child in reversed(list(enumerate(node.value)))
            )
        elif isinstance(node, yaml.MappingNode):
            seen: dict[Any, int] = {}
            children: list[tuple[yaml.Node, str, int]] = []
            for key_node, value_node in node.value:
                line = key_node.start_mark.line + 1
                if id(key_node) in visited:
                    _fail(what, f"line {line}: an alias as a mapping key; not allowed", path)
                visited.add(id(key_node))
                if key_node.tag == "tag:yaml.org,2002:merge":
                    _fail(what, f"line {line}: merge keys '<<' are not allowed", path)
                if not isinstance(key_node, yaml.ScalarNode):
                    _fail(what, f"line {line}: mapping keys must be plain scalars", path)
                key = loader.construct_object(key_node)
                try:
                    first = seen.get(key)
                except TypeError:
                    _fail(what, f"line {line}: mapping key {key!r} cannot be hashed", path)
                if first is not None:
                    raise DuplicateKeyError(
                        key=str(key), what=what, path=path, detail=f"lines {first} and {line}"
                    )
                seen[key] = line
                children.append((value_node, _step(path, key), depth + 1))
            stack.extend(reversed(children))


def loads_yaml_strict(data: bytes | str, *, what: str) -> Any:
    """Parse one YAML document (safe tags only) strictly (module docstring).

    Raises:
        DuplicateKeyError: a mapping repeats a key (names the key, its path and both lines).
        DocumentError: not UTF-8, not YAML, more than one document, aliases/merge keys,
            or nested deeper than ``MAX_DEPTH``.
    """
    text = _text(data, what)
    loader = _StrictLoader(text)
    try:
        root = loader.get_single_node()
        if root is None:
            return None
        _yaml_check(loader, root, what)
        return loader.construct_document(root)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f" at line {mark.line + 1} column {mark.column + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or str(e).splitlines()[0]
        _fail(what, f"not YAML: {problem}{where}", line=mark.line + 1 if mark else None)
    except RecursionError:
        _fail(what, f"nests deeper than {MAX_DEPTH} levels")
    finally:
        loader.dispose()
