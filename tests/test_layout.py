"""The repository layout STYLE.md prescribes, kept in step with pyproject.toml."""

from __future__ import annotations

import ast
import re
import tomllib
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COMPONENTS = sorted(p for p in (ROOT / "components").iterdir() if p.is_dir())


def test_top_level_layout() -> None:
    for name in (
        "pyproject.toml",
        "GLOBAL_SPEC.md",
        "README.md",
        "BENCHMARKS.md",
        "components",
        "usecases",
        "registry",
        "deploy",
        "tests",
        "bench",
        ".ci/run",
    ):
        assert (ROOT / name).exists(), name


def test_each_component_folder_is_complete() -> None:
    for comp in COMPONENTS:
        for name in ("SPEC.md", "LLD.md", "schemas", "tests"):
            assert (comp / name).exists(), f"{comp.name}/{name}"
        ns = comp / "countersign"
        assert not (ns / "__init__.py").exists(), (
            f"{comp.name}: countersign/ must be a namespace portion"
        )
        pkgs = [p for p in ns.iterdir() if p.is_dir() and not p.name.startswith("__")]
        assert len(pkgs) == 1, f"{comp.name}: one package per component, found {pkgs}"
        init = pkgs[0] / "__init__.py"
        assert (pkgs[0] / "py.typed").exists(), f"{comp.name}: py.typed"
        tree = ast.parse(init.read_text())
        names = [
            t.id
            for node in tree.body
            if isinstance(node, ast.Assign)
            for t in node.targets
            if isinstance(t, ast.Name)
        ]
        assert "__all__" in names, f"{init}: explicit __all__"
        assert list((comp / "tests").glob("test_*.py")), f"{comp.name}: has tests"


def test_pyproject_lists_match_folders() -> None:
    cfg = tomllib.loads((ROOT / "pyproject.toml").read_text())
    expected = [f"components/{c.name}" for c in COMPONENTS]
    assert sorted(cfg["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]) == [
        f"{e}/countersign" for e in expected
    ]
    assert sorted(cfg["tool"]["hatch"]["build"]["dev-mode-dirs"]) == expected
    assert (
        sorted(p for p in cfg["tool"]["mypy"]["mypy_path"] if p.startswith("components/"))
        == expected
    )


def test_test_file_basenames_are_unique() -> None:
    names = Counter(p.name for p in ROOT.glob("**/test_*.py") if ".venv" not in p.parts)
    dupes = [n for n, c in names.items() if c > 1]
    assert not dupes, dupes


def _asserts_in_production_code() -> list[str]:
    """Every ``assert`` statement in ``components/*/countersign`` outside the modules the root
    conftest loads as pytest plugins (test code: pytest rewrites their asserts, nothing in
    production imports them)."""
    conftest = ast.parse((ROOT / "conftest.py").read_text())
    plugins = {
        elt.value
        for node in ast.walk(conftest)
        if isinstance(node, ast.AnnAssign | ast.Assign) and isinstance(node.value, ast.List)
        for elt in node.value.elts
        if isinstance(elt, ast.Constant) and isinstance(elt.value, str)
    }
    found = []
    for comp in COMPONENTS:
        for path in sorted((comp / "countersign").rglob("*.py")):
            module = ".".join(path.relative_to(comp).with_suffix("").parts)
            if module in plugins:
                continue
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Assert):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def test_production_code_never_asserts() -> None:
    """``python -O`` drops ``assert``, so a check in production code is an explicit ``if`` that
    raises a ``CountersignError`` subclass (``ApplicationError`` in Temporal workflow code)."""
    assert _asserts_in_production_code() == []


# ---- layering (StepRunner SPEC: no orchestrator imports a sibling) -------------------------------
#: which component package may import which (bottom to top). Nothing imports a sibling
#: orchestrator; ``steps`` is the floor the three orchestrators share; ``cli`` is the top.
_FLOORS: dict[str, set[str]] = {"kernel": set()}
_FLOORS |= {name: {"kernel"} for name in ("registry", "signer", "storage", "n8n", "sandbox")}
_FLOORS["audit"] = {"kernel", "storage"}
#: approvals signs each decision's receipt through the Signer's seam (its ``ReceiptFields``)
_FLOORS["approvals"] = {"kernel", "storage", "audit", "signer"}
_FLOORS["binding"] = {"kernel", "registry"}
_FLOORS["workflowbuilder"] = {"kernel", "registry", "binding"}
_FLOORS["planner"] = {"kernel", "registry", "signer"}
_FLOORS["steps"] = {
    "kernel",
    "registry",
    "signer",
    "storage",
    "audit",
    "approvals",
    "binding",
    "workflowbuilder",
    "n8n",
}
for _orchestrator in ("preview", "execute", "durable"):
    _FLOORS[_orchestrator] = _FLOORS["steps"] | {"steps"}
