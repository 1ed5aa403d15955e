"""The contracts of GLOBAL_SPEC.md as frozen pydantic v2 models.

Every model rejects unknown fields (the error names the field). Timestamps are normalised to
UTC and serialise with a ``Z`` suffix so that one instant has one canonical spelling. Values a
person supplied (intent entities and constraints) may not use keys that start with ``$``: that
prefix is reserved for references the planner writes (``{"$ref": "steps.3.output"}``), so user
text can never pose as one (GLOBAL_SPEC §13 inv. 8).
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from functools import cached_property
from typing import Annotated, Any, Literal, TypeVar
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import (
    AfterValidator,
    BaseModel,
    ConfigDict,
    Field,
    JsonValue,
    PlainSerializer,
    PrivateAttr,
    ValidationError,
    field_validator,
    model_validator,
)

from .canonical import canonical_bytes, content_hash
from .errors import ContractError
from .ids import parse_ulid
from .rules import DEFAULT_ON_FAILURE, FailureActions, GateRule

__all__ = [
    "MAX_SAFE_INT",
    "ApprovalToken",
    "Contract",
    "Evidence",
    "ExecuteResult",
    "ExecuteWrapper",
    "Intent",
    "Need",
    "Needs",
    "Plan",
    "PlanConstraints",
    "PlanMeta",
    "PlanStep",
    "Policy",
    "PreviewWrapper",
    "RetrievalWeights",
    "SignatureEnvelope",
    "SignedPlan",
    "StepMode",
    "StepRole",
    "UtcDatetime",
    "format_utc",
    "parse_contract",
]

MAX_SAFE_INT = 2**53 - 1
_NAME = r"^[a-z][a-z0-9_]*(\.[a-z][a-z0-9_]*)*$"
_GATE = r"^gate-[A-Z]{1,3}$"
_HEX64 = r"^[0-9a-f]{64}$"

StepMode = Literal["interactive", "durable"]
StepRole = Literal["Fetcher", "Analyzer", "Watcher", "Resolver", "Booker", "Notifier"]


def format_utc(value: datetime) -> str:
    """ISO 8601 in UTC with millisecond precision and a ``Z``: the one canonical spelling."""
    v = value.astimezone(UTC)
    if type(v) is datetime and v.year >= 1000:
        # the same text at half the cost (about ten per plan + sign + verify): ``isoformat``
        # pads the year to four digits as ``%Y`` does from 1000 on, and truncates to ms
        return v.isoformat(timespec="milliseconds")[:-6] + "Z"
    return v.strftime("%Y-%m-%dT%H:%M:%S.") + f"{v.microsecond // 1000:03d}Z"


def _to_utc(value: datetime) -> datetime:
    if value.tzinfo is None:
        raise ValueError("timestamp needs a timezone (e.g. 'Z' or '+00:00')")
    v = value.astimezone(UTC)
    return v.replace(microsecond=(v.microsecond // 1000) * 1000)


UtcDatetime = Annotated[
    datetime,
    AfterValidator(_to_utc),
    PlainSerializer(format_utc, return_type=str, when_used="always"),
]


def _check_ulid(value: str) -> str:
    try:
        return parse_ulid(value)
    except ContractError as e:
        raise ValueError(e.message) from e


Ulid = Annotated[str, AfterValidator(_check_ulid)]


def _walk_user_json(value: Any, path: str) -> None:
    """Refuse reserved ``$`` keys and integers JSON cannot carry exactly."""
    if isinstance(value, bool) or value is None or isinstance(value, str | float):
        return
    if isinstance(value, int):
        if abs(value) > MAX_SAFE_INT:
            raise ValueError(f"{path}: integer {value} is beyond 2^53-1; send it as a string")
        return
    if isinstance(value, Mapping):
        for k, v in value.items():
            if isinstance(k, str) and k.startswith("$"):
                raise ValueError(f"{path}.{k}: keys starting with '$' are reserved")
            _walk_user_json(v, f"{path}.{k}")
        return
    if isinstance(value, list):
        for i, v in enumerate(value):
            _walk_user_json(v, f"{path}[{i}]")


def _user_json(value: dict[str, JsonValue]) -> dict[str, JsonValue]:
    _walk_user_json(value, "$")
    return value


UserJson = Annotated[dict[str, JsonValue], AfterValidator(_user_json)]


class Contract(BaseModel):
    """Base of every contract: frozen, unknown fields rejected."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    def to_json(self) -> dict[str, Any]:
        """The JSON form that gets canonicalized, hashed and signed."""
        return self.model_dump(mode="json")


