"""The complexity budget (GLOBAL_SPEC "Code budget"): what ruff cannot say about size.

Ruff enforces the branch-shaped limits (C901 <= 15, PLR0911 / PLR0912 / PLR0915 at their
defaults, ``pyproject.toml``); this file holds the two that are about length: no production
function longer than a screen and no production module longer than a careful read. Alembic
migrations are history and are never edited, so they are left out.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MAX_FUNCTION_LINES = 60
MAX_FILE_LINES = 600


def _production_files() -> list[Path]:
    return sorted(
        p
        for p in ROOT.glob("components/*/countersign/**/*.py")
        if "migrations" not in p.parts and "tests" not in p.parts
    )


def test_production_files_are_under_the_budget() -> None:
    long = []
    for path in _production_files():
        lines = len(path.read_text().splitlines())
        if lines >= MAX_FILE_LINES:
            long.append(f"{path.relative_to(ROOT)}: {lines} lines")
    assert long == [], "production modules at or over the budget:\n" + "\n".join(long)


def test_production_functions_fit_on_a_screen() -> None:
    long = []
    for path in _production_files():
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                lines = (node.end_lineno or node.lineno) - node.lineno + 1
                if lines > MAX_FUNCTION_LINES:
                    long.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}: {lines}")
    assert long == [], "functions over the budget:\n" + "\n".join(long)


def test_ruff_keeps_the_branch_limits_on() -> None:
    import tomllib

    lint = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["ruff"]["lint"]
    ignored = set(lint.get("ignore", []))
    assert {"C901", "PLR0911", "PLR0912", "PLR0915"}.isdisjoint(ignored)
    assert "C90" in lint["select"] or "C901" in lint["select"]
    assert lint["mccabe"]["max-complexity"] <= 15
