"""Start-up (issue 28 §5): every verb imports only what it uses.

``countersign verify FILE`` (what a CI pipeline calls per plan) must not load the service stack
(FastAPI, Temporal, SQLAlchemy, httpx) nor even typer or pydantic; ``countersign --help`` lists
every verb with its help paragraph without importing any verb's module; each ``Verb``'s paragraph
is the command's own. Run in fresh interpreters (``-X importtime`` names every module imported).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from countersign.cli.commands import VERBS, app
from countersign.cli.lazy import load_command
from countersign.kernel import source_registry_dir

EXAMPLE = source_registry_dir().parent / "usecases" / "meeting" / "fixtures" / "default.intent.json"
SCRIPT = Path(sys.executable).with_name("countersign")
SERVICE_STACK = ("fastapi", "temporalio", "sqlalchemy", "httpx", "alembic", "psycopg")


def _env(home: Path) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.upper().startswith("COUNTERSIGN_")}
    e["COUNTERSIGN_HOME"] = str(home)
    e["COLUMNS"] = "400"
    return e


def imported(home: Path, *args: str) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    """Run the console script under ``-X importtime``: the result and every module it imported."""
    r = subprocess.run(
        [sys.executable, "-X", "importtime", str(SCRIPT), *args],
        capture_output=True,
        text=True,
        env=_env(home),
        timeout=120,
        check=False,
    )
    modules = set(re.findall(r"^import time:\s+\d+ \|\s+\d+ \|\s+(\S+)$", r.stderr, re.M))
    assert modules, r.stderr[-2000:]  # importtime ran: an empty set would pass every check
    r.stderr = "".join(
        line for line in r.stderr.splitlines(keepends=True) if not line.startswith("import time:")
    )
    return r, modules


def _tops(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


@pytest.fixture(scope="module")
def signed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A home with a key ring and a plan signed by it."""
    home = tmp_path_factory.mktemp("start") / "home"
    r = subprocess.run(
        [str(SCRIPT), "plan", "--intent", str(EXAMPLE)],
        capture_output=True,
        text=True,
        env=_env(home),
        timeout=120,
        check=True,
    )
    f = home.parent / "signed.json"
    f.write_text(r.stdout)
    return home, f


def test_script_is_the_entry_point() -> None:
    assert SCRIPT.exists(), "the console script is installed next to the interpreter"
    assert "countersign.cli.main import app" in SCRIPT.read_text()


def test_verify_imports_no_service_stack_no_typer_no_pydantic(signed: tuple[Path, Path]) -> None:
    home, f = signed
    r, modules = imported(home, "verify", str(f))
    assert r.returncode == 0 and r.stdout.startswith("ok plan_id="), r.stderr[-2000:]
    tops = _tops(modules)
    assert not tops & {*SERVICE_STACK, "typer", "click", "rich", "pydantic", "yaml", "ulid"}
    # and nothing of Countersign's but the CLI's entry and its quick path
    ours = {m for m in modules if m.startswith("countersign")}
    assert ours <= {"countersign", "countersign.cli", "countersign.cli.main"} | {
        "countersign.cli.quickverify"
    }, ours


def test_verify_refusal_goes_to_the_signer_without_the_service_stack(
    signed: tuple[Path, Path],
) -> None:
    home, f = signed
    doc = json.loads(f.read_text())
    pid = doc["plan"]["plan_id"]
    doc["plan"]["plan_id"] = pid[:-1] + ("1" if pid.endswith("0") else "0")  # always a change
    bad = f.with_name("bad.json")
    bad.write_text(json.dumps(doc))
    r, modules = imported(home, "verify", str(bad))
    assert r.returncode == 1 and r.stderr.startswith("signature_hash_mismatch:"), r.stderr[-300:]
    assert "countersign.signer.core" in modules  # the Signer decided
    assert not _tops(modules) & set(SERVICE_STACK)


