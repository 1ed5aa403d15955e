"""Composition root: the services, users and app from ``Settings`` (used by ``countersign api``,
``countersign up`` and the CLI verbs, so every edge runs the same engines the same way)."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx
from fastapi import FastAPI
from temporalio.api.enums.v1 import TaskQueueType
from temporalio.api.taskqueue.v1 import TaskQueue
from temporalio.api.workflowservice.v1 import DescribeTaskQueueRequest

from countersign.audit import AuditLog
from countersign.durable import TASK_QUEUE, connect, payload_codec
from countersign.intake import Contact
from countersign.intake.llm import LitellmProposer
from countersign.kernel import (
    InputError,
    Policy,
    Settings,
    loads_strict,
    loads_yaml_strict,
    parse_contract,
    url_refusal,
)
from countersign.kernel.logs import configure_logging
from countersign.kernel.process import alive, port_open, read_pid
from countersign.kernel.tracing import configure_tracing
from countersign.n8n import N8nClient, handle_from
from countersign.n8n import status as n8n_status
from countersign.n8n.keeping import (
    ExecutionStore,
    PostgresExecutionStore,
    configured_execution_store,
)
from countersign.planwriter import PlanWriter
from countersign.registry.store import RegistryStore
from countersign.sandbox import SANDBOX_CONTACTS, sandbox_status
from countersign.signer import open_keyring
from countersign.steps import N8nTransport, StepTransport
from countersign.storage import Database, ReadPool, libpq_url
from countersign.workflowbuilder import CredentialRef

from .app import create_app
from .config import ApiConfig
from .observe import traced_client
from .users import UserStore
from .wiring import Services, build_services

__all__ = [
    "PRUNE_EVERY_S",
    "SANDBOX_POLICY",
    "Stack",
    "build_app",
    "check_base_urls",
    "check_n8n",
    "configured_credentials",
    "load_policy",
    "n8n_endpoint",
    "n8n_execution_store",
    "n8n_runtime",
    "open_stack",
]

#: on embedded defaults, capabilities point at the sandbox providers (real ones are a setting)
#: (and links in what plans send point at the chat page `countersign up` serves)
SANDBOX_POLICY: dict[str, Any] = {
    "providers": {"calendar": "caldav", "mail": "smtp", "chat": "slack"},
    "card_url": "http://127.0.0.1:8000/plans/{plan_id}",
}
_SMTP_CREDENTIAL = "countersign smtp"
#: how often ``countersign api`` deletes the n8n records of settled writes (``PruneDesk``)
PRUNE_EVERY_S = 10.0


def _now() -> datetime:
    return datetime.now(UTC)


def load_policy(path: Path | None) -> Policy:
    """The Policy from a JSON/YAML file, or the sandbox default."""
    if path is None:
        return parse_contract(Policy, SANDBOX_POLICY, what="policy")
    try:
        data = path.read_bytes()
    except OSError as e:
        raise InputError(f"{path}: cannot read: {e.strerror}") from e
    doc = (
        loads_yaml_strict(data, what=str(path))
        if path.suffix in {".yaml", ".yml"}
        else loads_strict(data, what=str(path))
    )
    return parse_contract(Policy, doc, what=f"policy {path}")


def check_base_urls(connector_settings: Mapping[str, str], policy: Policy) -> None:
    """Every connector setting that is a URL (``*_url``) is http(s) and not link-local or a
    metadata service unless the policy's ``allow_hosts`` names its host (``kernel.urls``).

    Raises:
        InputError: names the setting and why; the service does not start.
    """
    for name, value in sorted(connector_settings.items()):
        if name.endswith("_url") and (why := url_refusal(value, allow_hosts=policy.allow_hosts)):
            raise InputError(f"connector setting {name} ({value[:80]!r}): {why}")


@dataclass
class Stack:
    """The composed services and the user store."""

    settings: Settings
    services: Services
    users: UserStore
    registry_store: RegistryStore


def open_stack(
    settings: Settings,
    *,
    policy: Policy | None = None,
    clock: Callable[[], datetime] = _now,
) -> Stack:
    """Open the database, registry and key ring; the services without a step runtime yet."""
    db = Database.open(settings)
    # the configured embedder (COUNTERSIGN_EMBEDDING_MODEL), checked against the vector column
    # now: a model that does not fit stops the start, naming both lengths (PlanLibrary SPEC)
    writer = PlanWriter.for_settings(db, settings, clock=clock)
    reads = ReadPool.for_database(db)
    audit = AuditLog(clock=clock)
    registry_store = RegistryStore(db, settings.registry_dir, audit, clock)
    policy = policy or load_policy(settings.policy_file)
    sandbox = sandbox_status(settings.home)
    # the running sandbox's providers by default; settings name real ones
    connector_settings = {
        **sandbox.get("connector_settings", {}),
        **settings.connector_settings,
    }
    check_base_urls(connector_settings, policy)
    services = build_services(
        reads=reads,
        db=db,
        registry=registry_store.current(),
        keyring=open_keyring(settings, now=clock(), create=True),
        policy=policy,
        connector_settings=connector_settings,
        clock=clock,
        signer_name=settings.signer_name,
        plan_writer=writer,
        audit=audit,
        registry_store=registry_store,
        # the sandbox stack's people are the ones chat text may name (their calendars are the
        # sandbox's); on real providers nobody is known until the person's own contacts are
        contacts=[Contact(name, email) for name, email in SANDBOX_CONTACTS]
        if sandbox.get("running")
        else (),
        proposer=_proposer(settings),
    )
    return Stack(
        settings=settings,
        services=services,
        users=UserStore(db, clock=clock, reads=reads),
        registry_store=registry_store,
    )


def _proposer(settings: Settings) -> LitellmProposer | None:
    """The model that proposes the intent of chat text (``COUNTERSIGN_LLM_MODEL``), if set."""
    if not settings.llm_model:
        return None
    return LitellmProposer(
        settings.llm_model,
        api_base=settings.llm_api_base,
        api_key=settings.llm_api_key.get_secret_value() if settings.llm_api_key else None,
    )


async def _smtp_credential(client: N8nClient, settings: Settings) -> CredentialRef:
    """The n8n SMTP credential for the configured server (created once, remembered)."""
    host = settings.connector_settings.get("smtp_host", "127.0.0.1")
    port = int(settings.connector_settings.get("smtp_port", "2525"))
    memo = settings.home / "n8n" / "smtp-credential.json"
    want = {"host": host, "port": port}
    if memo.exists():
        known = json.loads(memo.read_text())
        if known.get("server") == want:
            return CredentialRef(id=str(known["id"]), name=_SMTP_CREDENTIAL)
    made = await client.create_credential(
        _SMTP_CREDENTIAL,
        "smtp",
        {**want, "secure": False, "disableStartTls": True, "user": "", "password": ""},
    )
    memo.parent.mkdir(parents=True, exist_ok=True)
    memo.write_text(json.dumps({"id": str(made["id"]), "server": want}))
    return CredentialRef(id=str(made["id"]), name=_SMTP_CREDENTIAL)


def configured_credentials(settings: Settings) -> dict[str, CredentialRef]:
    """The n8n credentials named in the settings (real providers), by credential type; they
    take precedence over the sandbox's SMTP credential."""
    return {
        kind: CredentialRef(id=ref.id, name=ref.name)
        for kind, ref in settings.n8n_credentials.items()
    }


