"""``Lock.acquire()`` / ``release()`` / ``locked()``: the calls of redis-py's,
kazoo's and ``threading``'s locks, with the keep-alive and the fencing of
``with``, on every issuer; and the same awaitable in ``fencing.aio``."""

from __future__ import annotations

import asyncio
import time

import pytest

import fencing
import fencing.aio
from conftest import unique


def test_acquire_release_and_locked_as_redis_py_has_them(issuer: fencing.Issuer) -> None:
    resource = unique("calls")
    ttl = max(3.0, issuer.min_ttl)
    lock, other = issuer.lock(resource, ttl=ttl), issuer.lock(resource, ttl=ttl)
    assert not lock.locked() and not lock.owned() and lock.held is None

    assert lock.acquire() is True
    assert lock.owned() and lock.locked()
    token = lock.token
    assert lock.held is not None and lock.held.token == token
    # Another holder: sees it locked, does not own it, and cannot take it.
    assert other.locked() and not other.owned()
    assert other.acquire(blocking=False) is False
    started = time.monotonic()
    assert other.acquire(timeout=0.3) is False
    assert time.monotonic() - started >= 0.3
    assert other.acquire(blocking_timeout=0.2) is False
    assert not other.owned()
    with pytest.raises(fencing.InvalidInput, match="not held"):
        other.release()
    with pytest.raises(fencing.InvalidInput, match="not held"):
        other.token  # noqa: B018 - the getter raises

    lock.release()
    assert not lock.owned() and not lock.locked() and lock.held is None
    with pytest.raises(fencing.InvalidInput, match="not held"):
        lock.release()
    assert other.acquire(timeout=10) is True
    assert other.token > token
    other.release()
    # Acquired again by the lock that released it: a new, higher token.
    assert lock.acquire(blocking=False) is True
    assert lock.token > token
    lock.release()


def test_acquire_s_arguments_are_checked_before_anything_is_sent(etcd: fencing.Issuer) -> None:
    lock = etcd.lock(unique("args"), ttl=5)
    with pytest.raises(ValueError, match="non-blocking"):
        lock.acquire(blocking=False, timeout=1)
    with pytest.raises(ValueError, match="not both"):
        lock.acquire(timeout=1, blocking_timeout=1)
    # As redis-py: a blocking_timeout is ignored when not blocking.
    assert lock.acquire(blocking=False, blocking_timeout=1) is True
    lock.release()
    with pytest.raises(fencing.InvalidInput, match="timeout"):
        lock.acquire(timeout=-2)
    assert not lock.locked()


def test_an_acquired_lock_fences_renews_and_a_lost_lease_makes_release_raise(
    etcd: fencing.Issuer, postgres: fencing.Store
) -> None:
    resource, key = unique("fenced"), unique("key")
    lock = etcd.lock(resource, ttl=3, fence=[(postgres, key)])
    assert lock.acquire(timeout=10)
    # Fenced before acquire returned, as a `with` block's keys are.
    assert postgres.mark(key) == lock.token
    # Renewed in the background: held past two TTLs.
    time.sleep(6.5)
    assert lock.owned()
    postgres.put(key, b"mine", lock.token)
    # Released behind the keep-alive's back: lost at its next renewal.
    etcd.release(lock.held.lease)  # type: ignore[union-attr]
    deadline = time.monotonic() + 10
    while lock.owned() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not lock.owned()
    with pytest.raises(fencing.LeaseLost):
        lock.token  # noqa: B018 - the getter raises
    with pytest.raises(fencing.LeaseLost) as lost:
        lock.release()
    assert lost.value.resource == resource
    # The lock is free for the next acquire, whose token is higher.
    assert lock.acquire(timeout=10)
    postgres.put(key, b"next", lock.token)
    lock.release()


def test_the_aio_lock_awaits_the_same_calls_and_a_cancelled_acquire_takes_nothing(
    etcd: fencing.Issuer,
) -> None:
    resource = unique("aio-calls")

    async def main() -> None:
        issuer = fencing.aio.Issuer(etcd)
        lock, other = issuer.lock(resource, ttl=5), issuer.lock(resource, ttl=5)
        assert await lock.acquire() is True
        token = lock.token
        assert await other.locked() and lock.owned() and not other.owned()
        assert await other.acquire(timeout=0.2) is False
        # Waiting as long as it takes, then cancelled: nothing taken, and
        # the lock free to acquire again at once.
        waiting = asyncio.ensure_future(other.acquire())
        await asyncio.sleep(0.3)
        waiting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiting
        assert not other.owned()
        await lock.release()
        # A cancelled taking still finishes what is in flight, for two
        # seconds at most, and gives back a lease it gets meanwhile.
        deadline = time.monotonic() + 5
        while await lock.locked() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert not await lock.locked()
        assert await other.acquire(timeout=10) is True
        assert other.token > token
        await other.release()
        with pytest.raises(fencing.InvalidInput, match="not held"):
            await other.release()
        async with lock as held:
            assert held.token > token and lock.owned()
        assert not lock.owned()

    asyncio.run(asyncio.wait_for(main(), 30))


def test_the_public_classes_show_only_their_calls() -> None:
    """fencing.aio's way in (the calls it starts on the runtime) is kept in
    `_native._calls_of`, off the classes users hold."""
    for cls in (fencing.Issuer, fencing.Store, fencing.Lock, fencing.Held, fencing.Election, fencing.Lease):
        private = [name for name in dir(cls) if name.startswith("_") and not name.startswith("__")]
        assert private == [], (cls.__name__, private)


def test_an_acquire_cancelled_at_any_moment_never_undoes_the_next_one(etcd: fencing.Issuer) -> None:
    """A task that cancels an acquire and acquires again at once (a
    timeout around it, a retry loop): whenever the first one's answer comes
    (before, with or after its cancellation), the second acquire, once it
    returns True, holds the lock, and the first one's lease, if any, is
    given back."""
    import random

    resource = unique("cancel-race")

    async def main() -> None:
        lock = fencing.aio.Issuer(etcd).lock(resource, ttl=5)
        last = 0
        for _ in range(40):
            first = asyncio.ensure_future(lock.acquire(timeout=5))
            await asyncio.sleep(random.uniform(0, 0.006))
            first.cancel()
            try:
                got = await first
            except asyncio.CancelledError:
                got = False
            if not got:
                assert await lock.acquire(timeout=10), "the retry did not get the lock"
            assert lock.owned(), "acquire returned True but the lock holds nothing"
            assert lock.token > last
            last = lock.token
            await lock.release()
        # Every lease of a cancelled attempt was given back.
        deadline = time.monotonic() + 5
        while await lock.locked() and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert not await lock.locked()

    asyncio.run(asyncio.wait_for(main(), 120))
