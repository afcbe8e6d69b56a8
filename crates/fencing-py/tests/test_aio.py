"""fencing.aio: awaitable calls on the Rust runtime, on every issuer and
store; no thread per call; cancellation that leaves nothing behind; exit
with calls in flight."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
import threading
import time

import pytest

import fencing
import fencing.aio
from conftest import ISSUERS, STORES, unique


def test_every_store_awaitable(store: fencing.Store) -> None:
    key = unique("key")

    async def main() -> None:
        aio = fencing.aio.Store(store)
        assert aio.name == store.name
        assert await aio.mark(key) is None
        await aio.put(key, b"one", 5)
        found = await aio.get(key)
        assert found is not None and (found.value, found.token) == (b"one", 5)
        with pytest.raises(fencing.StaleToken) as refused:
            await aio.put(key, b"late", 4)
        assert (refused.value.presented, refused.value.current) == (4, 5)
        assert await aio.fence(key, 7) == 7
        await aio.delete(key, 7)
        assert await aio.get(key) is None
        assert await aio.mark(key) == 7

    asyncio.run(main())


def test_every_issuer_awaitable(issuer: fencing.Issuer) -> None:
    resource = unique("res")

    async def main() -> None:
        aio = fencing.aio.Issuer(issuer)
        lease = await aio.acquire(resource, ttl=10)
        assert await aio.try_acquire(resource, ttl=10) is None
        holding = await aio.holder(resource)
        assert holding is not None and holding.holder == lease.holder
        renewed = await aio.renew(lease)
        assert renewed.token == lease.token
        await aio.release(renewed)
        again = await aio.try_acquire(resource, ttl=10)
        assert again is not None and again.token > lease.token
        await aio.release(again)

    asyncio.run(main())


def test_open_by_url_and_typed_errors_through_await() -> None:
    async def main() -> None:
        issuer = await fencing.aio.open_issuer(ISSUERS["etcd"](""))
        store = await fencing.aio.open_store(STORES["postgres"](""))
        assert (issuer.name, store.name) == ("etcd", "postgres")
        with pytest.raises(fencing.InvalidInput):
            await fencing.aio.open_store("nosuch://x")
        with pytest.raises(fencing.FencingError):
            await fencing.aio.open_store("postgres://fencing:wrong@127.0.0.1:1/fencing")
        # Bad input is refused before anything starts.
        with pytest.raises(fencing.InvalidInput):
            await store.put("", b"x", 1)
        with pytest.raises(fencing.InvalidInput):
            await issuer.acquire("r", ttl=-1)

    asyncio.run(main())


def test_a_thousand_calls_in_flight_take_no_thread() -> None:
    store_url = STORES["postgres"]("")
    key = unique("key")

    async def main() -> tuple[list[int | None], int, int]:
        store = await fencing.aio.open_store(store_url)
        await store.fence(key, 3)
        threads_before = threading.active_count()
        peak = threads_before

        async def watch() -> None:
            nonlocal peak
            while True:
                peak = max(peak, threading.active_count())
                await asyncio.sleep(0.001)

        watcher = asyncio.create_task(watch())
        marks = await asyncio.gather(*(store.mark(key) for _ in range(1000)))
        watcher.cancel()
        return marks, threads_before, peak

    marks, before, peak = asyncio.run(main())
    assert marks == [3] * 1000
    assert peak == before, (before, peak)


def test_the_loop_runs_while_a_call_waits(etcd: fencing.Issuer) -> None:
    resource = unique("res")
    first = etcd.acquire(resource, ttl=10)

    async def main() -> tuple[int, int]:
        aio = fencing.aio.Issuer(etcd)
        ticks = 0

        async def tick() -> None:
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.01)

        ticker = asyncio.create_task(tick())
        asyncio.get_running_loop().call_later(0.5, etcd.release, first)
        lease = await aio.acquire(resource, ttl=10, wait=10)
        ticker.cancel()
        await aio.release(lease)
        return ticks, lease.token

    ticks, token = asyncio.run(main())
    assert token > first.token
    assert ticks > 20, ticks


def test_cancelled_calls_leave_nothing_behind(etcd: fencing.Issuer) -> None:
    """A hundred acquires waiting on a held resource, cancelled: every one
    answers (no entry left in the loop's table, no task on the runtime),
    and none of them holds the resource afterwards."""
    resource = unique("res")
    held = etcd.acquire(resource, ttl=30)

    async def main() -> tuple[int, int]:
        aio = fencing.aio.Issuer(etcd)
        waiters = [asyncio.create_task(aio.acquire(resource, ttl=30, wait=20)) for _ in range(100)]
        await asyncio.sleep(0.5)
        for waiter in waiters:
            waiter.cancel()
        results = await asyncio.gather(*waiters, return_exceptions=True)
        assert all(isinstance(r, asyncio.CancelledError) for r in results), results
        calls = fencing.aio._calls()
        deadline = time.monotonic() + 10
        while (calls.pending or calls.native.running()) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        return len(calls.pending), calls.native.running()

    assert asyncio.run(main()) == (0, 0)
    etcd.release(held)
    # Nobody else holds it: the cancelled waiters took nothing.
    assert etcd.try_acquire(resource, ttl=5) is not None


def test_a_lease_answered_after_its_caller_was_cancelled_is_given_back(etcd: fencing.Issuer) -> None:
    """The answer is queued but not yet read when the caller is cancelled:
    the lease is released at once instead of being held for its TTL."""
    resource = unique("res")

    async def main() -> None:
        aio = fencing.aio.Issuer(etcd)
        calls = fencing.aio._calls()
        task = asyncio.create_task(aio.acquire(resource, ttl=30))
        await asyncio.sleep(0)  # started
        # Wait for the answer to be queued without letting the loop read it.
        deadline = time.monotonic() + 10
        while calls.native.running() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert calls.native.running() == 0
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # The orphan's release runs on the loop.
        for _ in range(200):
            if await aio.holder(resource) is None:
                return
            await asyncio.sleep(0.05)
        raise AssertionError("the orphaned lease was not given back")

    asyncio.run(main())


def test_the_interpreter_exits_cleanly_with_calls_in_flight() -> None:
    url, resource = ISSUERS["etcd"](""), unique("res")
    holder = fencing.open_issuer(url)
    held = holder.acquire(resource, ttl=30)
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import asyncio, os, fencing.aio

                async def main():
                    issuer = await fencing.aio.open_issuer({url!r})
                    for _ in range(10):
                        asyncio.create_task(issuer.acquire({resource!r}, ttl=10, wait=60))
                    await asyncio.sleep(0.5)
                    print("in flight", flush=True)

                asyncio.run(main())
                """
            ),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    started = time.monotonic()
    out, err = child.communicate(timeout=30)
    assert child.returncode == 0 and out == "in flight\n", (out, err)
    assert err == "", err
    assert time.monotonic() - started < 8
    holder.release(held)


