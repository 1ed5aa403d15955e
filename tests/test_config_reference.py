"""docs/CONFIG.md names every setting the code has (issue 27 §5): every field of Kernel
``Settings`` by its environment name, every environment variable the code reads by name, and
every ``COUNTERSIGN_`` variable the deployment files set is a setting or is listed as not read
yet."""

from __future__ import annotations

import re
from pathlib import Path

from countersign.kernel import Settings

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "docs" / "CONFIG.md"
#: os.environ["X"], os.environ.get("X"), os.getenv("X"), environ.setdefault("X"), envvar="X"
_READS = re.compile(
    r"""(?:environ(?:\.get|\.setdefault|\.pop)?\(\s*|environ\[\s*|getenv\(\s*|envvar=)"""
    r"""["']([A-Za-z_][A-Za-z0-9_]*)["']"""
)
_NAMED = re.compile(r"""["'](COUNTERSIGN_[A-Z0-9_]+)["']""")
_DEPLOYED = re.compile(r"\b(COUNTERSIGN_[A-Z0-9_]+)\b")


def _documented() -> set[str]:
    """Every `NAME` in a table row's first cell of docs/CONFIG.md."""
    names: set[str] = set()
    for line in CONFIG.read_text().splitlines():
        if line.startswith("| `"):
            names.update(re.findall(r"`([A-Z][A-Z0-9_]+)`", line.split(" | ")[0]))
    return names


def _section(title: str) -> set[str]:
    text = CONFIG.read_text().split(f"## {title}", 1)[1].split("\n## ", 1)[0]
    return {
        n
        for line in text.splitlines()
        if line.startswith("| `")
        for n in re.findall(r"`([A-Z][A-Z0-9_]+)`", line.split(" | ")[0])
    }


def setting_names() -> set[str]:
    """The environment name of every Settings field (its alias, else prefix + name)."""
    prefix = str(Settings.model_config.get("env_prefix") or "")
    out = set()
    for name, f in Settings.model_fields.items():
        alias = f.validation_alias
        out.add(alias.upper() if isinstance(alias, str) else (prefix + name).upper())
    return out


def env_reads() -> dict[str, str]:
    """Environment variables the components' code reads or names, and one file that does."""
    found: dict[str, str] = {}
    for path in sorted(ROOT.glob("components/*/countersign/**/*.py")):
        text = path.read_text()
        for name in [*_READS.findall(text), *_NAMED.findall(text)]:
            found.setdefault(name, str(path.relative_to(ROOT)))
    return found


def test_every_setting_is_in_the_reference() -> None:
    documented = _documented()
    missing = sorted(setting_names() - documented)
    assert not missing, f"Settings fields missing from docs/CONFIG.md: {missing}"


def test_every_environment_variable_the_code_reads_is_in_the_reference() -> None:
    reads = env_reads()
    assert {"XDG_RUNTIME_DIR", "COUNTERSIGN_CACHE_DIR"} <= set(reads)  # the scan sees reads
    documented = _documented()
    missing = {n: f for n, f in reads.items() if n not in documented}
    assert not missing, f"environment variables read in code, missing from CONFIG.md: {missing}"


def test_deployments_set_only_settings_or_names_listed_as_not_read_yet() -> None:
    pending = _section("Not read by the code yet")
    settings = setting_names()
    assert not pending & settings, (
        f"{sorted(pending & settings)} are read now: move them to the settings table"
    )
    files = [p for p in (ROOT / "deploy").glob("*/**/*") if p.is_file()]
    files = [p for p in files if p.parts[-3:-1] != ("deploy", "n8n") and "node" not in p.parts]
    seen: dict[str, str] = {}
    for path in files:
        if path.suffix in {".yaml", ".yml", ".md", ""} or path.name == "Dockerfile":
            for name in _DEPLOYED.findall(path.read_text(errors="replace")):
                seen.setdefault(name, str(path.relative_to(ROOT)))
    assert seen, "no COUNTERSIGN_ variable in deploy/: the scan is broken"
    unknown = {n: f for n, f in seen.items() if n not in settings and n not in pending}
    assert not unknown, f"deploy/ sets variables no code reads: {unknown}"