@pytest.mark.parametrize(
    "args", [("verify", "--contract"), ("verify", "--"), ("verify", "--contract", "--")], ids=str
)
def test_verify_other_spellings_go_through_typer(
    signed: tuple[Path, Path], args: tuple[str, ...]
) -> None:
    home, f = signed
    r, modules = imported(home, *args, str(f))
    assert r.returncode == 0 and r.stdout.startswith("ok plan_id="), r.stderr[-2000:]
    assert "typer" in _tops(modules)
    assert not _tops(modules) & set(SERVICE_STACK)


def test_help_lists_every_verb_without_importing_one(tmp_path: Path) -> None:
    r, modules = imported(tmp_path / "home", "--help")
    assert r.returncode == 0, r.stderr[-2000:]
    text = " ".join(r.stdout.replace("│", " ").split())
    for verb in VERBS:
        assert f"{verb.name} {' '.join(verb.help.split())}" in text, verb.name
    verb_modules = {v.target.partition(":")[0] for v in VERBS}
    assert not modules & verb_modules, modules & verb_modules
    assert not _tops(modules) & {*SERVICE_STACK, "pydantic", "nacl"}


def _first_paragraph(text: str | None) -> str:
    return " ".join((text or "").split("\n\n")[0].split())


@pytest.mark.parametrize("verb", VERBS, ids=lambda v: v.name)
def test_each_listed_paragraph_is_the_commands_own(verb: object) -> None:
    from countersign.cli.lazy import Verb

    assert isinstance(verb, Verb)
    command = load_command(verb)
    assert command.name == verb.name
    assert _first_paragraph(command.help) == " ".join(verb.help.split())


@pytest.mark.parametrize(
    ("args", "listed"),
    [
        (["audit", "--help"], "verify"),  # a sub-app with one command stays a group
        (["keys", "--help"], "rotate"),
        (["registry", "--help"], "validate"),
        (["temporal", "--help"], "worker"),
        (["verify", "--help"], "--contract"),
        (["plans", "--help"], "show"),
        (["up", "--help"], "--detach"),
    ],
)
def test_each_verb_resolves_to_its_real_command(args: list[str], listed: str) -> None:
    r = CliRunner().invoke(app, args, env={"COLUMNS": "200"})
    assert r.exit_code == 0, r.output
    assert listed in r.output


def test_a_typo_is_still_named_with_a_suggestion() -> None:
    r = CliRunner().invoke(app, ["verfy", "x"])
    assert r.exit_code == 2
    assert "No such command" in r.output and "verify" in r.output


def test_status_and_down_do_not_load_the_api(tmp_path: Path) -> None:
    for verb in ("status", "down"):
        r, modules = imported(tmp_path / "home", verb)
        assert r.returncode == 0, r.stderr[-2000:]
        assert not _tops(modules) & {"fastapi", "temporalio"}, verb


def test_keys_list_loads_the_signer_only(signed: tuple[Path, Path]) -> None:
    home, _ = signed
    r, modules = imported(home, "keys", "list")
    assert r.returncode == 0 and r.stdout.startswith("k1\t"), r.stderr[-2000:]
    assert "countersign.signer.keyring" in modules
    assert not {m for m in modules if m.startswith(("countersign.planner", "countersign.registry"))}
    assert not _tops(modules) & set(SERVICE_STACK)


@pytest.mark.parametrize(
    "package", ["countersign.kernel", "countersign.durable", "countersign.sandbox"]
)
def test_lazy_packages_export_what_they_list(package: str) -> None:
    """A lazy ``__init__`` (PEP 562) still exports every name of its ``__all__``, from the module
    its table names, and nothing it does not list; importing it loads none of them."""
    code = (
        "import importlib, sys, json; before = set(sys.modules); "
        f"m = importlib.import_module({package!r}); "
        "loaded = sorted(k for k in set(sys.modules) - before if k.startswith(m.__name__ + '.')); "
        "missing = [n for n in m.__all__ if getattr(m, n, None) is None]; "
        "print(json.dumps({'loaded': loaded, 'missing': missing, "
        "'unlisted': sorted(set(m._LAZY) - set(m.__all__))}))"
    )
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    found = json.loads(r.stdout)
    assert found == {"loaded": [], "missing": [], "unlisted": []}
