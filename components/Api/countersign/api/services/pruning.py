"""What n8n keeps of a write, once it is settled (Api SPEC, settling; N8nRuntime SPEC "What n8n
keeps"): the API's lifespan runs ``PruneDesk.passes`` beside the settling passes, so a write
workflow's execution record is deleted as soon as the ledger holds its key settled (completed or
failed); a record whose write is unknown or in progress stays for the reconciler. Read workflows
keep none in the first place.
"""

from __future__ import annotations

import asyncio
import logging
from dataclasses import dataclass

from countersign.kernel import CountersignError
from countersign.n8n.keeping import prune_settled
from countersign.steps import N8nTransport

from .runtime import Runtime

__all__ = ["SETTLED", "PruneDesk"]

#: ledger states after which nothing needs a write's n8n record
SETTLED = frozenset({"completed", "failed"})

_log = logging.getLogger("countersign.api.pruning")


@dataclass(frozen=True)
class PruneDesk:
    """Deletes the n8n records of settled writes, through the runtime's n8n."""

    runtime: Runtime

    def settled(self, key: str) -> bool:
        """Whether the ledger holds ``key`` settled (a key it no longer holds is not)."""
        row = self.runtime.executor.ledger.state(key)
        return row is not None and str(row["state"]) in SETTLED

    async def pass_once(self) -> list[str]:
        """One pass: the ids of the executions deleted (none without n8n as the runtime)."""
        transport = self.runtime.executor.transport
        if not isinstance(transport, N8nTransport):
            return []
        return await prune_settled(transport.client, settled=self.settled)

    async def passes(self, every_s: float) -> None:
        """Forever (until cancelled): a pass now, then one every ``every_s`` seconds."""
        while True:
            try:
                gone = await self.pass_once()
                if gone:
                    _log.info("n8n records of settled writes deleted: %d", len(gone))
            except (CountersignError, OSError) as e:  # n8n or the database away: next pass
                _log.warning("prune pass failed: %s", str(e)[:300])
            await asyncio.sleep(every_s)
