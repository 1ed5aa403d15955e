"""The ``countersign`` group that imports a verb's module only when that verb runs (issue 28 §5).

Every verb is a ``Verb``: its name, where its command lives (``module:attribute``, a Typer
sub-app or a command function) and the one paragraph ``countersign --help`` shows for it. Until a
verb is run (or its own ``--help`` asked for), the group holds a stub carrying that paragraph, so
``countersign --help`` lists every verb without importing any of them;
``test_cli_start.py`` holds each stub's paragraph equal to the real command's help.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

import typer
from typer.core import TyperGroup

__all__ = ["LazyGroup", "Verb", "load_command"]


@dataclass(frozen=True, slots=True)
class Verb:
    """One ``countersign`` verb, registered without importing it."""

    name: str
    #: ``package.module:attribute``: a ``typer.Typer`` (a group of sub-verbs) or a command function
    target: str
    #: the first paragraph of the verb's help, as ``countersign --help`` lists it
    help: str


def load_command(verb: Verb) -> Any:
    """The verb's click command, built from its module (imported now)."""
    module, _, attribute = verb.target.partition(":")
    obj = getattr(importlib.import_module(module), attribute)
    if isinstance(obj, typer.Typer):
        command: Any = typer.main.get_group(obj)
    else:
        single = typer.Typer(add_completion=False)
        single.command(verb.name)(obj)
        command = typer.main.get_command(single)
    command.name = verb.name
    return command


class LazyGroup(TyperGroup):
    """A ``TyperGroup`` whose commands are ``Verb`` stubs until resolved (``VERBS``, in the order
    ``--help`` lists them)."""

    VERBS: tuple[Verb, ...] = ()

    def __init__(self, **attrs: Any) -> None:
        super().__init__(**attrs)
        self._verbs = {v.name: v for v in self.VERBS}
        eager = dict(self.commands)
        self.commands = {v.name: typer.core.TyperCommand(v.name, help=v.help) for v in self.VERBS}
        self.commands.update(eager)

    def resolve_command(self, ctx: Any, args: list[str]) -> tuple[str | None, Any, list[str]]:
        """Import the verb being run (only that one), then resolve as usual."""
        if args:
            self.load(args[0])
        return super().resolve_command(ctx, args)

    def load(self, name: str) -> Any:
        """The real command for ``name`` (imported on first use); None for no such verb."""
        verb = self._verbs.pop(name, None)
        if verb is not None:
            self.commands[name] = load_command(verb)
        return self.commands.get(name)
