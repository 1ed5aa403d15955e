"""Planner: (Intent, Evidence, Registry, Policy) -> Plan | Needs, pure and deterministic."""

from .core import PLANNER_VERSION, make_plan, policy_version

__all__ = ["PLANNER_VERSION", "make_plan", "policy_version"]
