"""The ``countersign`` command line."""

# Lazy (PEP 562): ``countersign.cli.main`` (the console script) must not load the signing verbs.
from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .files import read_document
    from .main import app, main
    from .signing import plan_document

__all__ = ["app", "main", "plan_document", "read_document"]

_LAZY: dict[str, str] = {
    "app": "main",
    "main": "main",
    "plan_document": "signing",
    "read_document": "files",
}

if not TYPE_CHECKING:
    # its own copy of kernel.lazy_exports: `verify FILE` must not import countersign.kernel

    def __getattr__(name: str) -> object:
        module = _LAZY.get(name)
        if module is None:
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{module}", __name__), name)
        globals()[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*globals(), *_LAZY})
