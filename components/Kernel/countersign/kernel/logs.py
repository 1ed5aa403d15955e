"""Structured logs: one JSON object per line on stderr, never a secret (Kernel SPEC, logs).

Every process logs through structlog with one pipeline, set up here once per process:
``contextvars`` merged (what a request or an activity bound: ``plan_id``, ``route`` …), the level,
an ISO-8601 UTC time stamp, the secret filter (``redact``), JSON. A line that concerns a plan
carries ``plan_id`` and, where they apply, ``step``, ``op``, ``gate``, ``latency_ms``,
``retries`` and ``status`` (GLOBAL_SPEC, logs and traces).

Invariant: no line carries a secret. ``redact`` runs last before rendering, on every line: a value
under a key that names a secret (``token``, ``key``, ``secret``, ``password``, ``signature``,
``authorization``, ``cookie``, ``csrf``, ``seed``, ``credential``) is replaced whole; inside
any other text, anything shaped like a Countersign secret is cut out — API keys, login links and
sessions (``cs_`` + 43 base64url), approval tokens (``cst_`` + 43), n8n's API keys (JWTs), PEM
blocks, ``Bearer`` credentials, and Ed25519 material (base64 of 32 or 64 bytes, hex of 64 bytes).
A 64-hex value stays: that is the sha256 form of plan hashes and idempotency keys, and
Countersign never writes a key in hex.

Until a process calls ``configure_logging``, the same pipeline runs at level ``warning`` (a library
use, a test, a CLI verb stays quiet); the API, the durable worker and ``countersign up`` call it at
start with ``info``.
"""

from __future__ import annotations

import re
import sys
import threading
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from functools import lru_cache
from typing import Any, TextIO

import structlog

__all__ = [
    "REDACTED",
    "configure_logging",
    "get_logger",
    "info_enabled",
    "logs_to",
    "redact",
    "redact_text",
]

REDACTED = "[redacted]"
_LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}
#: keys whose value is a secret whatever it looks like (``idempotency_key`` and ``*_id`` are not)
_SECRET_KEY = re.compile(
    r"token|secret|passw|signature|authoriz|cookie|csrf|seed|credential|api_?key|private"
    r"|(^|_)key$",
    re.IGNORECASE,
)
_NOT_SECRET_KEYS = frozenset({"idempotency_key", "key_id", "pubkey_id", "signing_key_id"})
#: secret shapes inside text (module docstring); the base64 / hex ones stand alone as words
_SECRET_TEXT = re.compile(
    r"cst?_[A-Za-z0-9_-]{20,}"  # API key, login link, session; approval token
    r"|eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*\.?[A-Za-z0-9_-]*"  # a JWT (n8n's API key)
    r"|-----BEGIN[^-]*-----.*?(?:-----END[^-]*-----|$)"  # a PEM block
    r"|(?i:bearer)\s+[^\s\"',;]+"  # an Authorization value
    r"|(?<![A-Za-z0-9+/=])(?:[A-Za-z0-9+/]{86}==|[A-Za-z0-9+/]{43}=)(?![A-Za-z0-9+/=])"  # Ed25519
    r"|(?<![0-9A-Fa-f])[0-9A-Fa-f]{128}(?![0-9A-Fa-f])",  # a signature in hex
    re.DOTALL,
)


def redact_text(text: str) -> str:
    """``text`` with every secret-shaped part replaced by ``[redacted]``."""
    return _SECRET_TEXT.sub(REDACTED, text)


def _clean(value: Any, depth: int = 0) -> Any:
    if isinstance(value, str):
        return redact_text(value)
    if depth > 8:  # deeper than any line of ours: not worth walking, never worth leaking
        return REDACTED
    if isinstance(value, Mapping):
        return {str(k): _field(str(k), v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_clean(v, depth + 1) for v in value]
    if value is None or isinstance(value, bool | int | float):
        return value
    return redact_text(str(value))


@lru_cache(maxsize=4096)
def _secret_key(key: str) -> bool:
    # keys are few and repeat on every line: one regex search per key and process
    return key not in _NOT_SECRET_KEYS and _SECRET_KEY.search(key) is not None


def _field(key: str, value: Any, depth: int) -> Any:
    if value is not None and _secret_key(key):
        return REDACTED
    return _clean(value, depth)


def redact(_: Any, __: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    """structlog processor: the line with its secrets replaced (module docstring)."""
    for key in list(event):
        event[key] = _field(key, event[key], 0)
    return event


class _Sink:
    """Where lines go: a stream that can be swapped under the cached loggers (``logs_to``)."""

    def __init__(self) -> None:
        self.stream: TextIO = sys.stderr
        self.level = _LEVELS["warning"]
        self.lock = threading.Lock()

    def write(self, text: str) -> None:
        with self.lock:
            self.stream.write(text)

    def flush(self) -> None:
        self.stream.flush()


_SINK = _Sink()


def _gate(_: Any, method: str, event: MutableMapping[str, Any]) -> MutableMapping[str, Any]:
    if _LEVELS.get(method, 20) < _SINK.level:
        raise structlog.DropEvent
    return event


def _setup() -> None:
    structlog.configure(
        processors=[
            _gate,
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            # frames without their locals: a local may hold a key the filter cannot recognize
            structlog.processors.ExceptionRenderer(
                structlog.tracebacks.ExceptionDictTransformer(show_locals=False)
            ),
            redact,
            structlog.processors.JSONRenderer(sort_keys=False),
        ],
        logger_factory=structlog.WriteLoggerFactory(file=_SINK),  # type: ignore[arg-type]
        cache_logger_on_first_use=True,
    )


def configure_logging(level: str = "info", *, stream: TextIO | None = None) -> None:
    """Log ``level`` and above as JSON lines to ``stream`` (stderr). Idempotent: a second call
    only changes the level and the stream.

    Raises:
        ValueError: ``level`` is not one of debug, info, warning, error, critical.
    """
    if level not in _LEVELS:
        raise ValueError(f"log level must be one of {sorted(_LEVELS)}, got {level!r}")
    _SINK.level = _LEVELS[level]
    _SINK.stream = stream or sys.stderr


@contextmanager
def logs_to(stream: TextIO, level: str = "info") -> Iterator[None]:
    """Within the block, every line of this process at ``level`` or above goes to ``stream``
    (a test reads a whole run's lines); the previous destination afterwards."""
    before = (_SINK.stream, _SINK.level)
    configure_logging(level, stream=stream)
    try:
        yield
    finally:
        _SINK.stream, _SINK.level = before


def info_enabled() -> bool:
    """Whether an ``info`` line would be written (a caller may skip building one)."""
    return _SINK.level <= _LEVELS["info"]


def get_logger(name: str) -> Any:
    """The logger of a module (``name`` is logged as ``module``)."""
    return structlog.get_logger(module=name)


_setup()
