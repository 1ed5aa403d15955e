"""``countersign receipts verify BUNDLE`` (offline) and ``countersign receipts export PLAN_ID``.

``verify`` reads one file and nothing else: no database, no network, no key ring (Signer SPEC §5).
Exit codes (GLOBAL_SPEC §12): 0 ``ok plan_id=… receipts=N keys=…``; 1 a link does not hold
(``<code>: <reason>`` naming the first bad link); 2 not a bundle (unreadable, not JSON, a key
written twice, the wrong shape).
"""

from __future__ import annotations

import base64
import binascii
import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from countersign.kernel import CountersignError, InputError, Settings
from countersign.signer import load_bundle, verify_bundle

from .exits import EXIT_INPUT, EXIT_REFUSED, fail

__all__ = ["receipts_app"]

receipts_app = typer.Typer(
    help="Signed approval receipts: export a plan's bundle, verify one offline.",
    no_args_is_help=True,
)


def _trusted(pins: list[str] | None) -> dict[str, str] | None:
    if not pins:
        return None
    out: dict[str, str] = {}
    for pin in pins:
        pid, sep, b64 = pin.partition("=")
        try:
            ok = bool(sep and pid) and len(base64.b64decode(b64, validate=True)) == 32
        except (binascii.Error, ValueError):
            ok = False
        if not ok:
            raise InputError(f"--trust-key {pin[:20]!r}…: write it as ID=<base64 public key>")
        out[pid] = b64
    return out


@receipts_app.command("verify")
def verify_cmd(
    bundle: Annotated[Path, typer.Argument(help="Receipt bundle JSON file.")],
    trust_key: Annotated[
        list[str] | None,
        typer.Option("--trust-key", help="ID=BASE64: only this key may sign (repeat per key)."),
    ] = None,
) -> None:
    """Verify a plan's receipt bundle offline; exit 0 when every link holds."""
    try:
        try:
            data = bundle.read_bytes()
        except OSError as e:
            raise InputError(f"{bundle}: cannot read: {e.strerror}") from e
        report = verify_bundle(load_bundle(data, what=str(bundle)), trusted=_trusted(trust_key))
    except InputError as e:
        fail(EXIT_INPUT, e.one_line())
    except CountersignError as e:
        fail(EXIT_REFUSED, e.one_line())
    else:
        typer.echo(
            f"ok plan_id={report.plan_id} receipts={report.receipts} "
            f"plan_hash={report.plan_hash} keys={','.join(report.keys)}"
        )


@receipts_app.command("export")
def export_cmd(
    plan_id: Annotated[str, typer.Argument()],
    user: Annotated[
        str, typer.Option("--user", envvar="COUNTERSIGN_USER", help="Act as this user.")
    ] = "local",
    out: Annotated[Path | None, typer.Option("--out", help="Write here (default stdout).")] = None,
) -> None:
    """Export a plan's receipt bundle (from the service's database) for offline checking."""
    from countersign.api.stack import open_stack  # noqa: PLC0415 - keeps `verify` offline and fast

    try:
        stack = open_stack(Settings())
        try:
            doc = stack.services.views.receipts(plan_id, user)
        finally:
            stack.services.db.dispose()
    except InputError as e:
        fail(EXIT_INPUT, e.one_line())
    except CountersignError as e:
        fail(EXIT_REFUSED, e.one_line())
    else:
        text = json.dumps(doc, indent=2, ensure_ascii=False) + "\n"
        if out is None:
            sys.stdout.write(text)
        else:
            out.write_text(text, encoding="utf-8")