M = TypeVar("M", bound="Contract")


def parse_contract(model: type[M], data: Any, *, what: str | None = None) -> M:
    """Validate ``data`` as ``model``; raise ContractError naming every bad field.

    Args:
        model: the contract type.
        data: decoded JSON.
        what: a label for the message (a file name, "intent", ...).
    """
    try:
        return model.model_validate(data)
    except ValidationError as e:
        raise ContractError(_describe(e, what or model.__name__)) from e


def _describe(e: ValidationError, what: str) -> str:
    parts = []
    for err in e.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "(document)"
        if err["type"] == "extra_forbidden":
            parts.append(f"unknown field {loc!r}")
        elif err["type"] == "missing":
            parts.append(f"missing field {loc!r}")
        else:
            parts.append(f"{loc}: {err['msg']}")
    return f"{what}: " + "; ".join(parts)


class Intent(Contract):
    """What the person wants, finalized by Intake. Carries its own id and time."""

    intent: str = Field(pattern=_NAME, max_length=64)
    intent_id: Ulid
    received_at: UtcDatetime
    user_id: str = Field(min_length=1, max_length=128)
    entities: UserJson = Field(default_factory=dict)
    constraints: UserJson = Field(default_factory=dict)
    tz: str = "UTC"
    context_budget: int = Field(default=1, ge=0, le=5)

    @field_validator("tz")
    @classmethod
    def _tz_exists(cls, v: str) -> str:
        try:
            ZoneInfo(v)
        except (ZoneInfoNotFoundError, ValueError) as e:
            raise ValueError(f"unknown IANA time zone {v!r}") from e
        return v


class Evidence(Contract):
    """One small typed fact from ContextRAG (never a raw blob).

    ``why`` is the one sentence a person reads about why the item is there ("Bob is in your
    contacts."); optional, and left out of the JSON form when absent, so evidence made before
    it existed serializes, hashes and verifies as it did (GLOBAL_SPEC §3)."""

    type: Literal["preference", "history", "contact", "plan", "exemplar"]
    key: str = Field(min_length=1, max_length=128)
    value: JsonValue
    confidence: float = Field(ge=0.0, le=1.0)
    source_ref: str = Field(min_length=1, max_length=256)
    ttl_days: int | None = Field(default=None, ge=0, le=36500)
    why: str | None = Field(
        default=None,
        min_length=1,
        max_length=300,
        exclude_if=lambda v: v is None,
        description="one sentence a person reads: why this item is evidence for the intent",
    )

    @field_validator("value")
    @classmethod
    def _value_safe(cls, v: JsonValue) -> JsonValue:
        _walk_user_json(v, "value")
        return v


class PlanStep(Contract):
    """One node of the plan DAG."""

    step: int = Field(ge=1, le=10_000)
    mode: StepMode
    role: StepRole
    uses: str = Field(pattern=_NAME, max_length=64)
    call: str = Field(pattern=_NAME, max_length=64)
    # No walk here: canonicalization refuses integers beyond 2^53 when the plan is signed or
    # verified, so a plan that carries one can neither be signed nor accepted.
    args: dict[str, JsonValue] = Field(default_factory=dict)
    after: list[int] = Field(default_factory=list)
    gate_id: str | None = Field(default=None, pattern=_GATE)
    dry_run: bool

    @field_validator("after")
    @classmethod
    def _after_sorted_unique(cls, v: list[int]) -> list[int]:
        if v != sorted(set(v)):
            raise ValueError("after must list distinct step numbers in ascending order")
        return v


class PlanConstraints(Contract):
    """What the plan may touch and how long it stays valid."""

    scopes: list[str] = Field(default_factory=list)
    ttl_s: int = Field(ge=1, le=365 * 86400)


class PlanMeta(Contract):
    """Provenance: which inputs produced this plan. All derived from the inputs."""

    created_at: UtcDatetime
    author: Literal["planner"] = "planner"
    planner_version: str
    registry_version: str = Field(pattern=_HEX64)
    policy_version: str = Field(pattern=_HEX64)
    evidence_hash: str = Field(pattern=_HEX64)


