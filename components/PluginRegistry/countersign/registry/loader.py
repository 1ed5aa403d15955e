"""Load ``registry/`` into an immutable, content-versioned snapshot (vR).

Layout::

    registry/connectors/<connector id>.yaml   one Connector each (YAML or JSON)
    registry/intents/<intent name>.yaml       one IntentSpec each

A broken file raises RegistryFileError naming the file and the field. Files are parsed strictly
(UTF-8, each key at most once per mapping: ``countersign.kernel.loads_yaml_strict``). The version
is the sha256 of the canonical JSON of every parsed file, so formatting and comments do not change
it and any change of content does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from pydantic import ValidationError

from countersign.kernel import (
    BindingError,
    DocumentError,
    RegistryFileError,
    content_hash,
    loads_strict,
    loads_yaml_strict,
    url_refusal,
)

from .models import Connector, IntentSpec, Operation

__all__ = ["Registry", "load_registry", "read_documents", "registry_from_documents"]

_SUFFIXES = {".yaml", ".yml", ".json"}
T = TypeVar("T", Connector, IntentSpec)


@dataclass(frozen=True)
class Registry:
    """A validated registry snapshot."""

    connectors: Mapping[str, Connector]
    intents: Mapping[str, IntentSpec]
    version: str
    sources: Mapping[str, str] = field(default_factory=dict)

    def op(self, uses: str, call: str, *, step: int | None = None) -> Operation:
        """The op ``uses.call``.

        Raises:
            BindingError: no such connector or op (names the step when given).
        """
        where = f"step {step}: " if step is not None else ""
        conn = self.connectors.get(uses)
        if conn is None:
            known = ", ".join(sorted(self.connectors))
            raise BindingError(f"{where}no connector {uses!r} in registry (known: {known})")
        op = conn.ops.get(call)
        if op is None:
            known = ", ".join(sorted(conn.ops))
            raise BindingError(f"{where}connector {uses!r} has no op {call!r} (known: {known})")
        return op

    def intent_names(self) -> list[str]:
        """Every intent the registry can plan, sorted."""
        return sorted(self.intents)

    def to_json(self) -> dict[str, Any]:
        """The content the version hashes."""
        return {
            "connectors": [self.connectors[k].to_json() for k in sorted(self.connectors)],
            "intents": [self.intents[k].to_json() for k in sorted(self.intents)],
        }


def _read(path: Path) -> Any:
    """One registry file, parsed strictly (UTF-8, no duplicate keys, no aliases, bounded depth:
    ``countersign.kernel.loads_yaml_strict``), so a file has one reading; RegistryFileError names
    the file and where."""
    try:
        data = path.read_bytes()
    except OSError as e:
        raise RegistryFileError(f"cannot read: {e.strerror}", file=str(path)) from e
    try:
        if path.suffix == ".json":
            return loads_strict(data, what=str(path))
        return loads_yaml_strict(data, what=str(path))
    except DocumentError as e:
        where = e.path or (f"line {e.line}" if e.line is not None else None)
        raise RegistryFileError(e.detail, file=str(path), field=where) from e


def _validate(model: type[T], data: Any, source: str) -> T:
    try:
        return model.model_validate(data)
    except ValidationError as e:
        first = e.errors()[0]
        loc = ".".join(str(p) for p in first["loc"]) or None
        msg = "unknown field" if first["type"] == "extra_forbidden" else first["msg"]
        if first["type"] == "missing":
            msg = "missing field"
        more = f" (and {e.error_count() - 1} more)" if e.error_count() > 1 else ""
        raise RegistryFileError(msg + more, file=source, field=loc) from e


def registry_from_documents(connectors: Mapping[str, Any], intents: Mapping[str, Any]) -> Registry:
    """Build a registry from decoded documents keyed by their source name (file path)."""
    conns: dict[str, Connector] = {}
    sources: dict[str, str] = {}
    for source, data in connectors.items():
        c = _validate(Connector, data, source)
        if c.id in conns:
            raise RegistryFileError(
                f"connector id {c.id!r} also defined in {sources[c.id]}", file=source, field="id"
            )
        conns[c.id] = c
        sources[c.id] = source
    ints: dict[str, IntentSpec] = {}
    for source, data in intents.items():
        i = _validate(IntentSpec, data, source)
        if i.name in ints:
            raise RegistryFileError(
                f"intent {i.name!r} also defined in {sources['intent:' + i.name]}",
                file=source,
                field="name",
            )
        ints[i.name] = i
        sources["intent:" + i.name] = source
    _cross_check(conns, ints, sources)
    reg = Registry(connectors=conns, intents=ints, version="0" * 64, sources=sources)
    return Registry(
        connectors=conns, intents=ints, version=content_hash(reg.to_json()), sources=sources
    )


def read_documents(folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Every file of a registry folder, parsed strictly but not validated:
    ``(connectors, intents)``, each keyed by file path (for overlays built on top of a folder).

    Raises:
        RegistryFileError: the folder is missing or a file is unreadable.
    """
    if not folder.is_dir():
        raise RegistryFileError("registry folder does not exist", file=str(folder))

    def docs(sub: str) -> dict[str, Any]:
        d = folder / sub
        files = sorted(p for p in d.iterdir() if p.suffix in _SUFFIXES) if d.is_dir() else []
        return {str(p): _read(p) for p in files}

    return docs("connectors"), docs("intents")


