"""Shared kernel: the contracts (GLOBAL_SPEC.md), the error tree, ids, canonical JSON, settings."""

# Lazy (PEP 562): a name's module is imported on first use, so importing one light part of this
# package (an error class, a constant) does not load the rest (issue 28 §5: a CLI verb imports
# only what it uses). The names, and what they are, are those of the eager imports below.
from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .canonical import canonical_bytes, content_hash, sha256_hex
    from .clock import Clock, system_clock
    from .documents import MAX_DEPTH, loads_strict, loads_yaml_strict
    from .errors import (
        BadSignatureError,
        BindingError,
        ContractError,
        CountersignError,
        DocumentError,
        DuplicateKeyError,
        HashMismatchError,
        InputError,
        KeyRevokedError,
        KeyRingError,
        MalformedEnvelopeError,
        PlanningError,
        RegistryFileError,
        SignatureError,
        UnknownIntentError,
        UnknownKeyError,
    )
    from .ids import ascii_digits, derived_ulid, parse_ulid
    from .models import (
        DEFAULT_RULES,
        MAX_SAFE_INT,
        ApprovalToken,
        Contract,
        Evidence,
        ExecuteResult,
        ExecuteWrapper,
        Intent,
        Need,
        Needs,
        Plan,
        PlanConstraints,
        PlanMeta,
        PlanStep,
        Policy,
        PreviewWrapper,
        RetrievalWeights,
        SignatureEnvelope,
        SignedPlan,
        StepMode,
        StepRole,
        UtcDatetime,
        format_utc,
        parse_contract,
    )
    from .rules import (
        DEFAULT_ON_FAILURE,
        ArgTest,
        FailureActions,
        GateRule,
        OnFailure,
        RuleHit,
        rule_hits,
    )
    from .schemas import schema_snapshot
    from .settings import Settings, source_registry_dir
    from .urls import url_refusal

__all__ = [
    "DEFAULT_ON_FAILURE",
    "DEFAULT_RULES",
    "MAX_DEPTH",
    "MAX_SAFE_INT",
    "ApprovalToken",
    "ArgTest",
    "BadSignatureError",
    "BindingError",
    "Clock",
    "Contract",
    "ContractError",
    "CountersignError",
    "DocumentError",
    "DuplicateKeyError",
    "Evidence",
    "ExecuteResult",
    "ExecuteWrapper",
    "FailureActions",
    "GateRule",
    "HashMismatchError",
    "InputError",
    "Intent",
    "KeyRevokedError",
    "KeyRingError",
    "MalformedEnvelopeError",
    "Need",
    "Needs",
    "OnFailure",
    "Plan",
    "PlanConstraints",
    "PlanMeta",
    "PlanStep",
    "PlanningError",
    "Policy",
    "PreviewWrapper",
    "RegistryFileError",
    "RetrievalWeights",
    "RuleHit",
    "Settings",
    "SignatureEnvelope",
    "SignatureError",
    "SignedPlan",
    "StepMode",
    "StepRole",
    "UnknownIntentError",
    "UnknownKeyError",
    "UtcDatetime",
    "ascii_digits",
    "canonical_bytes",
    "content_hash",
    "derived_ulid",
    "format_utc",
    "lazy_exports",
    "loads_strict",
    "loads_yaml_strict",
    "parse_contract",
    "parse_ulid",
    "rule_hits",
    "schema_snapshot",
    "sha256_hex",
    "source_registry_dir",
    "system_clock",
    "url_refusal",
]

#: each exported name -> the module (relative to this package) that defines it
_LAZY: dict[str, str] = {
    "canonical_bytes": "canonical",
    "content_hash": "canonical",
    "sha256_hex": "canonical",
    "Clock": "clock",
    "system_clock": "clock",
    "MAX_DEPTH": "documents",
    "loads_strict": "documents",
    "loads_yaml_strict": "documents",
    "BadSignatureError": "errors",
    "BindingError": "errors",
    "ContractError": "errors",
    "CountersignError": "errors",
    "DocumentError": "errors",
    "DuplicateKeyError": "errors",
    "HashMismatchError": "errors",
    "InputError": "errors",
    "KeyRevokedError": "errors",
    "KeyRingError": "errors",
    "MalformedEnvelopeError": "errors",
    "PlanningError": "errors",
    "RegistryFileError": "errors",
    "SignatureError": "errors",
    "UnknownIntentError": "errors",
    "UnknownKeyError": "errors",
    "ascii_digits": "ids",
    "derived_ulid": "ids",
    "parse_ulid": "ids",
    "DEFAULT_RULES": "models",
    "MAX_SAFE_INT": "models",
    "ApprovalToken": "models",
    "Contract": "models",
    "Evidence": "models",
    "ExecuteResult": "models",
    "ExecuteWrapper": "models",
    "Intent": "models",
    "Need": "models",
    "Needs": "models",
    "Plan": "models",
    "PlanConstraints": "models",
    "PlanMeta": "models",
    "PlanStep": "models",
    "Policy": "models",
    "PreviewWrapper": "models",
    "RetrievalWeights": "models",
    "SignatureEnvelope": "models",
    "SignedPlan": "models",
    "StepMode": "models",
    "StepRole": "models",
    "UtcDatetime": "models",
    "format_utc": "models",
    "parse_contract": "models",
    "ArgTest": "rules",
    "DEFAULT_ON_FAILURE": "rules",
    "FailureActions": "rules",
    "GateRule": "rules",
    "OnFailure": "rules",
    "RuleHit": "rules",
    "rule_hits": "rules",
    "schema_snapshot": "schemas",
    "Settings": "settings",
    "source_registry_dir": "settings",
    "url_refusal": "urls",
}


def lazy_exports(
    package: str, table: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """Lazy package exports (PEP 562), one implementation for every light ``__init__``: the
    ``__getattr__`` and ``__dir__`` of ``package`` whose exported names live in the
    modules ``table`` names (relative to the package); ``namespace``: its ``globals()``."""

    def getattr_(name: str) -> object:
        module = table.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f".{module}", package), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted({*namespace, *table})

    return getattr_, dir_


if not TYPE_CHECKING:
    __getattr__, __dir__ = lazy_exports(__name__, _LAZY, globals())
