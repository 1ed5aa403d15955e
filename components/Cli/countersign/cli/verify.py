"""``countersign verify FILE [--contract]``: does the signature over a signed plan hold?

The quick path (``quickverify.py``: no models) accepts the common case; whatever it does not
vouch for — every refusal among them — the Signer decides here (``_full_verify``), so each refusal
is the Signer's one line and exit code. ``main.app`` runs the quick path for ``verify FILE``
before typer is even imported; this command is the same verb through typer (its ``--help``,
``--contract``, any other spelling of the arguments).
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Annotated

import typer

from .exits import guard
from .quickverify import QuickVerified, Unsure, ok_line, quick_verify_file

__all__ = ["verify_cmd"]


def _full_verify(file: Path) -> QuickVerified:
    """The Signer's own verification (``verify_signed_plan`` on the Settings' key ring)."""
    from countersign.kernel import Settings  # noqa: PLC0415 - the models: only when needed
    from countersign.signer import open_keyring, verify_signed_plan  # noqa: PLC0415

    from .files import read_document  # noqa: PLC0415

    ring = open_keyring(Settings(), now=datetime.now(UTC))
    verified = verify_signed_plan(read_document(file), keys=ring)
    return QuickVerified(
        plan_id=verified.plan.plan_id,
        plan_hash=verified.plan_hash,
        pubkey_id=verified.envelope.pubkey_id,
    )


def verify_cmd(
    file: Annotated[Path, typer.Argument(help="Signed plan JSON file.")],
    contract: Annotated[
        bool,
        typer.Option(
            "--contract",
            help="Also parse the plan against this version's plan contract (the Signer's full "
            "check; loads the models, slower).",
        ),
    ] = False,
) -> None:
    """Exit 0 when the signature over the plan holds; otherwise non-zero with one line why."""

    def body() -> None:
        try:
            if contract:
                raise Unsure
            verified = quick_verify_file(file, os.environ)
        except Unsure:
            verified = _full_verify(file)
        typer.echo(ok_line(verified))

    guard(body)