#: the orchestrators that end executions hand their outcomes to PlanWriter (PlanWriter SPEC)
for _orchestrator in ("execute", "durable"):
    _FLOORS[_orchestrator] |= {"planwriter", "planlibrary", "contextrag"}
_FLOORS["intake"] = {"kernel", "registry"}
_FLOORS["planlibrary"] = {"kernel", "storage"}
_FLOORS["planwriter"] = {"kernel", "storage", "planlibrary", "contextrag"}
_FLOORS["contextrag"] = {"kernel", "storage", "audit"}
_FLOORS["api"] = _FLOORS["steps"] | {
    "steps",
    "preview",
    "execute",
    "durable",
    "planner",
    "intake",
    "sandbox",
    "contextrag",
    "planlibrary",
    "planwriter",
}
_FLOORS["cli"] = set(_FLOORS) - {"cli"}
#: test seams (pytest plugins) may also use the test peers of the floors below them
_TEST_SEAMS = {"testing.py", "providers.py"}
_ADAPTER_MODULES = {
    "httpx",
    "psycopg",
    "psycopg_pool",
    "sqlalchemy",
    "temporalio",
    "subprocess",
    "socket",
    "smtplib",
    "uvicorn",
    "fastapi",
}


def _imports(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` of every import in a file, including those inside functions."""
    out = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            out += [(node.lineno, a.name) for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            out.append((node.lineno, node.module))
    return out


def _package(comp: Path) -> str:
    return next(
        p.name
        for p in (comp / "countersign").iterdir()
        if p.is_dir() and not p.name.startswith("__")
    )


def test_components_import_only_the_floors_below_them() -> None:
    bad = []
    for comp in COMPONENTS:
        pkg = _package(comp)
        allowed = _FLOORS.get(pkg)
        assert allowed is not None, (
            f"{pkg} (components/{comp.name}) is missing from the layering table"
        )
        for path in sorted((comp / "countersign").rglob("*.py")):
            seam = path.name in _TEST_SEAMS
            for line, module in _imports(path):
                parts = module.split(".")
                if parts[0] != "countersign" or len(parts) < 2 or parts[1] == pkg:
                    continue
                target = parts[1]
                if target in allowed or (
                    seam
                    and target in _FLOORS
                    and pkg in _FLOORS
                    and target not in {"cli", "api"}
                    and _FLOORS[target] <= _FLOORS[pkg] | {target}
                ):
                    continue
                bad.append(f"{path.relative_to(ROOT)}:{line}: {pkg} imports countersign.{target}")
    assert bad == [], "imports outside the layering table:\n" + "\n".join(bad)


def test_the_layering_table_has_no_cycle() -> None:
    seen: dict[str, int] = {}

    def visit(node: str, stack: tuple[str, ...]) -> None:
        assert node not in stack, " -> ".join((*stack, node))
        if seen.get(node):
            return
        for dep in _FLOORS[node]:
            visit(dep, (*stack, node))
        seen[node] = 1

    for name in _FLOORS:
        visit(name, ())


def test_cores_import_no_adapters() -> None:
    """A module named ``core.py`` is pure: no network, database, process or runtime client."""
    bad = []
    for path in sorted(ROOT.glob("components/*/countersign/*/core.py")):
        for line, module in _imports(path):
            if module.split(".")[0] in _ADAPTER_MODULES:
                bad.append(f"{path.relative_to(ROOT)}:{line}: imports {module}")
    assert bad == [], "\n".join(bad)


# ---- inside Api: one router per resource, thin services (Api LLD, module map) -------------------
#: ``api/routes/<name>.py`` → the other countersign packages it may import (contracts and pure
#: helpers only): a router parses, calls one service and shapes the answer
_API_ROUTERS: dict[str, set[str]] = {
    "intents": set(),
    "plans": set(),
    "gates": set(),
    "events": {"kernel", "storage"},  # ascii_digits; the PlanEvents type the stream reads
    "memory": {"contextrag"},  # the request bodies ContextRAG defines
    "registry": {"registry"},  # RegistryKind
    "codec": set(),
    "auth": set(),
    "pages": set(),
    "audit": set(),
    "health": set(),
    "settle": set(),
}
#: modules that run SQL or open database connections (a router or a service never does)
_SQL_MODULES = {"sqlalchemy", "psycopg", "psycopg_pool"}


def test_api_routers_are_in_the_table_and_import_no_engine() -> None:
    routes = ROOT / "components/Api/countersign/api/routes"
    found = {p.stem for p in routes.glob("*.py") if p.stem != "__init__"}
    assert found == set(_API_ROUTERS), "routers and the table differ: " + str(
        sorted(found ^ set(_API_ROUTERS))
    )
    bad = []
    for name, allowed in _API_ROUTERS.items():
        path = routes / f"{name}.py"
        for line, module in _imports(path):
            parts = module.split(".")
            if parts[0] in _SQL_MODULES or (
                parts[0] == "countersign" and len(parts) > 1 and parts[1] not in allowed
            ):
                bad.append(f"{path.relative_to(ROOT)}:{line}: imports {module}")
    assert bad == [], "\n".join(bad)


def test_api_services_run_no_sql() -> None:
    """The use cases call other components' public APIs; SQL stays in the owners' stores."""
    bad = [
        f"{path.relative_to(ROOT)}:{line}: imports {module}"
        for path in sorted((ROOT / "components/Api/countersign/api/services").glob("*.py"))
        for line, module in _imports(path)
        if module.split(".")[0] in _SQL_MODULES
    ]
    assert bad == [], "\n".join(bad)


# ---- SQL ownership: each table is one component's ------------------------------------------------
_MIGRATIONS = ROOT / "components/Storage/countersign/storage/migrations/versions"
#: each table the migrations create → the component (package) whose store runs SQL on it
_TABLE_OWNERS: dict[str, str] = {
    # Storage: PlanStore, PlanEvents (rows written by the audit_log trigger), the ledger
    "plans": "storage",
    "plan_steps": "storage",
    "plan_events": "storage",
    "idempotency_keys": "storage",
    # Audit: the chain
    "audit_log": "audit",
    "audit_head": "audit",
    # Approvals: tokens, decisions, receipts
    "approval_tokens": "approvals",
    "gate_decisions": "approvals",
    "gate_receipts": "approvals",
    # PlanWriter: an ended plan's outcomes; PlanLibrary: the library rows
    "outcomes": "planwriter",
    "plan_library": "planlibrary",
    # ContextRAG: a person's memory
    "profile_prefs": "contextrag",
    "consents": "contextrag",
    "history_facts": "contextrag",
    "memory_facts": "contextrag",
    "contacts": "contextrag",
    # PluginRegistry: registry edits (RegistryStore)
    "registry_docs": "registry",
    # Api: users, sessions, login links, conversations
    "api_users": "api",
    "api_rate": "api",
    "api_sessions": "api",
    "login_links": "api",
    "conversations": "api",
    "conversation_turns": "api",
}
#: documented seams where a component runs SQL on tables it does not own: (package, module) →
#: the tables (``*``: any). Nothing else may.
_SQL_SEAMS: dict[tuple[str, str], set[str]] = {
    # ContextRAG SPEC §4–5: forget and export walk every table that can hold a person's data
    ("contextrag", "forgetting.py"): {"*"},
    # PlanWriter SPEC §2: the library row's outcome counts are recounted in PlanWriter's
    # transaction (a PlanLibrary method for that update would end this seam)
    ("planwriter", "writer.py"): {"plan_library"},
}
_SQL_TABLE = re.compile(r"\b(?:FROM|JOIN|INTO|UPDATE|TABLE|TRUNCATE)\s+\"?([a-z_][a-z0-9_]*)", re.I)


def _tables_created() -> set[str]:
    return {
        t
        for m in _MIGRATIONS.glob("*.py")
        for t in re.findall(r"CREATE (?:UNLOGGED )?TABLE\s+([a-z_][a-z0-9_]*)", m.read_text())
    }


def _string_literals(tree: ast.AST) -> list[tuple[int, str]]:
    """``(line, text)`` of every string literal but docstrings (an f-string's constant parts
    joined, each value a blank)."""
    docs = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            parts = (v.value if isinstance(v, ast.Constant) else " _ " for v in node.values)
            out.append((node.lineno, "".join(str(p) for p in parts)))
        elif (
            isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docs
        ):
            out.append((node.lineno, node.value))
    return out


def test_every_table_has_one_owner() -> None:
    assert _tables_created() == set(_TABLE_OWNERS), sorted(_tables_created() ^ set(_TABLE_OWNERS))
    assert set(_TABLE_OWNERS.values()) <= set(_FLOORS)


def test_no_component_runs_sql_on_another_components_tables() -> None:
    """Scans each component's production string literals (test seams and migrations left out)
    for SQL naming a table: only its owner's stores, or a documented seam, may."""
    bad = []
    for comp in COMPONENTS:
        pkg = _package(comp)
        for path in sorted((comp / "countersign").rglob("*.py")):
            if "migrations" in path.parts or path.name in _TEST_SEAMS:
                continue
            seam = _SQL_SEAMS.get((pkg, path.name), set())
            for line, literal in _string_literals(ast.parse(path.read_text(), str(path))):
                for table in _SQL_TABLE.findall(literal):
                    owner = _TABLE_OWNERS.get(table)
                    if owner in (None, pkg) or "*" in seam or table in seam:
                        continue
                    bad.append(f"{path.relative_to(ROOT)}:{line}: {pkg} runs SQL on {table}")
    assert bad == [], "SQL on another component's tables:\n" + "\n".join(sorted(set(bad)))
