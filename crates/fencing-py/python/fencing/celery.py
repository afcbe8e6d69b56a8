"""Celery tasks that cannot run twice at once, and whose late writes fail.

A lock in front of a task (celery-once, celery-singleton,
python-redis-lock) stops a second run while the first holds it; it does
not stop the first from writing after its lock ran out: a worker paused
past the TTL (a GC, a frozen VM, ``SIGSTOP``) or cut off by a partition
wakes up and finishes, while the second run already wrote. Here each run
holds a fenced lease, renewed while it runs, and its token goes with its
writes, so the database refuses the late one::

    import fencing.celery
    from fencing.sql import fence_transaction

    @app.task
    @fencing.celery.singleton("redis://redis:6379?prefix=tasks:", key="report:{day}", ttl=30)
    def report(day: str) -> None:
        token = fencing.celery.token()
        with psycopg.connect(DSN) as conn:
            fence_transaction(conn, f"report:{day}", token)  # StaleToken once a later run fenced it
            conn.execute("INSERT INTO reports ...")

``key`` names the lease: a template formatted with the task's arguments by
name (``"report:{day}"``), a callable taking the same arguments, or None
for the task's name (one run at a time of the whole task). What a second
invocation does while one runs is ``on_busy``: ``"skip"`` (return None
without running, as celery-once's ``graceful``), ``"wait"`` (up to
``wait`` seconds, as long as it takes if None, then ``fencing.Timeout``) or
``"retry"`` (Celery's ``retry`` after ``retry_after`` seconds, a third of
the TTL if None; the task's ``max_retries``, 3 by default, bounds it).
With ``task_acks_late`` a task whose worker died is delivered again at
once, while the dead worker's lease runs out: ``"skip"`` would drop that
run (a warning is logged); use ``"wait"`` or ``"retry"`` there.

The run's lease is renewed in the background; if it is lost anyway (the
worker paused past the TTL), ``fencing.celery.token()`` raises
``LeaseLost`` from then on, a write with the token read before is refused
by the store once a later run has fenced or written it, and the task ends
with ``LeaseLost``. A worker killed mid-task (``SIGKILL``, a lost node)
holds its lease until the TTL runs out: the next run starts then, not
before.

The issuer is opened in each worker process on first use (a URL, or a
callable returning an issuer): an issuer opened before a prefork worker
forks belongs to the parent and cannot be used in the child.
"""

from __future__ import annotations

import contextvars
import functools
import inspect
import logging
import os
import sys
import threading
from collections.abc import Callable, Sequence
from typing import Any, Literal, TypeVar

from ._native import Held, Issuer, Store, open_issuer, open_store
from .errors import Timeout

__all__ = ["singleton", "held", "token"]

F = TypeVar("F", bound=Callable[..., Any])

_log = logging.getLogger("fencing.celery")

_held: contextvars.ContextVar[Held | None] = contextvars.ContextVar("fencing_celery_held", default=None)


def held() -> Held:
    """The lease of the ``singleton`` run this code is inside."""
    current = _held.get()
    if current is None:
        raise RuntimeError("fencing.celery.held() outside a fencing.celery.singleton task")
    return current


def token() -> int:
    """The fencing token of the run this code is inside: present it with
    every write. ``LeaseLost`` once the run's lease is lost."""
    return held().token


# Opened in this process: (pid, what) -> the object.
_opened: dict[tuple[int, object], Any] = {}
_opening = threading.Lock()


def _in_this_process(what: object, open_it: Callable[[], Any]) -> Any:
    key = (os.getpid(), what)
    with _opening:
        if key not in _opened:
            _opened[key] = open_it()
        return _opened[key]


def _issuer(spec: str | Issuer | Callable[[], Issuer]) -> Issuer:
    if isinstance(spec, Issuer):
        return spec
    if isinstance(spec, str):
        url = spec
        issuer: Issuer = _in_this_process(("issuer", url), lambda: open_issuer(url))
        return issuer
    opened: Issuer = _in_this_process(("issuer", spec), spec)
    return opened


def _store(spec: str | Store) -> Store:
    if isinstance(spec, Store):
        return spec
    url = spec
    store: Store = _in_this_process(("store", url), lambda: open_store(url))
    return store


def _name(
    template: str | Callable[..., str],
    signature: inspect.Signature | None,
    args: tuple[Any, ...],
    kwargs: dict[str, Any],
) -> str:
    if callable(template):
        return str(template(*args, **kwargs))
    if signature is None:
        return template
    bound = signature.bind(*args, **kwargs)
    bound.apply_defaults()
    return template.format(**bound.arguments)


def singleton(
    issuer: str | Issuer | Callable[[], Issuer],
    *,
    key: str | Callable[..., str] | None = None,
    ttl: float = 30.0,
    on_busy: Literal["skip", "wait", "retry"] = "skip",
    wait: float | None = None,
    retry_after: float | None = None,
    fence: Sequence[tuple[str | Store, str | Callable[..., str]]] = (),
) -> Callable[[F], F]:
    """Makes a task function run at most once at a time per ``key``, under
    a fenced lease of ``ttl`` seconds renewed while it runs (see the module
    documentation). Put it under ``@app.task``. Each ``(store, key)`` of
    ``fence`` (a store or its URL, and a key or key template) is fenced
    with the run's token before the body runs."""
    if on_busy not in ("skip", "wait", "retry"):
        raise ValueError(f"on_busy must be 'skip', 'wait' or 'retry', not {on_busy!r}")
    if wait is not None and on_busy != "wait":
        raise ValueError("wait= is for on_busy='wait'")

    def decorate(task: F) -> F:
        signature = inspect.signature(task)
        default = f"celery:{task.__module__}.{task.__qualname__}"

        @functools.wraps(task)
        def run(*args: Any, **kwargs: Any) -> Any:
            resource = default if key is None else _name(key, signature, args, kwargs)
            fences = [(_store(store), _name(name, signature, args, kwargs)) for store, name in fence]
            lock = _issuer(issuer).lock(resource, ttl=ttl, fence=fences)
            taken = lock.acquire(timeout=wait) if on_busy == "wait" else lock.acquire(blocking=False)
            if not taken:
                return _busy(resource, on_busy, wait, retry_after if retry_after is not None else ttl / 3)
            run_held = lock.held
            reset = _held.set(run_held)
            try:
                result = task(*args, **kwargs)
            except BaseException:
                _held.reset(reset)
                # Released; the task's own exception goes on.
                lock.__exit__(*sys.exc_info())
                raise
            _held.reset(reset)
            # LeaseLost if the lease was lost while the body ran.
            lock.__exit__(None, None, None)
            return result

        return run  # type: ignore[return-value]

    return decorate


def _busy(resource: str, on_busy: str, wait: float | None, retry_after: float) -> Any:
    if on_busy == "skip":
        _log.warning("%s is held by another run: this run is skipped", resource)
        return None
    if on_busy == "wait":
        raise Timeout(f"{resource!r} was still held by another run after {wait} s", operation=resource, after=wait)
    from celery import current_task  # type: ignore[import-untyped]

    _log.info("%s is held by another run: retried in %s s", resource, retry_after)
    raise current_task.retry(countdown=retry_after)
