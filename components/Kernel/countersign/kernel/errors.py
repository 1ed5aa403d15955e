"""The project's exception tree: one root, a subclass per kind of failure, a stable ``code`` each.

Every error says whether retrying the same call can succeed (``retryable``). Adapters turn
foreign exceptions into these with ``raise ... from e``. Verification raises; it never returns a
bool that a caller can forget to check. The whole tree, with the component that raises each class,
its code and its HTTP status, is drawn in GLOBAL_SPEC.md §11 (``tests/test_errors.py`` keeps the
drawing and the code in step, and the codes unique). The kernel's own part::

    CountersignError                       countersign_error
    ├── InputError                         invalid_input     (CLI exit 2, HTTP 422)
    │   ├── ContractError                  contract_invalid
    │   ├── DocumentError                  document_malformed
    │   │   └── DuplicateKeyError          document_duplicate_key
    │   └── RegistryFileError              registry_invalid
    ├── SignatureError                     signature_*       (refused and audited)
    ├── KeyRingError                       keyring_error
    └── PlanningError                      planning_error, unknown_intent, binding_error
"""

from __future__ import annotations

from typing import ClassVar

__all__ = [
    "BadSignatureError",
    "BindingError",
    "ContractError",
    "CountersignError",
    "DocumentError",
    "DuplicateKeyError",
    "HashMismatchError",
    "InputError",
    "KeyRevokedError",
    "KeyRingError",
    "MalformedEnvelopeError",
    "PlanningError",
    "RegistryFileError",
    "SignatureError",
    "UnknownIntentError",
    "UnknownKeyError",
]


class CountersignError(Exception):
    """Root of every error the project raises on purpose."""

    code: ClassVar[str] = "countersign_error"
    retryable: ClassVar[bool] = False

    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message

    def one_line(self) -> str:
        """The message on one line, prefixed with the stable code (CLI and logs)."""
        flat = " ".join(self.message.split())
        return f"{self.code}: {flat}"


class InputError(CountersignError):
    """Input that can never succeed as given (bad JSON, schema violation, unknown field)."""

    code = "invalid_input"


class ContractError(InputError):
    """A document does not satisfy its contract (GLOBAL_SPEC.md)."""

    code = "contract_invalid"


class DocumentError(InputError):
    """A document cannot be read as exactly one JSON/YAML value (``kernel.documents``).

    The message names the document (``what``: a file path, "request body", ...) and, when known,
    the place in it (``path``, e.g. ``$.plan.graph[0].args``).
    """

    code = "document_malformed"

    def __init__(
        self, message: str, *, what: str, path: str | None = None, line: int | None = None
    ) -> None:
        super().__init__(f"{what}: " + (f"{path}: " if path else "") + message)
        self.what = what
        self.path = path
        self.line = line
        self.detail = message


class DuplicateKeyError(DocumentError):
    """An object or mapping repeats a key: the document has two readings, so it has none."""

    code = "document_duplicate_key"

    def __init__(self, *, key: str, what: str, path: str, detail: str | None = None) -> None:
        where = f" ({detail})" if detail else ""
        super().__init__(f"key {key!r} appears more than once{where}", what=what, path=path)
        self.key = key


class RegistryFileError(InputError):
    """A registry file is broken; the message names the file and the field."""

    code = "registry_invalid"

    def __init__(self, message: str, *, file: str, field: str | None = None) -> None:
        where = f"{file}" + (f": {field}" if field else "")
        super().__init__(f"{where}: {message}")
        self.file = file
        self.field = field


class SignatureError(CountersignError):
    """A signed document failed verification. Always refused; callers audit it."""

    code = "signature_error"


class MalformedEnvelopeError(SignatureError):
    """The signed document or its envelope is not well formed."""

    code = "signature_malformed"


class UnknownKeyError(SignatureError):
    """The envelope names a ``pubkey_id`` the key ring does not hold."""

    code = "signature_unknown_key"


class KeyRevokedError(SignatureError):
    """The envelope was made with a key that has since been revoked."""

    code = "signature_key_revoked"


class HashMismatchError(SignatureError):
    """The stated ``plan_hash`` is not the hash of the plan's canonical bytes."""

    code = "signature_hash_mismatch"


class BadSignatureError(SignatureError):
    """The Ed25519 signature does not hold over the plan."""

    code = "signature_invalid"


class KeyRingError(CountersignError):
    """The key store is missing, unreadable, or unsafe (permissions)."""

    code = "keyring_error"


class PlanningError(CountersignError):
    """The planner cannot build a plan from these inputs."""

    code = "planning_error"


class UnknownIntentError(PlanningError):
    """The intent name is not one the registry can plan."""

    code = "unknown_intent"

    def __init__(self, intent: str, known: list[str]) -> None:
        super().__init__(f"unknown intent {intent!r}; the registry knows: {', '.join(known)}")
        self.intent = intent
        self.known = known


class BindingError(PlanningError):
    """A plan step has no complete binding to a connector operation."""

    code = "binding_error"
