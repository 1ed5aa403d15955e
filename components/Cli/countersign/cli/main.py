"""The console script (``countersign = "countersign.cli.main:app"`` in pyproject.toml).

``app`` is not the typer app but what the script calls first: for the one verb a CI pipeline
calls per plan, ``countersign verify FILE``, it runs the quick path (``quickverify.py``: the
standard library, rfc8785 and PyNaCl) and prints the ok line without importing typer (typer alone
costs more start-up than the whole quick path; issue 28 §5, ≤ 200 ms). Everything else — any other
verb, any other spelling of ``verify``'s arguments, and every document the quick path does not
vouch for (every refusal among them) — goes to the typer app (``commands.app``) with the same
arguments, exactly as if this shortcut did not exist.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path

__all__ = ["app", "main"]


def _quick_verify(args: Sequence[str]) -> bool:
    """``verify FILE`` decided by the quick path: print the ok line and say so."""
    if len(args) != 2 or args[0] != "verify" or args[1].startswith("-"):
        return False
    from .quickverify import Unsure, ok_line, quick_verify_file  # noqa: PLC0415 - this verb only

    try:
        verified = quick_verify_file(Path(args[1]), os.environ)
    except Unsure:
        return False
    sys.stdout.write(ok_line(verified) + "\n")
    return True


class _Entry:
    """The console script's callable (see the module docstring)."""

    def __call__(self) -> None:
        if _quick_verify(sys.argv[1:]):
            return
        from .commands import app as typer_app  # noqa: PLC0415 - every other verb

        typer_app()


#: what the ``countersign`` script calls
app = _Entry()


def main() -> None:
    """Console entry point (``python -m countersign.cli``)."""
    app()