def n8n_endpoint(settings: Settings) -> tuple[str, str]:
    """The base URL and API key of the n8n this process uses: ``COUNTERSIGN_N8N_URL`` and
    ``COUNTERSIGN_N8N_API_KEY`` when the URL is set (n8n elsewhere), else the n8n
    ``countersign up`` started in ``home/n8n``.

    Raises:
        InputError: the URL is not http(s), or is set without a key (names the setting).
        N8nUnavailableError: no URL is set and no local n8n runs.
    """
    if not settings.n8n_url:
        handle = handle_from(settings.home / "n8n")
        return handle.base_url, handle.api_key
    url = settings.n8n_url.strip().rstrip("/")
    parts = urlsplit(url)
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        raise InputError(f"COUNTERSIGN_N8N_URL ({url[:80]!r}) is not an http(s) URL with a host")
    key = settings.n8n_api_key.get_secret_value() if settings.n8n_api_key else ""
    if not key:
        raise InputError(
            "COUNTERSIGN_N8N_URL is set but COUNTERSIGN_N8N_API_KEY is not: an n8n public-API "
            "key is needed to reach n8n at that URL"
        )
    return url, key


def check_n8n(settings: Settings, *, timeout_s: float = 10.0) -> None:
    """With ``COUNTERSIGN_N8N_URL`` set, n8n must answer there and accept the key before the
    API starts (a wrong URL or key stops the start, naming the setting); nothing to check for
    the local n8n (its absence is reported when the API starts its step runtime).

    Raises:
        InputError: names ``COUNTERSIGN_N8N_URL`` or ``COUNTERSIGN_N8N_API_KEY`` and why.
    """
    if not settings.n8n_url:
        return
    url, key = n8n_endpoint(settings)
    what = f"COUNTERSIGN_N8N_URL ({url[:80]})"
    try:
        health = httpx.get(f"{url}/healthz", timeout=timeout_s)
        listed = httpx.get(
            f"{url}/api/v1/workflows",
            params={"limit": 1},
            headers={"X-N8N-API-KEY": key},
            timeout=timeout_s,
        )
    except httpx.HTTPError as e:
        raise InputError(f"{what}: n8n does not answer there ({type(e).__name__})") from e
    if health.status_code != 200:
        raise InputError(f"{what}: /healthz answered {health.status_code}, not n8n's 200")
    if listed.status_code in (401, 403):
        raise InputError(f"COUNTERSIGN_N8N_API_KEY: n8n at {url[:80]} refuses the key")
    if listed.status_code != 200:
        raise InputError(f"{what}: n8n's public API answered {listed.status_code}")


