"""Process settings (pydantic-settings). Built once in an entry point and passed down; nothing
below the entry points reads ``os.environ`` (Kernel SPEC, item 5)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

import platformdirs
from pydantic import BaseModel, ConfigDict, Field, SecretStr
from pydantic_settings import BaseSettings, SettingsConfigDict

from .ids import ascii_digits

__all__ = ["Settings", "source_registry_dir"]


def source_registry_dir() -> Path:
    """The ``registry/`` folder of the source tree this package was installed from."""
    # components/Kernel/countersign/kernel/settings.py -> repository root is parents[4]
    return Path(__file__).resolve().parents[4] / "registry"


def _default_home() -> Path:
    return Path(platformdirs.user_data_dir("countersign", appauthor=False))


def _default_cache() -> Path:
    return Path(platformdirs.user_cache_dir("countersign", appauthor=False))


class N8nCredential(BaseModel):
    """An n8n credential by its id in n8n (and a name for people)."""

    model_config = ConfigDict(extra="forbid")
    id: str = Field(min_length=1)
    name: str = "configured"


class Settings(BaseSettings):
    """Everything a Countersign process can be configured with (env prefix ``COUNTERSIGN_``)."""

    model_config = SettingsConfigDict(env_prefix="COUNTERSIGN_", extra="ignore", frozen=True)

    home: Path = Field(default_factory=_default_home)
    #: Long installs (Node, n8n) live here, keyed by version, outside the repository.
    cache_dir: Path = Field(default_factory=_default_cache)
    n8n_port: int = 5678
    #: n8n's expression engine. ``vm`` (isolated, n8n's default) is the safe choice; ``legacy``
    #: is ~2.5x faster per execution (BENCHMARKS.md) and acceptable only because no person text
    #: ever reaches an expression (WorkflowBuilder SPEC; tested).
    n8n_expression_engine: Literal["vm", "legacy"] = "vm"
    #: n8n's queue mode: 0 = one n8n process on SQLite (the default); N > 0 = a main process that
    #: takes the webhooks, N worker processes that run the executions, Redis (Debian's
    #: ``redis-server``) between them and n8n's data in a database ``n8n`` on Countersign's
    #: PostgreSQL (N8nRuntime LLD, queue mode).
    n8n_workers: int = Field(default=0, ge=0, le=16)
    #: n8n main's base URL when n8n runs somewhere else (another container, a cluster): the API
    #: and the CLI verbs open ``N8nClient(n8n_url, n8n_api_key)`` instead of the n8n
    #: ``countersign up`` started in ``home/n8n`` (unset = that local one, the default)
    n8n_url: str | None = None
    #: an n8n public-API key with the scopes ``countersign n8n up`` asks for (with ``n8n_url``)
    n8n_api_key: SecretStr | None = None
    #: libpq URL of n8n's own PostgreSQL database (queue mode elsewhere): where a forget redacts
    #: the forgotten person in other people's n8n records; unset = n8n's SQLite in ``home/n8n``,
    #: or the ``n8n`` database beside Countersign's when ``countersign up`` runs queue mode
    n8n_db_url: SecretStr | None = None
    #: API processes ``countersign up`` starts (on PORT, PORT+1, …), all on one database, one
    #: Temporal and one n8n; login sessions and the rate limit live in the database, so any of
    #: them serves anyone. ``up --scale`` makes it at least 2.
    api_replicas: int = Field(default=1, ge=1, le=8)
    #: durable workers ``countersign up`` starts on the one task queue (``up --scale``: ≥ 2).
    durable_workers: int = Field(default=1, ge=1, le=8)
    #: Deployment settings connectors read as ``{@name}`` (base URLs, sender address, SMTP host),
    #: e.g. ``COUNTERSIGN_CONNECTOR_SETTINGS='{"caldav_base_url": "http://127.0.0.1:5232"}'``.
    connector_settings: dict[str, str] = Field(default_factory=dict)
    temporal_address: str = "127.0.0.1:7233"
    #: How often (seconds) the API records the end of durable runs that ended outside Countersign
    #: (terminated or cancelled in the Temporal UI, timed out) while it runs; 0 = only when the
    #: API starts and by ``countersign reconcile``.
    durable_reconcile_every_s: float = Field(default=60.0, ge=0)
    #: seconds a client has to send one whole request (headers and body) once it started, before
    #: the API answers 408 and closes the connection (a stalled upload; Api SPEC, the edge)
    http_read_timeout_s: float = Field(default=30.0, gt=0, le=3600)
    temporal_namespace: str = "default"
    #: mTLS for a Temporal cluster or Temporal Cloud (PEM files); unset = plain loopback.
    temporal_tls_cert: Path | None = None
    temporal_tls_key: Path | None = None
    #: The Temporal Web UI the chat page links durable runs to; unset = the embedded dev
    #: server's (``countersign up`` serves it on the frontend port + 1000), none for a cluster.
    temporal_ui_url: str | None = None
    #: The Policy the API and ``countersign up`` plan with (JSON/YAML; e.g. real providers:
    #: ``providers: {calendar: google.calendar, mail: gmail}``); unset = the sandbox providers.
    policy_file: Path | None = None
    #: n8n credentials the generated nodes use, by n8n credential type: ``{"googleCalendarOAuth2Api":
    #: {"id": "12", "name": "my google"}}`` (made in the n8n editor; secrets stay in n8n).
    n8n_credentials: dict[str, N8nCredential] = Field(default_factory=dict)
    #: Optional model for chat intake, any litellm model name (e.g. ``ollama/llama3.1`` or
    #: ``openai/<name>`` with ``llm_api_base`` for a local OpenAI-compatible server); unset = the
    #: deterministic Intake only. Needs the ``llm`` extra (``pip install -e '.[llm]'``).
    llm_model: str | None = None
    llm_api_base: str | None = None
    llm_api_key: SecretStr | None = None
    #: Optional embedding model for the PlanLibrary, any litellm model name (e.g.
    #: ``openai/text-embedding-3-small``, or ``openai/<name>`` with ``embedding_api_base`` for a
    #: local OpenAI-compatible server); unset = the offline WordLlama embedder. ``embedding_dim``
    #: is the length it returns (unset: asked of the model once at start); it must fit the
    #: database's ``plan_library.embedding`` column, checked when the API or the worker starts.
    #: Needs the ``llm`` extra.
    embedding_model: str | None = None
    embedding_api_base: str | None = None
    embedding_api_key: SecretStr | None = None
    embedding_dim: int | None = Field(default=None, ge=1)
    #: the sandbox providers' ports under ``countersign up``: ``default`` (CalDAV 5232, SMTP
    #: 2525, mailbox 8025, shop 8091, visa 8092) or ``free`` (picked at start; tests, a machine
    #: where the defaults are taken)
    sandbox_ports: Literal["default", "free"] = "default"
    registry_dir: Path = Field(default_factory=source_registry_dir)
    signer_name: str = "planner@system"
    #: An Ed25519 seed (base64, 32 bytes) given through the environment instead of the key ring
    #: on disk; ``signing_key_id`` names it. Never printed.
    signing_key: SecretStr | None = None
    signing_key_id: str = "env"
    database_url: SecretStr | None = Field(default=None, validation_alias="DATABASE_URL")
    #: OpenTelemetry: the OTLP/HTTP collector spans are exported to (e.g.
    #: ``http://127.0.0.1:4318``; ``/v1/traces`` is added); unset = no tracing, the no-op tracer
    #: (Kernel SPEC, traces)
    otlp_endpoint: str | None = None
    #: the level of the JSON log lines on stderr (Kernel SPEC, logs)
    log_level: Literal["debug", "info", "warning", "error"] = "info"

    @property
    def temporal_ui(self) -> str | None:
        """The Web UI's base URL: ``temporal_ui_url``, else the embedded dev server's when the
        address is on loopback (``countersign up``'s choice: frontend port + 1000)."""
        if self.temporal_ui_url:
            return self.temporal_ui_url.rstrip("/")
        host, _, port = self.temporal_address.rpartition(":")
        if host in {"127.0.0.1", "localhost"} and ascii_digits(port) and not self.temporal_tls_cert:
            return f"http://127.0.0.1:{int(port) + 1000}"
        return None

    @property
    def keys_dir(self) -> Path:
        """Where the key ring lives (0700 folder, 0600 files)."""
        return self.home / "keys"
