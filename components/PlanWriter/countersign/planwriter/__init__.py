"""PlanWriter (PlanWriter SPEC): execution outcomes → normalized history facts and library counts,
idempotent per (plan_id, step); refreshes the plan's embedding."""

from .writer import HistoryRecorder, OutcomeFact, PlanWriter, WriteReport, normalized_facts

__all__ = ["HistoryRecorder", "OutcomeFact", "PlanWriter", "WriteReport", "normalized_facts"]
