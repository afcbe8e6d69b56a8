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
