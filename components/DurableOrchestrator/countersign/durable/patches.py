"""The ``workflow.patched`` ids of the durable workflows, each with what it changed.

A change to the commands a workflow sends needs one (DurableOrchestrator LLD, "Determinism"):
histories recorded before it replay the old branch. Ids are never renamed or reused.
"""

from __future__ import annotations

__all__ = [
    "CANCEL_PATCH",
    "CANCEL_SIGNAL_RETIRED_PATCH",
    "FINISH_PATCH",
    "HOLD_SETTLES_PATCH",
    "LOCAL_ACTIVITIES_PATCH",
    "NO_UNSIGNED_END_NOTICE_PATCH",
    "ONE_SCHEDULER_PATCH",
    "STATE_ATTRIBUTES_PATCH",
]

#: the end of a run calls ``finish_plan`` (plan status + ``durable_finished``)
FINISH_PATCH = "finish-plan-v1"
#: a run cancelled through Temporal records its outcome before it ends CANCELED
CANCEL_PATCH = "cancel-records-outcome-v1"
#: the ``cancel`` signal no longer ends a watcher (it ended COMPLETED): Temporal's cancellation is
#: the one cancel path; histories where the signal ended the run replay the old branch
CANCEL_SIGNAL_RETIRED_PATCH = "cancel-signal-retired-v1"
#: a hold being placed when the run is cancelled is waited for (then released), not abandoned
HOLD_SETTLES_PATCH = "hold-settles-before-cancel-v1"
#: a watcher keeps the search attributes ``watch_state`` and ``poll_count`` current
STATE_ATTRIBUTES_PATCH = "watch-search-attributes-v1"
#: a watcher that ends without a booking sends no end notice (it rewrote the signed mail unsigned)
NO_UNSIGNED_END_NOTICE_PATCH = "no-unsigned-end-notice-v1"
#: the plan interpreter schedules with ``countersign.steps.run_dag`` (before: whole waves)
ONE_SCHEDULER_PATCH = "one-scheduler-v1"
#: ``verify_plan`` and ``finish_plan`` (short, local Postgres work) run as local activities in the
#: workflow task that asks for them: no activity task, no extra workflow task, no input payload in
#: the history (a marker holds the result); histories from before replay the activity tasks
LOCAL_ACTIVITIES_PATCH = "local-verify-finish-v1"