class Plan(Contract):
    """A deterministic DAG of steps with approval gates before writes."""

    plan_id: Ulid
    intent: Intent
    graph: list[PlanStep] = Field(min_length=1)
    constraints: PlanConstraints
    plugins: list[str]
    meta: PlanMeta

    @model_validator(mode="after")
    def _dag(self) -> Plan:
        numbers = [s.step for s in self.graph]
        if numbers != list(range(1, len(numbers) + 1)):
            raise ValueError("graph steps must be numbered 1..n in order")
        gates = [s.gate_id for s in self.graph if s.gate_id]
        if len(gates) != len(set(gates)):
            raise ValueError("each gate_id may appear on one step only")
        for s in self.graph:
            for dep in s.after:
                if dep >= s.step:
                    raise ValueError(f"step {s.step}: after may only name earlier steps")
        return self

    def step(self, number: int) -> PlanStep:
        """The step with this number (KeyError if none)."""
        if 1 <= number <= len(self.graph):
            return self.graph[number - 1]
        raise KeyError(number)


class SignatureEnvelope(Contract):
    """Detached Ed25519 signature over a plan's canonical bytes (see Signer SPEC)."""

    algo: Literal["Ed25519"] = "Ed25519"
    signer: str = Field(min_length=1, max_length=128)
    ts: UtcDatetime
    nonce: Ulid
    signature: str = Field(pattern=r"^[A-Za-z0-9+/]{86}==$")
    pubkey_id: str = Field(pattern=r"^[A-Za-z0-9_.-]{1,64}$")


class SignedPlan(Contract):
    """A signed plan: the plan, its envelope, its hash and (once computed) its canonical bytes.

    What crosses every boundary (CLI, storage, preview, execute, the API, Temporal inputs):
    ``sign_plan`` makes one, ``to_json()`` is the document ``countersign plan`` prints and
    ``countersign verify`` reads, and nobody assembles that document by hand. A SignedPlan made
    from outside data proves nothing by itself: verification (``verify_signed_plan``) runs over the
    document as written; given a SignedPlan it verifies the model's ``to_json()``, so verify the
    bytes a document was read from, not a model parsed (and normalized) from them. Equality is by
    the three fields only."""

    # Why the SignedPlan path of verify_signed_plan is safe (Kernel LLD, "SignedPlan"): the model
    # has no written form of its own, so the as-written checks (duplicate keys, unknown fields,
    # encoding, the envelope's one spelling) hold trivially for its dump; but the signature is
    # checked over the canonical bytes of that dump and the plan returned is parsed again from it
    # (``_canonical`` is never consulted), so no content other than what was signed can pass.

    plan: Plan
    signature: SignatureEnvelope
    plan_hash: str = Field(pattern=_HEX64)
    #: cache of ``canonical``: the plan object the bytes were computed from, and the bytes
    _canonical: tuple[Plan, bytes] | None = PrivateAttr(default=None)

    @classmethod
    def of(
        cls,
        plan: Plan,
        signature: SignatureEnvelope,
        plan_hash: str,
        canonical: bytes | None = None,
    ) -> SignedPlan:
        """Assemble from parts already validated (the signer's own output); ``canonical``, if
        given, must be the canonical bytes of ``plan`` (it is trusted, not recomputed)."""
        signed = cls.model_construct(plan=plan, signature=signature, plan_hash=plan_hash)
        if canonical is not None:
            signed._canonical = (plan, canonical)
        return signed

    def __eq__(self, other: object) -> bool:
        # pydantic's __eq__ also compares private attributes, so a plan that has computed its
        # canonical bytes would differ from the same plan that has not
        if not isinstance(other, SignedPlan):
            return NotImplemented
        return type(self) is type(other) and (
            self.plan == other.plan
            and self.signature == other.signature
            and self.plan_hash == other.plan_hash
        )

    def __hash__(self) -> int:
        # the same fields as __eq__ (a plan's dict args make it unhashable, as before)
        return hash((self.plan, self.signature, self.plan_hash))

    @property
    def envelope(self) -> SignatureEnvelope:
        """The signature envelope."""
        return self.signature

    @property
    def plan_id(self) -> str:
        """The plan's id."""
        return self.plan.plan_id

    @property
    def canonical(self) -> bytes:
        """RFC 8785 bytes of the plan (what ``plan_hash`` should be the sha256 of; nothing here
        checks that it is — ``verify_signed_plan`` does).

        Cached against the plan object itself, so a copy carrying another plan
        (``model_copy(update={"plan": ...})`` copies private attributes) never serves the bytes
        of the plan it replaced."""
        cached = self._canonical
        if cached is None or cached[0] is not self.plan:
            cached = self._canonical = (self.plan, canonical_bytes(self.plan.to_json()))
        return cached[1]


