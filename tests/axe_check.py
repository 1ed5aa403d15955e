"""axe-core in a Playwright page, for the browser tests: the vendored ``axe.min.js``
(``tests/vendor/axe-core``, see its README) is evaluated in the page (``page.evaluate``: no
network, no script tag a Content-Security-Policy could refuse), then ``axe.run`` checks the whole
document. ``blocking`` keeps the serious and critical violations, ``describe`` says each as
"rule (impact): help — selectors" so a failing test names what to fix."""

from __future__ import annotations

from functools import cache
from pathlib import Path
from typing import Any, TypedDict

from playwright.sync_api import Page

__all__ = [
    "AXE_DIR",
    "BLOCKING",
    "Violation",
    "axe_source",
    "axe_version",
    "blocking",
    "describe",
    "run_axe",
]

AXE_DIR = Path(__file__).resolve().parent / "vendor" / "axe-core"
#: the impacts a card state must not have (axe's scale: minor, moderate, serious, critical)
BLOCKING = ("serious", "critical")

_RUN = """async () => {
  const r = await axe.run(document, { resultTypes: ["violations"] });
  return r.violations.map((v) => ({
    id: v.id, impact: v.impact || "", help: v.help, url: v.helpUrl,
    targets: v.nodes.map((n) => n.target.map(String).join(" ")),
  }));
}"""


class Violation(TypedDict):
    """One axe rule the page breaks: the rule, its impact, what it asks, where."""

    id: str
    impact: str
    help: str
    url: str
    targets: list[str]


@cache
def axe_source() -> str:
    """The vendored axe-core script."""
    return (AXE_DIR / "axe.min.js").read_text(encoding="utf-8")


def axe_version() -> str:
    """The version the vendored copy is recorded as (``VERSION``)."""
    return (AXE_DIR / "VERSION").read_text(encoding="ascii").strip()


def run_axe(page: Page) -> list[Violation]:
    """Every axe violation of the page as it stands (axe is injected once per document)."""
    if not page.evaluate("() => typeof window.axe === 'object'"):
        page.evaluate(axe_source() + "\n;undefined")
    found: list[dict[str, Any]] = page.evaluate(_RUN)
    return [
        Violation(
            id=str(v["id"]),
            impact=str(v["impact"]),
            help=str(v["help"]),
            url=str(v["url"]),
            targets=[str(t) for t in v["targets"]],
        )
        for v in found
    ]


def blocking(violations: list[Violation], allowed: frozenset[str] = frozenset()) -> list[Violation]:
    """The serious and critical ones, less the rules in ``allowed`` (known, reported elsewhere)."""
    return [v for v in violations if v["impact"] in BLOCKING and v["id"] not in allowed]


def describe(violations: list[Violation]) -> str:
    """One line per violation: rule (impact): help — the first selectors it names."""
    lines = []
    for v in violations:
        where = ", ".join(v["targets"][:5]) + (" …" if len(v["targets"]) > 5 else "")
        lines.append(f"{v['id']} ({v['impact']}): {v['help']} — {where}")
    return "\n".join(lines)
