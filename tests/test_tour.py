"""docs/TOUR.md names real modules: every repository path it cites exists (a moved or renamed
module makes this fail, so the newcomer's tour follows the code)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
TOUR = ROOT / "docs" / "TOUR.md"


def _cited_paths() -> list[str]:
    text = TOUR.read_text()
    return sorted(set(re.findall(r"`((?:components|registry|tests)/[^`\s<]*)`", text)))


def test_the_tour_cites_paths() -> None:
    assert len(_cited_paths()) > 20


def test_every_path_the_tour_cites_exists() -> None:
    missing = [p for p in _cited_paths() if not (ROOT / p.rstrip("/")).exists()]
    assert missing == [], f"docs/TOUR.md cites paths that are not in the tree: {missing}"


def test_every_relative_module_the_tour_names_exists_in_its_component() -> None:
    """Bare module names in a row ("`checks.py`") are looked up in the component named last."""
    missing = []
    current: Path | None = None
    for token in re.findall(r"`([^`]+)`", TOUR.read_text()):
        if token.startswith("components/"):
            path = ROOT / token.rstrip("/")
            current = path if path.is_dir() else path.parent
        elif (
            re.fullmatch(r"[a-z_]+\.py", token)
            and current is not None
            and not any(current.rglob(token))
            and not any(current.parent.rglob(token))
        ):
            missing.append(f"{token} (near {current.relative_to(ROOT)})")
    assert missing == [], missing
