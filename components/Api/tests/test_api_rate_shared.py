"""The per-user rate limit is one count across every API process on the database (issue 27 §4):
two limiters over one PostgreSQL (two API processes) allow ``per_min`` requests together, not
each; the window slides across the minute's edge; users do not share a budget."""

from __future__ import annotations

from datetime import UTC, datetime

from countersign.api.deps import RateLimiter
from countersign.api.users import UserStore
from countersign.storage import Database, ReadPool, libpq_url

T0 = 1_800_000_000.0 - (1_800_000_000.0 % 60)  # a minute's start


class Clock:
    def __init__(self) -> None:
        self.t = T0

    def __call__(self) -> float:
        return self.t


def _store(db: Database) -> tuple[UserStore, ReadPool]:
    reads = ReadPool.open(libpq_url(db), size=2)
    return UserStore(db, clock=lambda: datetime.now(UTC), reads=reads), reads


def test_two_processes_share_one_budget_and_it_slides(db: Database) -> None:
    (a_users, a_pool), (b_users, b_pool) = _store(db), _store(db)
    clock = Clock()
    a, b = RateLimiter(10, a_users, clock), RateLimiter(10, b_users, clock)
    try:
        assert a.shared and b.shared
        user = "rate-shared@example.com"
        assert [a.allow(user) for _ in range(6)] == [True] * 6
        assert [b.allow(user) for _ in range(4)] == [True] * 4
        assert not b.allow(user) and not a.allow(user)  # the 11th, on either process
        assert a.allow("someone-else@example.com")  # a budget per user
        clock.t = T0 + 60 + 45  # 45 s into the next minute: 12 × 0.25 = 3 still count
        allowed = sum(a.allow(user) for _ in range(10))
        assert allowed == 7, allowed
        clock.t = T0 + 180  # two minutes later, nothing of before counts
        assert all(b.allow(user) for _ in range(10))
    finally:
        a_pool.close()
        b_pool.close()


def test_without_the_pool_the_limit_is_this_process_s_own() -> None:
    limiter = RateLimiter(3)
    assert not limiter.shared
    assert [limiter.allow("u") for _ in range(4)] == [True, True, True, False]
    assert RateLimiter(0).allow("u")
