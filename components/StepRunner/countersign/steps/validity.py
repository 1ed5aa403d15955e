"""Is a verified plan still the one to run? (GLOBAL_SPEC §13 inv. 3b: no write without proof —
the proof covers the registry it was planned against, and it expires.)

A signature proves what the plan says, including ``meta.registry_version``: the registry content
(connector hosts, bindings, scopes) it was planned against. Running it against another registry
would send signed arguments somewhere nobody approved, so every runtime checks, right after the
signature: the registry it holds is the plan's, and the plan's TTL (``meta.created_at +
constraints.ttl_s``) has not passed. Pure: the caller passes the registry version and the time.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from countersign.kernel import CountersignError, Plan

__all__ = ["PlanExpiredError", "PlanNotCurrentError", "RegistryChangedError", "check_current"]


class PlanNotCurrentError(CountersignError):
    """A correctly signed plan that may not run any more; plan again."""

    code = "plan_not_current"


class RegistryChangedError(PlanNotCurrentError):
    """The registry changed since the plan was signed."""

    code = "registry_changed"


class PlanExpiredError(PlanNotCurrentError):
    """The plan's TTL has passed."""

    code = "plan_expired"


def check_current(plan: Plan, *, registry_version: str, now: datetime) -> None:
    """Raise unless ``plan`` may run now against the registry of ``registry_version``.

    Raises:
        RegistryChangedError: names both versions.
        PlanExpiredError: names when it expired.
    """
    if plan.meta.registry_version != registry_version:
        raise RegistryChangedError(
            f"plan {plan.plan_id}: registry changed since this plan was signed "
            f"(signed against {plan.meta.registry_version[:12]}…, running "
            f"{registry_version[:12]}…); plan again"
        )
    expires = plan.meta.created_at + timedelta(seconds=plan.constraints.ttl_s)
    if now >= expires:
        raise PlanExpiredError(
            f"plan {plan.plan_id} expired at {expires.isoformat().replace('+00:00', 'Z')} "
            f"(created {plan.meta.created_at.isoformat().replace('+00:00', 'Z')}, "
            f"ttl {plan.constraints.ttl_s} s); plan again"
        )
