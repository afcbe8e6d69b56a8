"""Checked by `mypy --strict` against the stubs (integration/python.sh):
the documented program, as a user writes it."""

from __future__ import annotations

import fencing


def nightly_report(issuer_url: str, store_url: str, report: bytes) -> int:
    issuer = fencing.open_issuer(issuer_url)
    store = fencing.open_store(store_url)
    with issuer.lock("nightly-report", ttl=30, wait=10, fence=[(store, "reports/nightly")]) as held:
        store.put("reports/nightly", report, held.token)
        held.check()
        token: int = held.token
    read = store.get("reports/nightly")
    if read is not None:
        data: bytes = read.value
        assert data
    try:
        store.put("reports/nightly", b"late", token - 1)
    except fencing.StaleToken as stale:
        current: int = stale.current
        return current
    return token


async def nightly_report_async(issuer: fencing.Issuer, store: fencing.Store, report: bytes) -> int:
    async with issuer.lock("nightly-report", ttl=30, fence=[(store, "reports/nightly")]) as held:
        store.put("reports/nightly", report, held.token)
        token: int = held.token
    return token


async def with_asyncio(issuer_url: str, store_url: str) -> int | None:
    import fencing.aio

    issuer = await fencing.aio.open_issuer(issuer_url)
    store = await fencing.aio.open_store(store_url)
    lease: fencing.Lease = await issuer.acquire("jobs/compact", ttl=20, wait=5)
    await store.put("jobs/compact/state", b"...", lease)
    await issuer.release(lease)
    async with issuer.lock("jobs/compact", fence=[(store, "jobs/compact/state")]) as held:
        mark: int = await store.fence("jobs/compact/state", held.token)
        assert mark == held.token
    return await store.mark("jobs/compact/state")


def as_redis_py_locks_are_taken(issuer: fencing.Issuer, store: fencing.Store) -> int | None:
    lock = issuer.lock("nightly-report", ttl=30)
    if not lock.acquire(blocking=True, timeout=10):
        return None
    try:
        store.put("reports/nightly", b"...", lock.token)
        busy: bool = lock.locked() and lock.owned()
        assert busy
    finally:
        lock.release()
    return None


async def as_redis_asyncio_locks_are_taken(issuer_url: str) -> int | None:
    import fencing.aio

    issuer = await fencing.aio.open_issuer(issuer_url)
    lock: fencing.aio.Lock = issuer.lock("nightly-report", ttl=30)
    if await lock.acquire(blocking_timeout=5):
        token: int = lock.token
        await lock.release()
        return token
    return None


def lead(issuer: fencing.Issuer, store: fencing.Store) -> str | None:
    election: fencing.Election = issuer.election("scheduler", candidate="host-a", ttl=15, fence=[(store, "jobs")])
    with election.campaign(wait=30) as term:
        store.put("jobs", b"...", term.token)
    leader: fencing.Leader | None = election.leader()
    return leader.candidate if leader is not None else None


async def lead_async(issuer: fencing.Issuer) -> int:
    import fencing.aio

    election = fencing.aio.Issuer(issuer).election("scheduler", candidate="host-a")
    async with election.campaign() as term:
        token: int = term.token
    return token


def with_sql(dsn: str, token: int) -> None:
    import psycopg

    from fencing.sql import fence_transaction

    with psycopg.connect(dsn) as conn:
        fence_transaction(conn, "orders", token)
        conn.execute("UPDATE orders SET status = 'shipped' WHERE id = %s", (7,))