def load_registry(folder: Path) -> Registry:
    """Read and validate every file of a registry folder.

    Raises:
        RegistryFileError: a file is unreadable or breaks its schema or a cross-file rule.
    """
    return registry_from_documents(*read_documents(folder))


#: a URL template's literal scheme and host (``https://h:1/...``); a template may instead start
#: with a placeholder (a ``{@setting}`` base URL, checked when the service starts)
_URL_HEAD = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*):(//[^/{}?#]*)?")


def _url_problem(value: object, *, template: bool) -> str | None:
    """Why a registry URL constant or template may not be called (``kernel.url_refusal``:
    http(s) only, never link-local or a metadata service — the registry names no exceptions;
    a deployment's own base URL goes in a setting, which the policy's ``allow_hosts`` covers)."""
    if not isinstance(value, str):
        return None if value is None else f"a URL must be a string, found {value!r:.60}"
    if template and value.startswith("{"):
        return None
    head = _URL_HEAD.match(value)
    if template and (head is None or "{" in (head.group(2) or "{")):
        return "a URL template starts with http(s)://<literal host> or a {@setting} base URL"
    return url_refusal(head.group(0) + "/" if template and head else value)


def _check_urls(cid: str, c: Connector, src: str) -> None:
    for name, op in c.ops.items():
        for path, spec in op.params.items():
            if path.rsplit(".", 1)[-1].lower() not in {"url", "baseurl", "base_url"}:
                continue
            why = _url_problem(spec.template, template=True) or _url_problem(
                spec.const, template=False
            )
            if why:
                raise RegistryFileError(
                    f"{cid}.{name}: URL {why}", file=src, field=f"ops.{name}.params.{path}"
                )


def _cross_check(
    conns: Mapping[str, Connector], ints: Mapping[str, IntentSpec], sources: Mapping[str, str]
) -> None:
    for cid, c in conns.items():
        src = sources[cid]
        _check_urls(cid, c, src)
        if Path(src).stem not in {cid, "_" + cid} and not src.startswith("<"):
            raise RegistryFileError(
                f"file name must be the connector id ({cid}.yaml)", file=src, field="id"
            )
        for name, op in c.ops.items():
            comp = op.compensation
            if comp is None:
                continue
            target = c.ops.get(comp.call)
            if target is None or target.safety != "write":
                raise RegistryFileError(
                    f"compensation names {comp.call!r}, which is not a write op of {cid}",
                    file=src,
                    field=f"ops.{name}.compensation.call",
                )
            missing = set(target.args.required) - set(comp.args)
            if missing:
                raise RegistryFileError(
                    f"compensation lacks required arg(s) {sorted(missing)} of {comp.call}",
                    file=src,
                    field=f"ops.{name}.compensation.args",
                )
    for iname, spec in ints.items():
        src = sources["intent:" + iname]
        for i, t in enumerate(spec.steps):
            if t.uses.startswith("@"):
                continue  # a capability; the Policy picks the connector, checked when planning
            conn = conns.get(t.uses)
            if conn is None:
                raise RegistryFileError(
                    f"unknown connector {t.uses!r}", file=src, field=f"steps[{i}].uses"
                )
            if t.call not in conn.ops:
                raise RegistryFileError(
                    f"connector {t.uses!r} has no op {t.call!r}", file=src, field=f"steps[{i}].call"
                )
