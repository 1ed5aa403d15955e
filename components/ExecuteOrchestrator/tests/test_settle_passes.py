"""The API's settle passes outlive a failed pass, whatever it raised: a driver error no store
wrapped (PostgreSQL killed and back) must not end the loop, or every cut-short execute stays
``running`` until the API restarts (found by the stack chaos suite, a PostgreSQL kill)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from sqlalchemy.exc import PendingRollbackError

from countersign.execute.settle import Settlement
from countersign.execute.settling import SettleLoop


class _Flaky(SettleLoop):
    def __init__(self, errors: list[BaseException]) -> None:
        super().__init__(settler=None, events=None)  # type: ignore[arg-type]
        self.errors = errors
        self.calls = 0

    async def pass_once(self, *, now: Any = None) -> list[Settlement]:
        self.calls += 1
        if self.errors:
            raise self.errors.pop(0)
        return []


@pytest.mark.parametrize(
    "error",
    [
        PendingRollbackError("Can't reconnect until invalid transaction is rolled back"),
        KeyError("x"),
    ],
)
def test_the_passes_go_on_after_a_pass_raised(error: BaseException) -> None:
    loop = _Flaky([error, error])

    async def go() -> None:
        task = asyncio.create_task(loop.passes(0.01))
        for _ in range(200):
            if loop.calls >= 4 or task.done():
                break
            await asyncio.sleep(0.01)
        assert not task.done(), task.exception()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert loop.calls >= 4
