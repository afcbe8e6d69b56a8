"""``fencing`` for asyncio: the same issuers and stores, with awaitable calls
that run on the Rust runtime::

    import fencing.aio

    issuer = await fencing.aio.open_issuer("etcd://127.0.0.1:2379")
    store = await fencing.aio.open_store("postgres://app:secret@db/app")
    lease = await issuer.acquire("nightly-report", ttl=30, wait=10)
    await store.put("reports/nightly", b"...", lease)
    await issuer.release(lease)

    async with issuer.lock("nightly-report", fence=[(store, "reports/nightly")]) as held:
        await store.put("reports/nightly", b"...", held.token)

No thread waits for a call: each one is a task on the Rust runtime, and its
answer wakes the event loop through a socket the loop watches (no Rust
thread ever calls into Python, so none can hang on the GIL at interpreter
exit). Thousands of calls can be in flight at once.

A cancelled call is dropped as a Rust future is: what it sent may still be
applied (a write may land). A cancelled taking (``acquire``,
``try_acquire``, ``async with``) first finishes a request in flight, for at
most two seconds, and gives back a lease it got; one still waiting for a
holder is dropped then. A lease whose answer arrives after its caller was
cancelled is given back at once.
"""

from __future__ import annotations

import asyncio
import weakref
from collections.abc import Callable, Sequence
from types import TracebackType
from typing import Any, TypeVar

from . import _native
from ._native import Held, Holding, Leader, Lease, Versioned

__all__ = ["open_issuer", "open_store", "Issuer", "Lock", "Election", "Store"]

T = TypeVar("T")


