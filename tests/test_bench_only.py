"""Bench-only dependencies (pyproject's ``bench`` extra) never reach the product or its tests."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCH_ONLY = {"langgraph"}


def _imported(node: ast.AST) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
        return [node.module]
    return []


def test_bench_only_packages_are_imported_by_bench_only() -> None:
    found = []
    for folder in ("components", "tests", "usecases"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                found += [
                    f"{path.relative_to(ROOT)}: {name}"
                    for name in _imported(node)
                    if name.split(".")[0] in BENCH_ONLY
                ]
    assert found == []
