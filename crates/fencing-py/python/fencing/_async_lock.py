"""``async with issuer.lock(...)``: what ``Lock.__aenter__`` and
``Lock.__aexit__`` run.

The lock is taken and given back on the Rust runtime, as every call of
``fencing.aio`` is (no thread waits, and no Rust thread ever calls into
Python). A cancelled taking leaves the Lock free to enter again at once; on
the runtime it finishes a request in flight (two seconds at most) and gives
back a lease it got. A lease taken but not yet seen by Python when its
caller was cancelled is released, and so is one whose event loop is gone
(when its answer is dropped) or whose block's coroutine is closed with no
loop running. While the block runs, a watcher looks at the lease every ``WATCH_EVERY`` seconds and cancels the block's
task once it is lost: the work stops at its next ``await``, and leaving the
block raises ``LeaseLost`` instead of the ``CancelledError``. A caller's own
cancellation is never turned into ``LeaseLost``.
"""

from __future__ import annotations

import asyncio
import warnings
import weakref
from types import TracebackType
from typing import TYPE_CHECKING

from . import _native
from .aio import _call

from .errors import LeaseLost

if TYPE_CHECKING:
    from ._native import Held, Lock

#: How often a block's watcher looks whether its lease was lost, in seconds.
WATCH_EVERY = 0.05


class _Block:
    """One `async with` block: its lease, its watcher, and whether the
    watcher cancelled it."""

    def __init__(self, held: Held) -> None:
        self.held = held
        self.watcher: asyncio.Task[None] | None = None
        self.cancelled_it = False


# One `async with` per Lock at a time (the Lock refuses a second): the Lock
# keys its block until the block ends. Weakly: a block whose task and loop
# are gone must not keep anything alive (its coroutine's close leaves it).
_blocks: weakref.WeakKeyDictionary[Lock, _Block] = weakref.WeakKeyDictionary()


def _cancelling(task: asyncio.Task[object]) -> int:
    cancelling = getattr(task, "cancelling", None)  # Python 3.11+
    return int(cancelling()) if cancelling is not None else 0


async def _watch(block: _Block, task_ref: weakref.ref[asyncio.Task[object]]) -> None:
    try:
        while not block.held.lost:
            await asyncio.sleep(WATCH_EVERY)
    except asyncio.CancelledError:
        raise
    except Exception:  # noqa: BLE001 - a lease that cannot be looked at is as good as lost
        pass
    task = task_ref()
    # The caller cancelling the block already: its cancellation goes on.
    if task is not None and _cancelling(task) == 0:
        block.cancelled_it = task.cancel()


async def _release_quietly(lock: Lock) -> None:
    try:
        await _call(_native._calls_of(lock).start_exit, True)  # its warning, if any, unsaid
    except Exception:  # noqa: BLE001 - lost meanwhile: nothing left to give back
        pass


async def _exit(lock: Lock, block_raised: bool) -> bool:
    warning: str | None = await _call(_native._calls_of(lock).start_exit, block_raised)
    if warning is not None:
        # Shown at the `async with` (this, `exit`, then the block's frame).
        warnings.warn(warning, RuntimeWarning, stacklevel=3)
    return False


async def enter(lock: Lock) -> Held:
    calls = _native._calls_of(lock)
    held: Held = await _call(
        calls.start_enter,
        # Taken just before the cancellation reached us: that lease, and
        # only that one, given back.
        orphan=calls.give_back,
    )
    block = _Block(held)
    task = asyncio.current_task()
    if task is not None:
        block.watcher = asyncio.get_running_loop().create_task(_watch(block, weakref.ref(task)))
    _blocks[lock] = block
    return held


async def exit(
    lock: Lock,
    exc_type: type[BaseException] | None,
    exc: BaseException | None,
    traceback: TracebackType | None,
) -> bool:
    block = _blocks.pop(lock, None)
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        # The block's coroutine closed by the garbage collector after its
        # loop was gone: nothing to wait on. The lease goes in the background.
        _native._calls_of(lock).abandon()
        return False
    if block is None or not block.cancelled_it:
        if block is not None and block.watcher is not None:
            block.watcher.cancel()
        return await _exit(lock, exc_type is not None)
    # The watcher cancelled the block: take its cancellation back.
    task = asyncio.current_task()
    uncancel = getattr(task, "uncancel", None)  # Python 3.11+
    if uncancel is not None and uncancel() > 0:
        # The caller cancelled too: its CancelledError goes on.
        return await _exit(lock, exc_type is not None)
    if not isinstance(exc, asyncio.CancelledError):
        # The block turned the cancellation into something else, or
        # swallowed it: that goes on (a finished block whose lease was lost
        # gets LeaseLost from __exit__).
        return await _exit(lock, exc_type is not None)
    lease = block.held.lease
    await _release_quietly(lock)
    raise LeaseLost(
        f"lease on {lease.resource!r} with token {lease.token} is no longer held; "
        "the block was cancelled",
        resource=lease.resource,
        token=lease.token,
    )