class _Calls:
    """One event loop's calls in flight, and the reader that resolves them."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = weakref.ref(loop)
        self.native = _native.Completions()
        # id -> (future, what to do with a result nobody awaits any more)
        self.pending: dict[int, tuple[asyncio.Future[Any], Callable[[Any], None] | None]] = {}
        loop.add_reader(self.native.fileno(), self.drain)

    def drain(self) -> None:
        interrupted: BaseException | None = None
        for call, ok, value in self.native.drain():
            entry = self.pending.pop(call, None)
            if entry is None:
                continue  # a call of ours that nobody awaits (an orphan's release)
            future, orphan = entry
            # One answer failing to resolve must not leave the others hanging.
            try:
                if future.done():
                    if ok and orphan is not None:
                        orphan(value)
                elif ok:
                    future.set_result(value)
                else:
                    future.set_exception(value)
            except Exception as failed:  # noqa: BLE001 - reported, the batch goes on
                loop = self.loop()
                if loop is not None:
                    loop.call_exception_handler(
                        {"message": "fencing.aio: resolving a call's answer failed", "exception": failed}
                    )
            except BaseException as signal:  # noqa: BLE001 - re-raised once the batch is done
                interrupted = interrupted or signal
        if interrupted is not None:
            raise interrupted


# Weak both ways: the loop's reader keeps its `_Calls` alive while the loop
# is open; once it is gone, the `_Calls`, its futures and its socket pair go
# too, and the Rust side drops answers nobody will read (releasing leases).
_loops: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, weakref.ref[_Calls]] = weakref.WeakKeyDictionary()


def _calls() -> _Calls:
    loop = asyncio.get_running_loop()
    known = _loops.get(loop)
    calls = known() if known is not None else None
    if calls is None:
        calls = _Calls(loop)
        _loops[loop] = weakref.ref(calls)
    return calls


async def _call(
    start: Callable[..., int],
    *args: Any,
    orphan: Callable[[Any], None] | None = None,
) -> Any:
    """Starts a native call and waits for its answer."""
    calls = _calls()
    future: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
    call = start(calls.native, *args)  # bad input raises here
    calls.pending[call] = (future, orphan)
    try:
        return await future
    except asyncio.CancelledError:
        calls.native.cancel(call)  # it still answers; the entry goes then
        # Answered just before the cancellation reached us: nobody gets it.
        if orphan is not None and future.done() and not future.cancelled() and future.exception() is None:
            orphan(future.result())
        raise


def _give_back(issuer: _native.Issuer) -> Callable[[Any], None]:
    """An orphan lease is released (its answer ignored)."""

    def give_back(lease: Any) -> None:
        if isinstance(lease, Lease):
            _native._calls_of(issuer).start_release(_calls().native, lease)

    return give_back


async def open_issuer(url: str) -> Issuer:
    """Opens the lock service ``url`` names, as ``fencing.open_issuer``."""
    return Issuer(await _call(_native._start_open_issuer, url))


async def open_store(url: str) -> Store:
    """Opens the fenced store ``url`` names, as ``fencing.open_store``."""
    return Store(await _call(_native._start_open_store, url))


class Issuer:
    """A lock service, awaitable: ``fencing.Issuer``'s calls as coroutines."""

    def __init__(self, issuer: _native.Issuer) -> None:
        self._calls = _native._calls_of(issuer)
        self.sync = issuer
        """The same issuer with blocking calls."""

    @property
    def name(self) -> str:
        return self.sync.name

    @property
    def min_ttl(self) -> float:
        return self.sync.min_ttl

    def lock(
        self,
        resource: str,
        *,
        ttl: float = 30.0,
        wait: float | None = None,
        fence: Sequence[tuple[Store | _native.Store, str]] = (),
    ) -> Lock:
        """A lock for ``async with`` or ``await lock.acquire()``, as
        ``fencing.Issuer.lock``."""
        stores = [(store.sync if isinstance(store, Store) else store, key) for store, key in fence]
        return Lock(self.sync.lock(resource, ttl=ttl, wait=wait, fence=stores))

    def election(
        self,
        resource: str,
        *,
        candidate: str,
        ttl: float = 30.0,
        fence: Sequence[tuple[Store | _native.Store, str]] = (),
    ) -> Election:
        """An election, as ``fencing.Issuer.election``: ``async with
        election.campaign() as term:`` runs the block as leader."""
        stores = [(store.sync if isinstance(store, Store) else store, key) for store, key in fence]
        return Election(self.sync.election(resource, candidate=candidate, ttl=ttl, fence=stores))

    async def acquire(self, resource: str, *, ttl: float = 30.0, wait: float = 0.0) -> Lease:
        lease: Lease = await _call(self._calls.start_acquire, resource, ttl, wait, orphan=_give_back(self.sync))
        return lease

    async def try_acquire(self, resource: str, *, ttl: float = 30.0) -> Lease | None:
        lease: Lease | None = await _call(self._calls.start_try_acquire, resource, ttl, orphan=_give_back(self.sync))
        return lease

    async def renew(self, lease: Lease) -> Lease:
        renewed: Lease = await _call(self._calls.start_renew, lease)
        return renewed

    async def release(self, lease: Lease) -> None:
        await _call(self._calls.start_release, lease)

    async def holder(self, resource: str) -> Holding | None:
        holding: Holding | None = await _call(self._calls.start_holder, resource)
        return holding

    async def raise_floor(self, resource: str, floor: int | Lease) -> None:
        await _call(self._calls.start_raise_floor, resource, floor)

    async def remove_idle(self, resource: str, idle: float) -> str:
        """``fencing.Issuer.remove_idle``, awaitable."""
        removal: str = await _call(self._calls.start_remove_idle, resource, idle)
        return removal

    def __repr__(self) -> str:
        return f"aio.{self.sync!r}"