def n8n_execution_store(settings: Settings, database_url: str | None) -> ExecutionStore | None:
    """Where a forget edits n8n's records: ``COUNTERSIGN_N8N_DB_URL`` when set; else the local
    n8n's SQLite, or the ``n8n`` database beside Countersign's in queue mode; none for an n8n
    elsewhere without its database URL (a forget that must redact then answers 503)."""
    if settings.n8n_db_url is not None:
        dsn = settings.n8n_db_url.get_secret_value().replace(
            "postgresql+psycopg://", "postgresql://"
        )
        return PostgresExecutionStore(dsn)
    if settings.n8n_url:
        return None
    return configured_execution_store(settings, settings.home / "n8n", database_url=database_url)


@asynccontextmanager
async def n8n_runtime(stack: Stack) -> AsyncIterator[StepTransport]:
    """The n8n this process uses (``n8n_endpoint``) as the step runtime (with the SMTP
    credential); a forget reaches n8n's own records through ``n8n_execution_store``."""
    base_url, api_key = n8n_endpoint(stack.settings)
    stack.services.memory.n8n_store = n8n_execution_store(
        stack.settings, libpq_url(stack.services.db)
    )
    async with N8nClient(base_url, api_key) as client:
        cred = await _smtp_credential(client, stack.settings)
        stack.services.runtime.use_credentials(
            {"smtp": cred, **configured_credentials(stack.settings)}
        )
        yield N8nTransport(client)


