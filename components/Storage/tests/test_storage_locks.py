"""Resource locks (Storage LLD §5): one holder per key across connections, all of a holder's keys
or none, a bounded wait that names the key, and a dead holder's locks released by the server."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from sqlalchemy import text

from countersign.storage import Database, ResourceBusyError, ResourceLocks


def test_two_holders_of_one_key_run_one_after_the_other(db: Database) -> None:
    locks = ResourceLocks(db)
    inside: list[str] = []
    log: list[tuple[str, str]] = []

    async def writer(name: str) -> None:
        async with locks.hold(["calendar:alice"]):
            inside.append(name)
            log.append(("in", name))
            assert len(inside) == 1, f"two holders at once: {inside}"
            await asyncio.sleep(0.05)
            inside.remove(name)
            log.append(("out", name))

    async def main() -> None:
        await asyncio.gather(*(writer(f"w{i}") for i in range(5)))

    asyncio.run(main())
    # strictly nested: every "in" is followed by its own "out"
    assert [k for k, _ in log] == ["in", "out"] * 5


def test_different_keys_do_not_wait_for_each_other(db: Database) -> None:
    locks = ResourceLocks(db)

    async def main() -> float:
        async with locks.hold(["calendar:alice"]):
            t = time.monotonic()
            async with locks.hold(["calendar:bob"], wait_s=0.2):
                return time.monotonic() - t

    assert asyncio.run(main()) < 0.2


def test_a_held_key_is_refused_after_the_wait_naming_it_and_nothing_is_kept(db: Database) -> None:
    locks = ResourceLocks(db)

    async def main() -> None:
        async with locks.hold(["cart:alice"]):
            t = time.monotonic()
            with pytest.raises(ResourceBusyError) as e:
                # all or nothing: calendar:zed is free, cart:alice is not
                async with locks.hold(["calendar:zed", "cart:alice"], wait_s=0.3):
                    pytest.fail("entered while another holder had cart:alice")
            assert 0.2 <= time.monotonic() - t < 2.0
            assert e.value.key == "cart:alice" and e.value.code == "resource_busy"
            assert "cart:alice" in e.value.message
            # the free key it tried was let go: another holder takes it at once
            async with locks.hold(["calendar:zed"], wait_s=0.05):
                pass

    asyncio.run(main())


def test_a_block_that_raises_releases_its_keys(db: Database) -> None:
    locks = ResourceLocks(db)

    async def main() -> None:
        with pytest.raises(RuntimeError):
            async with locks.hold(["visa:lisbon"]):
                raise RuntimeError("the write failed")
        async with locks.hold(["visa:lisbon"], wait_s=0.05):
            pass

    asyncio.run(main())


async def _taken(locks: ResourceLocks, key: str, wait_s: float) -> bool:
    """Whether ``key`` could be held within ``wait_s`` (let go at once)."""
    try:
        async with locks.hold([key], wait_s=wait_s):
            return True
    except ResourceBusyError:
        return False


def test_a_killed_holder_process_releases_its_lock(db: Database) -> None:
    url = db.engine.url.render_as_string(hide_password=False)
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import asyncio, sys\n"
            "from countersign.storage import Database, ResourceLocks\n"
            "db = Database.from_url(sys.argv[1], migrate=False)\n"
            "async def main():\n"
            "    async with ResourceLocks(db).hold(['calendar:dead']):\n"
            "        print('held', flush=True)\n"
            "        await asyncio.sleep(600)\n"
            "asyncio.run(main())\n",
            url,
        ],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ},
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        locks = ResourceLocks(db)
        assert not asyncio.run(_taken(locks, "calendar:dead", 0.2)), "the live holder keeps it"
        holder.kill()  # SIGKILL: no unlock runs; the server sees the session end
        holder.wait(10)
        assert asyncio.run(_taken(locks, "calendar:dead", 10.0)), "a dead holder's lock is released"
    finally:
        holder.kill()


_HUNG_HOLDER = """\
import asyncio, sys
from countersign.storage import Database, ResourceLocks
db = Database.from_url(sys.argv[1], migrate=False)
async def main():
    async with ResourceLocks(db, lease_s=float(sys.argv[2])).hold(['calendar:hung']):
        print('held', flush=True)
        await asyncio.sleep(1)  # stopped here: the session sits idle past its lease
    print('left', flush=True)
