"""``async with issuer.lock(...)``: what ``Lock.__aenter__`` and
``Lock.__aexit__`` run.

The lock is taken and given back by its sync methods in a worker thread
(``asyncio.to_thread``); they release the GIL while they wait, so the event
loop runs on, and no Rust thread ever calls into Python (the shutdown trap
of Rust runtimes driving asyncio futures). While the block runs, a watcher
looks at the lease every ``WATCH_EVERY`` seconds and cancels the block's
task once it is lost: the work stops at its next ``await``, and leaving the
block raises ``LeaseLost`` instead of the ``CancelledError``.
"""

from __future__ import annotations

import asyncio
from types import TracebackType
from typing import TYPE_CHECKING

from .errors import LeaseLost

if TYPE_CHECKING:
    from ._native import Held, Lock

#: How often a block's watcher looks whether its lease was lost, in seconds.
WATCH_EVERY = 0.05

# One `async with` per Lock at a time (the Lock refuses a second), so the
# Lock's id keys its block's watcher until the block ends.
_blocks: dict[int, tuple[Held, asyncio.Task[None], asyncio.Event]] = {}


async def _watch(held: Held, block: asyncio.Task[object], lost: asyncio.Event) -> None:
    while not held.lost:
        await asyncio.sleep(WATCH_EVERY)
    lost.set()
    block.cancel()


def _give_back(lock: Lock, entering: asyncio.Future[Held]) -> None:
    """After a cancelled `enter`: the thread went on waiting, and what it
    took (if anything) has no block to give it back; release it now."""
    if entering.cancelled() or entering.exception() is not None:
        return
    released = asyncio.get_running_loop().run_in_executor(None, lock.__exit__, None, None, None)
    # Nobody awaits it: a lease lost meanwhile is no news to anyone.
    released.add_done_callback(lambda done: done.cancelled() or done.exception())


async def enter(lock: Lock) -> Held:
    # The thread cannot be stopped; cancelling this only stops the wait for
    # it, so what it takes afterwards is given back.
    entering = asyncio.ensure_future(asyncio.to_thread(lock.__enter__))
    try:
        held = await asyncio.shield(entering)
    except asyncio.CancelledError:
        entering.add_done_callback(lambda done: _give_back(lock, done))
        raise
    block = asyncio.current_task()
    if block is not None:
        lost = asyncio.Event()
        watcher = asyncio.get_running_loop().create_task(_watch(held, block, lost))
        _blocks[id(lock)] = (held, watcher, lost)
    return held


async def exit(
    lock: Lock,
    exc_type: type[BaseException] | None,
    exc: BaseException | None,
    traceback: TracebackType | None,
) -> bool:
    watched = _blocks.pop(id(lock), None)
    if watched is None:
        return await asyncio.to_thread(lock.__exit__, exc_type, exc, traceback)
    held, watcher, lost = watched
    watcher.cancel()
    if not (lost.is_set() and isinstance(exc, asyncio.CancelledError)):
        return await asyncio.to_thread(lock.__exit__, exc_type, exc, traceback)
    # Cancelled by the watcher, not by the caller: the loss is the news.
    task = asyncio.current_task()
    uncancel = getattr(task, "uncancel", None)  # Python 3.11+
    if uncancel is not None:
        uncancel()
    lease = held.lease
    # Leaving a block whose lease was lost raises LeaseLost (and releases
    # whatever is left to release).
    await asyncio.to_thread(lock.__exit__, None, None, None)
    raise LeaseLost(
        f"lease on {lease.resource!r} with token {lease.token} is no longer held; "
        "the block was cancelled",
        resource=lease.resource,
        token=lease.token,
    )