def build_app(stack: Stack, *, config: ApiConfig | None = None) -> FastAPI:
    """The API app over the stack, with n8n as its step runtime and LISTEN for events."""
    check_n8n(stack.settings)  # n8n elsewhere: a wrong URL or key stops the start here
    cfg = config or ApiConfig(
        reconcile_every_s=stack.settings.durable_reconcile_every_s, prune_every_s=PRUNE_EVERY_S
    )
    cfg.runtime = cfg.runtime or (lambda: n8n_runtime(stack))
    settings = stack.settings
    # one payload key for the worker and the API, read from COUNTERSIGN_HOME (DurableOrchestrator
    # SPEC, payload encryption): the API starts and decides runs, and opens them for the UI
    codec = cfg.payload_codec = cfg.payload_codec or payload_codec(settings.keys_dir)
    if cfg.codec_origin is None and settings.temporal_ui:
        ui = urlsplit(settings.temporal_ui)
        cfg.codec_origin = f"{ui.scheme}://{ui.netloc}"
    # the API process's logs and traces (Kernel SPEC): JSON lines on stderr; spans only when
    # an OTLP endpoint is set
    configure_logging(settings.log_level)
    configure_tracing(settings.otlp_endpoint, service="countersign-api")
    if cfg.temporal_connect is None:

        async def temporal() -> Any:
            return await traced_client(
                await connect(
                    settings.temporal_address,
                    namespace=settings.temporal_namespace,
                    tls_cert=settings.temporal_tls_cert,
                    tls_key=settings.temporal_tls_key,
                    codec=codec,
                )
            )

        cfg.temporal_connect = temporal
    if cfg.temporal_ui is None and settings.temporal_ui:
        cfg.temporal_ui = (
            f"{settings.temporal_ui}/namespaces/{settings.temporal_namespace}/workflows"
        )
    cfg.health = {**_health(settings, cfg.temporal_connect), **cfg.health}
    cfg.listen_dsn = cfg.listen_dsn or libpq_url(stack.services.db)
    return create_app(stack.services, stack.users, cfg)


def _health(
    settings: Settings, temporal_connect: Callable[[], Awaitable[Any]]
) -> dict[str, Callable[[], Awaitable[str]]]:
    """``/healthz`` checks beyond the database: n8n, Temporal, the durable worker."""

    async def n8n() -> str:
        if settings.n8n_url:  # n8n elsewhere: its own health endpoint
            try:
                async with httpx.AsyncClient(timeout=2.0) as http:
                    r = await http.get(f"{settings.n8n_url.rstrip('/')}/healthz")
            except httpx.HTTPError:
                return "down"
            return "ok" if r.status_code == 200 else "down"
        st = await asyncio.to_thread(n8n_status, settings.home / "n8n")
        return "ok" if st.get("healthy") else "down"

    async def temporal() -> str:
        host, _, port = settings.temporal_address.rpartition(":")
        ok = await asyncio.to_thread(port_open, int(port), host or "127.0.0.1")
        return "ok" if ok else "down"

    clients: list[Any] = []  # one Temporal client for every check, made at the first

    async def worker() -> str:
        pid_file = settings.home / "run" / "worker.pid"
        if pid_file.exists():  # a worker this home started (``countersign up``)
            pid = read_pid(pid_file)
            return "ok" if pid is not None and alive(pid) else "down"
        if not clients:
            clients.append(await temporal_connect())
        return await _pollers(settings, clients[0])

    return {"n8n": n8n, "temporal": temporal, "worker": worker}


async def _pollers(settings: Settings, client: Any) -> str:
    """A worker elsewhere (its own container): ``ok`` when Temporal has seen a worker poll the
    durable task queue lately (its pollers of the last minutes), ``down`` otherwise."""
    answer = await client.workflow_service.describe_task_queue(
        DescribeTaskQueueRequest(
            namespace=settings.temporal_namespace,
            task_queue=TaskQueue(name=TASK_QUEUE),
            task_queue_type=TaskQueueType.TASK_QUEUE_TYPE_WORKFLOW,
        )
    )
    return "ok" if answer.pollers else "down"