asyncio.run(main())
"""


def test_a_hung_holder_loses_its_lock_after_the_lease_and_cannot_free_the_next_ones(
    db: Database,
) -> None:
    """A holder that hangs (SIGSTOPped: its connection stays open, nothing is sent on it) keeps
    the key until its lease: the server ends its idle session (``idle_session_timeout``) and the
    key is free. When it wakes, leaving its block is quiet and lets go nothing of the next
    holder's."""
    lease_s = 1.0
    url = db.engine.url.render_as_string(hide_password=False)
    holder = subprocess.Popen(
        [sys.executable, "-c", _HUNG_HOLDER, url, str(lease_s)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    locks = ResourceLocks(db)
    try:
        assert holder.stdout is not None and holder.stdout.readline().strip() == "held"
        holder.send_signal(signal.SIGSTOP)  # hung: alive, connected, silent
        held_at = time.monotonic()
        assert not asyncio.run(_taken(locks, "calendar:hung", 0.2)), "kept within its lease"

        async def after_the_lease() -> None:
            async with locks.hold(["calendar:hung"], wait_s=10):
                waited = time.monotonic() - held_at
                assert lease_s * 0.9 <= waited < lease_s + 5, waited
                holder.send_signal(signal.SIGCONT)  # it wakes while the next holder has it
                out, err = await asyncio.to_thread(holder.communicate, timeout=20)
                assert holder.returncode == 0 and out.strip() == "left", err
                # its release ran on a session the server had ended: the key is still ours
                other = ResourceLocks(db)
                with pytest.raises(ResourceBusyError):
                    async with other.hold(["calendar:hung"], wait_s=0.2):
                        pytest.fail("the woken holder let go of the next holder's key")

        asyncio.run(after_the_lease())
        assert asyncio.run(_taken(locks, "calendar:hung", 0.2)), "free once its holder left"
    finally:
        holder.send_signal(signal.SIGCONT)
        holder.kill()
        holder.wait(10)


@settings(
    max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    st.lists(
        st.lists(st.sampled_from(["a", "b", "c", "d"]), min_size=1, max_size=3),
        min_size=2,
        max_size=4,
    )
)
def test_any_key_sets_never_overlap_on_a_shared_key_and_never_deadlock(
    db: Database, sets: list[list[str]]
) -> None:
    locks = ResourceLocks(db, backoff_s=(0.001, 0.01))
    held: dict[str, str] = {}

    async def one(i: int, keys: list[str]) -> None:
        async with locks.hold(keys, wait_s=10):
            for k in set(keys):
                assert k not in held, f"{k} held by {held[k]} and holder {i}"
                held[k] = str(i)
            await asyncio.sleep(0.005)
            for k in set(keys):
                del held[k]

    async def main() -> None:
        await asyncio.gather(*(one(i, ks) for i, ks in enumerate(sets)))

    asyncio.run(main())


def test_a_pooled_connection_does_not_keep_the_lease_timeout(db: Database) -> None:
    async def main() -> None:
        async with ResourceLocks(db).hold(["calendar:pool"]):
            pass

    for _ in range(3):
        asyncio.run(main())
    with db.tx() as c:
        assert c.execute(text("SHOW idle_session_timeout")).scalar_one() == "0"


def test_a_connection_lost_before_the_take_is_a_storage_error(
    db: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The database drops the lock's connection between connect and take (PostgreSQL killed,
    found by the stack chaos suite): a typed ``StorageError`` (the execute answers 503, not 500),
    and the key is free afterwards."""
    from sqlalchemy import Connection

    from countersign.storage import StorageError

    locks = ResourceLocks(db)
    real = locks._connect

    def connect_then_lose() -> Connection:
        conn = real()
        pid = conn.execute(text("SELECT pg_backend_pid()")).scalar_one()
        with db.engine.connect() as other:
            other.execute(text("SELECT pg_terminate_backend(:p)"), {"p": pid})
            other.commit()
        return conn

    monkeypatch.setattr(locks, "_connect", connect_then_lose)

    async def hold() -> None:
        async with locks.hold(["cart:lost"]):
            raise AssertionError("held on a lost connection")

    with pytest.raises(StorageError, match="cart:lost"):
        asyncio.run(hold())
    monkeypatch.undo()

    async def again() -> bool:
        async with locks.hold(["cart:lost"], wait_s=1):
            return True

    assert asyncio.run(again())
