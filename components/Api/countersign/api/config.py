"""The HTTP service's settings (``ApiConfig``): what ``create_app`` wires around the services."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from countersign.durable import EncryptionCodec
from countersign.steps import StepTransport

__all__ = ["ApiConfig"]


@dataclass
class ApiConfig:
    """Service-level settings."""

    #: requests per key per minute (a sliding window; 0 = unlimited)
    rate_limit_per_min: int = 600
    #: checks reported by ``/healthz`` (name → async check returning a short status)
    health: dict[str, Callable[[], Awaitable[str]]] = field(default_factory=dict)
    #: the database URL the event stream LISTENs on (libpq form)
    listen_dsn: str | None = None
    #: keep-alive comment interval on event streams, seconds
    sse_ping_s: int = 15
    #: connects to Temporal for durable plans (None: durable plans are refused)
    temporal_connect: Callable[[], Awaitable[Any]] | None = None
    #: seconds between passes that record durable runs ended outside Countersign (terminated
    #: in the Temporal UI, timed out) while the API runs; 0 = only at start and by ``countersign
    #: reconcile`` (``Settings.durable_reconcile_every_s`` under ``countersign up``)
    reconcile_every_s: float = 60.0
    #: seconds between passes that delete the n8n records of settled writes (``PruneDesk``;
    #: ``build_app`` sets 10 for ``countersign api``); 0 = never (test harnesses that read the
    #: records a run left)
    prune_every_s: float = 0.0
    #: where the chat page links a durable run: ``<this>/<workflow_id>`` (the Temporal Web UI's
    #: workflows page of the namespace); None = no link
    temporal_ui: str | None = None
    #: seals and opens Temporal payloads for the codec endpoint (``/codec/*``); None = this
    #: service seals nothing and the endpoint hands payloads back unchanged
    payload_codec: EncryptionCodec | None = None
    #: the one browser origin (the Temporal UI's, e.g. ``http://127.0.0.1:8233``) the codec
    #: routes answer CORS for, with credentials; None = no cross-origin caller
    codec_origin: str | None = None
    #: opens the step runtime for the app's lifetime (an n8n client); None = keep the service's
    runtime: Callable[[], contextlib.AbstractAsyncContextManager[StepTransport]] | None = None
