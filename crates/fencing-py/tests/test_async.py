"""`async with issuer.lock(...)`: the event loop runs on while the lock is
taken, and a lost lease cancels the block and raises LeaseLost."""

from __future__ import annotations

import asyncio

import pytest

import fencing
from conftest import unique


def test_the_event_loop_runs_while_a_lock_is_taken(etcd: fencing.Issuer) -> None:
    store = fencing.open_store("sqlite::memory:")
    resource, key = unique("res"), unique("key")
    first = etcd.acquire(resource, ttl=10)

    async def main() -> tuple[int, int]:
        ticks = 0
        done = asyncio.Event()

        async def tick() -> None:
            nonlocal ticks
            while not done.is_set():
                ticks += 1
                await asyncio.sleep(0.01)

        ticker = asyncio.create_task(tick())
        # The resource is held: the lock waits until it is released.
        asyncio.get_running_loop().call_later(0.5, etcd.release, first)
        async with etcd.lock(resource, ttl=10, wait=10, fence=[(store, key)]) as held:
            store.put(key, b"async", held.token)
            token = held.token
        done.set()
        await ticker
        return ticks, token

    ticks, token = asyncio.run(main())
    assert token > first.token
    assert store.mark(key) == token
    # About 50 ticks in the half second the lock waited: the loop was not blocked.
    assert ticks > 20, ticks


def test_a_lost_lease_cancels_the_block_and_raises_lease_lost(etcd: fencing.Issuer) -> None:
    resource = unique("res")
    reached_the_end = False
    left_cancelling: list[int] = []

    async def main() -> None:
        nonlocal reached_the_end
        try:
            async with etcd.lock(resource, ttl=3) as held:
                # Released behind the keep-alive's back: its next renewal
                # (within a third of the TTL) finds the lease gone.
                etcd.release(held.lease)
                await asyncio.sleep(30)
                reached_the_end = True
        finally:
            task = asyncio.current_task()
            if task is not None and hasattr(task, "cancelling"):  # Python 3.11+
                left_cancelling.append(task.cancelling())

    with pytest.raises(fencing.LeaseLost) as lost:
        asyncio.run(asyncio.wait_for(main(), 20))
    assert lost.value.resource == resource
    assert not reached_the_end
    # The watcher's cancellation was taken back: none left on the task.
    assert left_cancelling in ([], [0]), left_cancelling


def test_the_caller_s_cancellation_is_not_turned_into_lease_lost(etcd: fencing.Issuer) -> None:
    """Cancelled by its caller, with the lease lost as well: the caller's
    CancelledError goes on, and the task has no cancellation left over."""
    resource = unique("res")

    async def main() -> None:
        async def block() -> None:
            async with etcd.lock(resource, ttl=3) as held:
                etcd.release(held.lease)
                await asyncio.sleep(30)

        task = asyncio.create_task(block())
        await asyncio.sleep(0.2)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(main())
    again = etcd.try_acquire(resource, ttl=10)
    assert again is not None
    etcd.release(again)


def test_an_exception_in_the_block_goes_on_and_the_lock_is_released(etcd: fencing.Issuer) -> None:
    resource = unique("res")

    async def main() -> None:
        async with etcd.lock(resource, ttl=10):
            raise KeyError("from the block")

    with pytest.raises(KeyError, match="from the block"):
        asyncio.run(main())
    again = etcd.try_acquire(resource, ttl=10)
    assert again is not None
    etcd.release(again)


def test_a_cancelled_wait_takes_nothing_and_leaves_the_lock_usable(etcd: fencing.Issuer) -> None:
    """`async with` cancelled while it waits: the taking is stopped on the
    runtime (it never gets the lease, never fences the key), the next
    holder gets in as soon as the first releases, and the same Lock can be
    entered again."""
    resource, store, key = unique("res"), fencing.open_store("sqlite::memory:"), unique("key")
    first = etcd.acquire(resource, ttl=30)
    lock = etcd.lock(resource, ttl=30, wait=10, fence=[(store, key)])

    async def main() -> tuple[fencing.Lease | None, int]:
        async def block() -> None:
            async with lock:
                pass

        waiting = asyncio.create_task(block())
        await asyncio.sleep(0.3)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        await asyncio.to_thread(etcd.release, first)
        await asyncio.sleep(0.5)  # a taking still running would get it now
        lease = await asyncio.to_thread(etcd.try_acquire, resource, ttl=10)
        assert lease is not None, "the cancelled lock took the lease"
        await asyncio.to_thread(etcd.release, lease)
        async with lock as held:
            return lease, held.token

    lease, again = asyncio.run(main())
    assert lease is not None and first.token < lease.token < again
    # Fenced once, by the second entry only.
    assert store.mark(key) == again



def test_a_lock_taken_after_its_caller_was_cancelled_is_given_back(etcd: fencing.Issuer) -> None:
    """The taking has answered (the lease is on its way to Python, renewed)
    when the `async with` is cancelled: the lease is released at once, not
    renewed for as long as the Lock lives."""
    import time

    import fencing.aio

    resource = unique("res")
    lock = etcd.lock(resource, ttl=30)

    async def main() -> None:
        calls = fencing.aio._calls()

        async def block() -> None:
            async with lock:
                await asyncio.sleep(30)

        task = asyncio.create_task(block())
        await asyncio.sleep(0)  # the taking starts
        deadline = time.monotonic() + 10
        while calls.native.running() and time.monotonic() < deadline:
            time.sleep(0.01)  # the loop must not read the answer yet
        assert calls.native.running() == 0
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        for _ in range(200):
            if await asyncio.to_thread(etcd.holder, resource) is None:
                break
            await asyncio.sleep(0.05)
        else:
            raise AssertionError("the orphaned lock's lease was not given back")
        async with lock as held:  # usable again
            assert not held.lost

    asyncio.run(main())