class Lock:
    """A lock, awaitable: ``fencing.Lock``'s calls as coroutines (redis-py's
    ``redis.asyncio`` lock calls), and ``async with``::

        lock = issuer.lock("nightly-report", ttl=30)
        if await lock.acquire(timeout=10):
            try:
                await store.put("reports/nightly", b"...", lock.token)
            finally:
                await lock.release()

    Held, the lease is renewed in the background, as in ``async with``;
    unlike there, nothing cancels your task when it is lost: ``lock.token``
    (and a write presenting ``lock.held.lease``) raises ``LeaseLost`` from
    then on, and ``release()`` raises it.
    """

    def __init__(self, lock: _native.Lock) -> None:
        self._calls = _native._calls_of(lock)
        self.sync = lock
        """The same lock with blocking calls."""

    async def acquire(
        self, blocking: bool = True, timeout: float | None = None, *, blocking_timeout: float | None = None
    ) -> bool:
        """``fencing.Lock.acquire``, awaitable: True once held, False if the
        wait ran out. A cancelled acquire takes nothing (a lease it got is
        given back) and leaves the lock free to acquire again."""
        held: Held | None = await _call(
            self._calls.start_acquire,
            blocking,
            timeout,
            blocking_timeout,
            # Taken just before the cancellation reached us: that lease,
            # and only that one, given back. (Cancelled earlier, the lock
            # is free again at once: the runtime settles it.)
            orphan=lambda taken: self._calls.give_back(taken) if taken is not None else None,
        )
        return held is not None

    async def release(self) -> None:
        """``fencing.Lock.release``, awaitable: ``LeaseLost`` if the lease
        was lost while held. Runs to its end even if its caller is
        cancelled (a release cut off would leave the resource held)."""
        await _call(self._calls.start_release)

    async def locked(self) -> bool:
        """Whether anyone holds the resource, this lock or another."""
        held: bool = await _call(self._calls.start_locked)
        return held

    def owned(self) -> bool:
        """Whether this lock holds the lease and it is not lost."""
        return self.sync.owned()

    @property
    def held(self) -> Held | None:
        """What this lock holds now, or None."""
        return self.sync.held

    @property
    def token(self) -> int:
        """The held lease's token (``LeaseLost`` once it is lost)."""
        return self.sync.token

    async def __aenter__(self) -> Held:
        held: Held = await self.sync.__aenter__()
        return held

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        left: bool = await self.sync.__aexit__(exc_type, exc, traceback)
        return left

    def __enter__(self) -> Held:
        return self.sync.__enter__()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool:
        return self.sync.__exit__(exc_type, exc, traceback)

    def __repr__(self) -> str:
        return f"aio.{self.sync!r}"


class Election:
    """An election, awaitable: ``fencing.Election``'s calls as coroutines.

    ``async with election.campaign() as term:`` waits until this candidate
    leads and runs the block as leader; the block's task is cancelled when
    the term is lost (leaving the block then raises ``LeaseLost``), and
    its end resigns."""

    def __init__(self, election: _native.Election) -> None:
        self._calls = _native._calls_of(election)
        self.sync = election
        """The same election with blocking calls."""

    @property
    def resource(self) -> str:
        return self.sync.resource

    @property
    def candidate(self) -> str:
        return self.sync.candidate

    def campaign(self, *, wait: float | None = None) -> Lock:
        """The campaign, as a lock (``async with``, or ``await
        acquire()`` / ``await release()``)."""
        return Lock(self.sync.campaign(wait=wait))

    async def leader(self) -> Leader | None:
        """Who leads now, if anyone."""
        leader: Leader | None = await _call(self._calls.start_leader)
        return leader

    def __repr__(self) -> str:
        return f"aio.{self.sync!r}"


class Store:
    """A fenced store, awaitable: ``fencing.Store``'s calls as coroutines."""

    def __init__(self, store: _native.Store) -> None:
        self._calls = _native._calls_of(store)
        self.sync = store
        """The same store with blocking calls."""

    @property
    def name(self) -> str:
        return self.sync.name

    async def put(self, key: str, value: bytes, token: int | Lease) -> None:
        await _call(self._calls.start_put, key, value, token)

    async def get(self, key: str) -> Versioned | None:
        found: Versioned | None = await _call(self._calls.start_get, key)
        return found

    async def fence(self, key: str, token: int | Lease) -> int:
        mark: int = await _call(self._calls.start_fence, key, token)
        return mark

    async def mark(self, key: str) -> int | None:
        mark: int | None = await _call(self._calls.start_mark, key)
        return mark

    async def delete(self, key: str, token: int | Lease) -> None:
        await _call(self._calls.start_delete, key, token)

    async def floor(self) -> int | None:
        """``fencing.Store.floor``, awaitable."""
        floor: int | None = await _call(self._calls.start_floor)
        return floor

    async def raise_floor(self, floor: int | Lease) -> int:
        """``fencing.Store.raise_floor``, awaitable."""
        raised: int = await _call(self._calls.start_raise_floor, floor)
        return raised

    async def remove_floored_marks(self, most: int = 1000) -> int:
        """``fencing.Store.remove_floored_marks``, awaitable."""
        removed: int = await _call(self._calls.start_remove_floored_marks, most)
        return removed

    def __repr__(self) -> str:
        return f"aio.{self.sync!r}"