class Need(Contract):
    """One thing the readiness gate still has to ask for."""

    entity: str
    question: str


class Needs(Contract):
    """The planner's answer when required entities are missing: no plan, questions instead."""

    intent: str
    needs: list[Need] = Field(min_length=1)


class PreviewWrapper(Contract):
    """What a read-only preview returns."""

    normalized: dict[str, JsonValue] = Field(default_factory=dict)
    source: Literal["preview"] = "preview"
    can_execute: bool
    evidence: list[Evidence] = Field(default_factory=list)


class ExecuteResult(Contract):
    """The provider's handle on what was written."""

    id: str | None = None
    link: str | None = None


class ExecuteWrapper(Contract):
    """One connector result from an execute."""

    provider: str
    result: ExecuteResult = Field(default_factory=ExecuteResult)
    status: Literal["created", "updated", "skipped", "error"]
    step: int | None = Field(default=None, ge=1)
    error: str | None = None


class ApprovalToken(Contract):
    """A gate approval: bound to one plan hash, one gate and one user; short-lived; single use."""

    token: str = Field(min_length=16, max_length=2048)
    plan_hash: str = Field(pattern=_HEX64)
    gate_id: str = Field(pattern=_GATE)
    user_id: str = Field(min_length=1, max_length=128)
    exp: UtcDatetime
    scopes: list[str] = Field(default_factory=list)


class RetrievalWeights(Contract):
    """How PlanRetrieval ranks stored plans for a new intent (GLOBAL_SPEC §9; PlanLibrary SPEC).

    The score of a candidate is ``bm25 * s_bm25 + vector * s_vector + success * s_success +
    recency * s_recency``, each ``s`` in 0..1: BM25 and cosine similarity min-max scaled over the
    query's candidates, the Laplace-smoothed success rate ``(successes + 1) / (runs + 2)``, and
    ``0.5 ** (age_days / half_life_days)`` since the plan was last used."""

    bm25: float = Field(default=0.35, ge=0.0, le=1.0)
    vector: float = Field(default=0.55, ge=0.0, le=1.0)
    success: float = Field(default=0.06, ge=0.0, le=1.0)
    recency: float = Field(default=0.04, ge=0.0, le=1.0)
    half_life_days: float = Field(default=30.0, gt=0.0, le=3650.0)
    #: how many exemplars a retrieval returns at most
    top_k: int = Field(default=5, ge=1, le=50)
    #: candidates below this score are not returned
    min_score: float = Field(default=0.1, ge=0.0, le=1.0)

    @model_validator(mode="after")
    def _some_weight(self) -> RetrievalWeights:
        if self.bm25 + self.vector + self.success + self.recency <= 0:
            raise ValueError("at least one retrieval weight must be above 0")
        return self


#: Intake's default confidence threshold (``Policy.intake_threshold``)
_DEFAULT_INTAKE_THRESHOLD = 0.5


#: the rules a policy has unless it says otherwise (a person reads them on every gate)
DEFAULT_RULES: tuple[GateRule, ...] = tuple(
    GateRule.model_validate(r)
    for r in (
        {
            "id": "calendar-write",
            "op": "*.create_event",
            "then": "gate",
            "because": "it puts an event in a calendar",
        },
        {
            "id": "mail-send",
            "op": "*.send",
            "then": "gate",
            "because": "it sends mail in your name",
        },
        {
            "id": "cart-change",
            "op": "*.add_to_cart",
            "then": "gate",
            "because": "it changes your cart",
        },
        {
            "id": "purchase",
            "op": "*.purchase",
            "then": "gate",
            "because": "it buys: the total is shown before you approve",
        },
        {
            "id": "purchase-over-100",
            "op": "*.purchase",
            "where": {"max_total": {"gt": 100}},
            "then": "gate",
            "because": "a purchase over 100",
        },
        {
            "id": "appointment",
            "op": "visa.*",
            "then": "gate",
            "because": "it holds or books an appointment in your name",
        },
    )
)


