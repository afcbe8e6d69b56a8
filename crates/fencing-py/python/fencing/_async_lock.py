"""``async with issuer.lock(...)``: what ``Lock.__aenter__`` and
``Lock.__aexit__`` run.

The lock is taken and given back by its sync methods in a worker thread
(``asyncio.to_thread``); they release the GIL while they wait, so the event
loop runs on, and no Rust thread ever calls into Python (the shutdown trap
of Rust runtimes driving asyncio futures). While the block runs, a watcher
looks at the lease every ``WATCH_EVERY`` seconds and cancels the block's
task once it is lost: the work stops at its next ``await``, and leaving the
block raises ``LeaseLost`` instead of the ``CancelledError``. A caller's own
cancellation is never turned into ``LeaseLost``.
"""

from __future__ import annotations

import asyncio
import threading
from types import TracebackType
from typing import TYPE_CHECKING

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
# keys its block until the block ends.
_blocks: dict[Lock, _Block] = {}


def _cancelling(task: asyncio.Task[object]) -> int:
    cancelling = getattr(task, "cancelling", None)  # Python 3.11+
    return int(cancelling()) if cancelling is not None else 0


async def _watch(block: _Block, task: asyncio.Task[object]) -> None:
    try:
        while not block.held.lost:
            await asyncio.sleep(WATCH_EVERY)
    except asyncio.CancelledError:
        raise
    except Exception:  # noqa: BLE001 - a lease that cannot be looked at is as good as lost
        pass
    # The caller cancelling the block already: its cancellation goes on.
    if _cancelling(task) == 0:
        block.cancelled_it = task.cancel()


def _release_quietly(lock: Lock) -> None:
    try:
        lock.__exit__(None, None, None)
    except Exception:  # noqa: BLE001 - lost meanwhile: nothing left to give back
        pass


async def enter(lock: Lock) -> Held:
    # The worker thread cannot be stopped. Cancelling this stops only the
    # wait for it; what the thread takes afterwards it gives back itself,
    # which works even once the event loop has shut down.
    guard = threading.Lock()
    state = {"abandoned": False, "returned": False}

    def take() -> Held | None:
        held = lock.__enter__()
        with guard:
            if not state["abandoned"]:
                state["returned"] = True
                return held
        _release_quietly(lock)
        return None

    entering = asyncio.ensure_future(asyncio.to_thread(take))
    try:
        taken = await asyncio.shield(entering)
    except asyncio.CancelledError:
        with guard:
            state["abandoned"] = True
            returned = state["returned"]
        if returned:  # the thread got in just before: give it back here
            threading.Thread(target=_release_quietly, args=(lock,), daemon=True).start()
        raise
    assert taken is not None  # `abandoned` is only set on the way out above
    block = _Block(taken)
    task = asyncio.current_task()
    if task is not None:
        block.watcher = asyncio.get_running_loop().create_task(_watch(block, task))
    _blocks[lock] = block
    return taken


async def exit(
    lock: Lock,
    exc_type: type[BaseException] | None,
    exc: BaseException | None,
    traceback: TracebackType | None,
) -> bool:
    block = _blocks.pop(lock, None)
    if block is None or not block.cancelled_it:
        if block is not None and block.watcher is not None:
            block.watcher.cancel()
        return await asyncio.to_thread(lock.__exit__, exc_type, exc, traceback)
    # The watcher cancelled the block: take its cancellation back.
    task = asyncio.current_task()
    uncancel = getattr(task, "uncancel", None)  # Python 3.11+
    if uncancel is not None and uncancel() > 0:
        # The caller cancelled too: its CancelledError goes on.
        return await asyncio.to_thread(lock.__exit__, exc_type, exc, traceback)
    if not isinstance(exc, asyncio.CancelledError):
        # The block turned the cancellation into something else, or
        # swallowed it: that goes on (a finished block whose lease was lost
        # gets LeaseLost from __exit__).
        return await asyncio.to_thread(lock.__exit__, exc_type, exc, traceback)
    lease = block.held.lease
    await asyncio.to_thread(_release_quietly, lock)
    raise LeaseLost(
        f"lease on {lease.resource!r} with token {lease.token} is no longer held; "
        "the block was cancelled",
        resource=lease.resource,
        token=lease.token,
    )
