"""The ``countersign`` typer app: every verb, registered without importing it (issue 28 §5).

Exit codes (GLOBAL_SPEC.md §7): 0 ok; 1 refused or failed (bad signature, key ring problem);
2 malformed input (one line on stderr naming what was wrong); 3 the plan needs more input
(``{"needs": [...]}`` on stdout).

This module imports typer and nothing of Countersign's. Every verb is a ``Verb`` in ``VERBS`` —
where it lives and its help paragraph — and its module is imported only when it runs
(``lazy.LazyGroup``), so ``countersign --help`` lists every verb without loading one and a verb
loads only its own module (Cli LLD, "Start-up").
"""

from __future__ import annotations

import typer

from .lazy import LazyGroup, Verb

__all__ = ["VERBS", "app"]

_CLI = "countersign.cli"

#: every verb, in the order ``countersign --help`` lists them (``test_cli_start.py`` holds each
#: help paragraph equal to the command's own)
VERBS: tuple[Verb, ...] = (
    # the service verbs (the same service the HTTP API uses)
    Verb(
        "api",
        f"{_CLI}.serve:api_cmd",
        "Serve the HTTP API (n8n must be running: ``countersign up`` starts everything).",
    ),
    Verb(
        "login-link",
        f"{_CLI}.serve:login_link_cmd",
        "Print a one-time browser login link (15 minutes) for a local user (created if new).",
    ),
    Verb("preview", f"{_CLI}.plans:preview_cmd", "Run the read-only preview of a plan."),
    Verb(
        "approve",
        f"{_CLI}.plans:approve_cmd",
        "Approve a gate; prints the token (single use, short-lived).",
    ),
    Verb("reject", f"{_CLI}.plans:reject_cmd", "Reject a gate."),
    Verb("execute", f"{_CLI}.plans:execute_cmd", "Execute with gate tokens."),
    Verb(
        "cancel",
        f"{_CLI}.plans:cancel_cmd",
        "Cancel a plan: nothing more of it runs (a run on Temporal is cancelled there).",
    ),
    Verb(
        "reconcile",
        f"{_CLI}.plans:reconcile_cmd",
        "Record the end of durable runs that ended outside Countersign (terminated from the "
        "Temporal UI or CLI, timed out); prints what was recorded, one JSON line each.",
    ),
    Verb(
        "events",
        f"{_CLI}.plans:events_cmd",
        "Print the plan's events (one JSON line each); ``--follow`` waits for new ones.",
    ),
    # plan and verify
    Verb(
        "plan",
        f"{_CLI}.signing:plan_cmd",
        'Plan an intent and print the signed plan ``{"plan", "signature", "plan_hash"}``.',
    ),
    Verb(
        "verify",
        f"{_CLI}.verify:verify_cmd",
        "Exit 0 when the signature over the plan holds; otherwise non-zero with one line why.",
    ),
    # the stack
    Verb(
        "up",
        f"{_CLI}.lifecycle:up_cmd",
        "Start the whole stack on embedded defaults — PostgreSQL + pgvector, the Temporal dev "
        "server (+ UI), n8n, the sandbox providers, the durable worker, the API on "
        "127.0.0.1:PORT — then run the main job (plan, sign, verify and store an intent with its "
        "``plan_signed`` audit row) and print where everything is, with a one-time login link. "
        "Stays in the foreground (logs in the data folder) until Ctrl-C, which stops everything; "
        "``--detach`` returns instead.",
    ),
    Verb(
        "down",
        f"{_CLI}.lifecycle:down_cmd",
        "Stop everything ``countersign up`` started: the API, the worker, the sandbox providers, "
        "n8n, Temporal and the embedded PostgreSQL.",
    ),
    Verb(
        "status",
        f"{_CLI}.lifecycle:status_cmd",
        "Where each service is, and whether each process ``up`` starts runs, as JSON.",
    ),
    Verb(
        "stats",
        f"{_CLI}.stats:stats_cmd",
        "Print the service-level view from the API's metrics: preview and execute p95, errors by "
        "class, refusals by reason, watchers.",
    ),
    # groups of sub-verbs
    Verb("keys", f"{_CLI}.keys:keys_app", "Manage the Ed25519 key ring."),
    Verb("registry", f"{_CLI}.registry:registry_app", "Inspect and validate registry/."),
    Verb(
        "db",
        f"{_CLI}.db:app",
        "The database (embedded PostgreSQL unless DATABASE_URL is set).",
    ),
    Verb("audit", "countersign.audit.cli:app", "The tamper-evident audit log."),
    Verb("n8n", "countersign.n8n.cli:app", "Run the pinned n8n on 127.0.0.1."),
    Verb(
        "temporal",
        "countersign.durable.cli:app",
        "The Temporal dev server and the durable worker.",
    ),
    Verb(
        "sandbox",
        "countersign.sandbox.cli:app",
        "Sandbox providers (CalDAV, SMTP + mailbox, shop, visa) on 127.0.0.1 — no account needed.",
    ),
    Verb(
        "receipts",
        f"{_CLI}.receipts:receipts_app",
        "Signed approval receipts: export a plan's bundle, verify one offline.",
    ),
    Verb("users", f"{_CLI}.users:users_app", "API users and their keys."),
    Verb("plans", f"{_CLI}.plans:plans_app", "Your plans."),
)


class _Countersign(LazyGroup):
    VERBS = VERBS


app = typer.Typer(
    name="countersign",
    cls=_Countersign,
    help="Signed, previewable, approvable plans for personal agents.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def _group() -> None:
    """(Makes ``app`` a group whose verbs are all lazy: typer builds one from a callback.)"""