class Policy(Contract):
    """Configuration that shapes plans (vC). Its content hash is ``version``."""

    plan_ttl_s: int = Field(default=900, ge=60, le=30 * 86400)
    approval_ttl_s: int = Field(default=300, ge=10, le=86400)
    gating: Literal["per_write_group", "per_write"] = "per_write_group"
    #: Which connector serves a capability that intent templates name as ``@<capability>``.
    providers: dict[str, str] = Field(
        default_factory=lambda: {"calendar": "google.calendar", "mail": "gmail", "chat": "slack"}
    )
    min_evidence_confidence: float = Field(default=0.6, ge=0.0, le=1.0)
    watcher_defaults: dict[str, int] = Field(
        default_factory=lambda: {
            "poll_interval_s": 900,
            "max_polls": 2000,
            "max_lifetime_s": 30 * 86400,
        }
    )

    #: the chat card of a plan, for links in what a plan sends (``{plan_id}`` is filled in);
    #: unset: ``/plans/<plan_id>``. Left out of the signed form when unset, so policies that do
    #: not set it keep their version.
    card_url: str | None = Field(default=None, max_length=500, pattern=r"^https?://\S+$")
    #: PlanRetrieval's ranking (PlanLibrary SPEC §3). Left out of the signed form while it is the
    #: default, so policies that do not change it keep their version.
    retrieval: RetrievalWeights = Field(default_factory=RetrievalWeights)
    #: Intake's confidence threshold (0..1): chat text whose intent is understood with less
    #: confidence than this (the deterministic ranking's share, or a model's stated confidence)
    #: is answered with a question instead of a plan (Intake SPEC). Left out of the signed form
    #: while it is the default, so policies that do not change it keep their version.
    intake_threshold: float = Field(default=_DEFAULT_INTAKE_THRESHOLD, ge=0.0, le=1.0)
    #: hosts a connector base URL may name although they are link-local or a cloud metadata
    #: service (``kernel.urls``; e.g. a provider really served on 169.254.x.y). Left out of the
    #: signed form while empty, so policies that do not set it keep their version.
    allow_hosts: tuple[str, ...] = Field(default=(), max_length=32)
    #: gate rules (``kernel.rules``): why a write is gated, or that it never runs; the Planner
    #: puts each matching rule on the write's gate, the executors check them again
    rules: tuple[GateRule, ...] = Field(default_factory=lambda: DEFAULT_RULES, max_length=64)
    #: the failure table (``kernel.rules.FailureActions``): failure class → retry / replan /
    #: compensate / ask. Left out of the signed form while it is the default, so policies that do
    #: not change it keep their version; a changed table is inside the hash the plan signs.
    on_failure: FailureActions = Field(default_factory=lambda: DEFAULT_ON_FAILURE)

    def to_json(self) -> dict[str, Any]:
        """The signed form (``card_url`` only when set, ``retrieval``, ``intake_threshold``,
        ``allow_hosts`` and ``on_failure`` only when not default; each rule's tests only with the field they set)."""
        out = self.model_dump(mode="json")
        if out.get("card_url") is None:
            out.pop("card_url", None)
        if self.retrieval == RetrievalWeights():
            out.pop("retrieval", None)
        if self.intake_threshold == _DEFAULT_INTAKE_THRESHOLD:
            out.pop("intake_threshold", None)
        if not self.allow_hosts:
            out.pop("allow_hosts", None)
        if self.on_failure == DEFAULT_ON_FAILURE:
            out.pop("on_failure", None)
        # a rule's tests as written: only the field each test sets
        out["rules"] = [r.model_dump(mode="json", exclude_none=True) for r in self.rules]
        return out

    @cached_property
    def version(self) -> str:
        """vC: sha256 of the canonical JSON of this Policy (computed once per instance)."""
        return content_hash(self.to_json())

    @field_validator("watcher_defaults")
    @classmethod
    def _positive(cls, v: dict[str, int]) -> dict[str, int]:
        allowed = {"poll_interval_s", "max_polls", "max_lifetime_s"}
        for k, n in v.items():
            if k not in allowed:
                raise ValueError(f"unknown watcher default {k!r} (known: {sorted(allowed)})")
            if n <= 0:
                raise ValueError(f"watcher default {k} must be positive")
        return v