def test_an_async_lock_fences_an_aio_store(etcd: fencing.Issuer) -> None:
    resource, key = unique("res"), unique("key")
    url = STORES["postgres"]("")

    async def main() -> tuple[int, int | None]:
        issuer = fencing.aio.Issuer(etcd)
        store = await fencing.aio.open_store(url)
        async with issuer.lock(resource, ttl=10, fence=[(store, key)]) as held:
            assert await store.mark(key) == held.token
            await store.put(key, b"x", held.token)
            return held.token, await store.mark(key)

    token, mark = asyncio.run(main())
    assert mark == token


def _open_fds() -> int:
    import os

    return len(os.listdir("/proc/self/fd"))


def test_a_loop_that_ends_with_calls_unanswered_leaves_nothing_behind(etcd: fencing.Issuer) -> None:
    """`asyncio.run` per job, each ending with a call timed out whose answer
    comes after the loop closed: loops, socket pairs and answers do not pile
    up in a long-lived process."""
    import gc

    resource = unique("res")
    held = etcd.acquire(resource, ttl=30)

    async def job() -> None:
        aio = fencing.aio.Issuer(etcd)
        with pytest.raises(TimeoutError):
            await asyncio.wait_for(aio.acquire(resource, ttl=5, wait=10), timeout=0.05)

    asyncio.run(job())  # the first loop's own allocations
    gc.collect()
    before = _open_fds()
    for _ in range(30):
        asyncio.run(job())
    time.sleep(2.5)  # the cancelled takings' grace
    gc.collect()
    assert len(fencing.aio._loops) <= 1, len(fencing.aio._loops)
    assert _open_fds() <= before + 2, (before, _open_fds())
    etcd.release(held)


@pytest.mark.parametrize("backend", ["etcd", "postgres"])
def test_cancelled_takings_give_back_what_they_get(backend: str, tmp_path: str) -> None:
    """Acquires and locks cancelled at every moment of their round trips:
    none leaves the resource held (a cancelled taking finishes the request
    in flight and gives back a lease it got, instead of leaving it to its
    TTL of 30 s; on PostgreSQL a grant is one statement, which a dropped
    future would leave applied)."""
    etcd = fencing.open_issuer(ISSUERS[backend](str(tmp_path)))
    resource = unique("res")

    async def main() -> None:
        aio = fencing.aio.Issuer(etcd)
        lock = etcd.lock(resource, ttl=30, wait=5)
        for i in range(60):
            timeout = (i % 15) * 0.0005

            async def take() -> None:
                if i % 2:
                    async with lock:
                        pass
                else:
                    lease = await aio.acquire(resource, ttl=30)
                    await aio.release(lease)

            try:
                await asyncio.wait_for(take(), timeout=timeout)
            except TimeoutError:
                pass
        await asyncio.sleep(2.5)  # the grace of the last ones
        assert await aio.holder(resource) is None
        # The Lock is usable at once after each cancellation.
        async with lock as held:
            assert not held.lost

    asyncio.run(main())


def test_a_lock_entered_again_at_once_after_a_cancelled_taking(etcd: fencing.Issuer) -> None:
    resource = unique("res")
    holder = etcd.acquire(resource, ttl=30)
    lock = etcd.lock(resource, ttl=30, wait=10)

    async def main() -> int:
        refused = 0
        for _ in range(20):
            try:
                await asyncio.wait_for(lock.__aenter__(), timeout=0.01)
            except TimeoutError:
                pass
            except fencing.InvalidInput:
                refused += 1
        return refused

    assert asyncio.run(main()) == 0
    etcd.release(holder)


def test_a_block_left_when_its_loop_is_closed_releases_its_lease(etcd: fencing.Issuer) -> None:
    """A task inside `async with` whose loop is closed without cancelling it
    (run_until_complete, then close): once the task is collected, its
    block's lease is released, not renewed for ever."""
    import gc

    resource = unique("res")
    lock = etcd.lock(resource, ttl=2)
    loop = asyncio.new_event_loop()

    async def block() -> None:
        async with lock:
            await asyncio.sleep(3600)

    async def start() -> None:
        loop.create_task(block())
        await asyncio.sleep(0.5)  # entered

    loop.run_until_complete(start())
    assert etcd.holder(resource) is not None
    loop.close()
    del loop
    gc.collect()
    for _ in range(50):
        if etcd.holder(resource) is None:
            break
        time.sleep(0.1)
    else:
        raise AssertionError("the abandoned block's lease is still held")
    with lock:  # the module-level Lock is usable again
        pass
