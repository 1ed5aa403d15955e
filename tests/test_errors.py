"""The error tree is complete: every class has its own code, and GLOBAL_SPEC §11 draws it."""

from __future__ import annotations

import asyncio
import importlib
import pkgutil
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from countersign.durable.worker import connect
from countersign.kernel import CountersignError
from countersign.kernel.process import ServiceError

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = [
    p.name
    for comp in sorted((ROOT / "components").iterdir())
    for p in (comp / "countersign").iterdir()
    if p.is_dir() and not p.name.startswith("__")
]


def _load_everything() -> None:
    for name in PACKAGES:
        mod = importlib.import_module(f"countersign.{name}")
        for sub in pkgutil.walk_packages(mod.__path__, f"countersign.{name}."):
            if not any(x in sub.name for x in ("__main__", "migrations")):
                importlib.import_module(sub.name)


def _tree(cls: type[CountersignError]) -> Iterator[type[CountersignError]]:
    yield cls
    for sub in cls.__subclasses__():
        yield from _tree(sub)


def test_every_error_has_its_own_code() -> None:
    _load_everything()
    seen: dict[str, str] = {}
    for cls in _tree(CountersignError):
        assert cls.code, cls
        if cls is not CountersignError:
            assert cls.code != cls.__mro__[1].code, f"{cls.__name__} repeats its parent's code"  # type: ignore[attr-defined]
        other = seen.setdefault(cls.code, cls.__qualname__)
        assert other == cls.__qualname__, f"code {cls.code!r}: {other} and {cls.__qualname__}"


def test_global_spec_draws_the_whole_tree() -> None:
    _load_everything()
    spec = (ROOT / "GLOBAL_SPEC.md").read_text()
    section = spec[spec.index("## 11. Errors") : spec.index("## 11a.")]
    listed = set(re.findall(r"`([A-Za-z0-9_]+)`", section))
    missing = sorted(
        f"{c.__name__} ({c.code})"
        for c in _tree(CountersignError)
        if c.code not in listed or c.__name__ not in listed
    )
    assert missing == [], f"GLOBAL_SPEC §11 does not list: {missing}"


def test_temporal_unreachable_is_a_service_error() -> None:
    """The Temporal client's own ``RuntimeError`` never reaches a caller."""
    with pytest.raises(ServiceError, match=r"cannot reach Temporal at 127\.0\.0\.1:1 "):
        asyncio.run(connect("127.0.0.1:1"))
