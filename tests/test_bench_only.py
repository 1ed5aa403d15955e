"""Bench-only dependencies (pyproject's ``bench`` extra) never reach the product or its tests."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH_ONLY = {"langgraph"}


def test_bench_only_packages_are_imported_by_bench_only() -> None:
    found = []
    for folder in ("components", "tests", "usecases"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                names = (
                    [a.name for a in node.names]
                    if isinstance(node, ast.Import)
                    else [node.module]
                    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0
                    else []
                )
                found += [
                    f"{path.relative_to(ROOT)}:{node.lineno}"
                    for n in names
                    if n.split(".")[0] in BENCH_ONLY
                ]
    assert found == []
