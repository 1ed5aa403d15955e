"""The error tree is complete: every class has its own code, and GLOBAL_SPEC §11 draws it
with the HTTP status the API answers it with."""

from __future__ import annotations

import asyncio
import importlib
import pkgutil
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from countersign.api.problems import status_for
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


def _spec_rows() -> dict[str, tuple[str, int]]:
    """GLOBAL_SPEC §11's table: class name → (code, HTTP status); a row may name several
    classes, with their codes in the same order."""
    spec = (ROOT / "GLOBAL_SPEC.md").read_text()
    section = spec[spec.index("## 11. Errors") : spec.index("## 11a.")]
    rows: dict[str, tuple[str, int]] = {}
    for line in section.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) < 3 or not cells[2].isdigit():
            continue
        names = re.findall(r"`([A-Za-z0-9_]+)`", cells[0])
        codes = re.findall(r"`([A-Za-z0-9_]+)`", cells[1])
        assert len(names) == len(codes), f"GLOBAL_SPEC §11 row {cells[0]!r}: names ≠ codes"
        for name, code in zip(names, codes, strict=True):
            assert name not in rows, f"GLOBAL_SPEC §11 lists {name} twice"
            rows[name] = (code, int(cells[2]))
    return rows


def test_global_spec_http_column_is_what_the_api_answers() -> None:
    """Every class's row (code and HTTP status) is what the code says: ``code`` and the API's
    ``status_for`` (built without its constructor: the status depends on the class alone)."""
    _load_everything()
    rows = _spec_rows()
    wrong = []
    for cls in _tree(CountersignError):
        code, status = rows[cls.__name__]
        answered = status_for(cls.__new__(cls))
        if (code, status) != (cls.code, answered):
            wrong.append(f"{cls.__name__}: spec {code} {status}, code {cls.code} {answered}")
    assert wrong == [], "GLOBAL_SPEC §11 differs from the code:\n" + "\n".join(wrong)


def test_temporal_unreachable_is_a_service_error() -> None:
    """The Temporal client's own ``RuntimeError`` never reaches a caller."""
    with pytest.raises(ServiceError, match=r"cannot reach Temporal at 127\.0\.0\.1:1 "):
        asyncio.run(connect("127.0.0.1:1"))
