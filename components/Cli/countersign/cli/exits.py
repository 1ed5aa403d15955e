"""How every ``countersign`` verb ends (GLOBAL_SPEC.md §7, §12): 0 ok; 1 refused or failed; 2
malformed input; 3 the plan needs more input. An error is one line on stderr,
``<code>: <reason>`` — never a traceback."""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any, NoReturn, TypeVar

import typer

from countersign.kernel import CountersignError, InputError, PlanningError

__all__ = ["EXIT_INPUT", "EXIT_NEEDS", "EXIT_REFUSED", "fail", "guard", "print_json"]

EXIT_REFUSED = 1
EXIT_INPUT = 2
EXIT_NEEDS = 3

R = TypeVar("R")


def fail(code: int, message: str) -> NoReturn:
    """Print ``message`` on one line on stderr and exit with ``code``."""
    typer.echo(" ".join(message.split()), err=True)
    raise typer.Exit(code)


def guard(fn: Callable[[], R]) -> R:
    """Run a command body, mapping our errors to one line on stderr and an exit code:
    ``InputError`` / ``PlanningError`` exit 2, any other ``CountersignError`` (a refused
    signature included) exits 1."""
    try:
        return fn()
    except (InputError, PlanningError) as e:
        fail(EXIT_INPUT, e.one_line())
    except CountersignError as e:
        fail(EXIT_REFUSED, e.one_line())


def print_json(doc: Any, *, default: Callable[[Any], Any] | None = None) -> None:
    """``doc`` as indented JSON on stdout (``default`` renders what JSON has no type for)."""
    sys.stdout.write(json.dumps(doc, indent=2, ensure_ascii=False, default=default) + "\n")
