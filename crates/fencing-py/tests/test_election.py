"""Leader election from Python: ``issuer.election(...)``, whose campaign is
a lock, on every issuer; a deposed leader's late write refused; the same
awaitable in ``fencing.aio``, with the block cancelled when the term is
lost."""

from __future__ import annotations

import asyncio
import time

import pytest

import fencing
import fencing.aio
from conftest import unique


def test_one_leader_at_a_time_and_the_next_term_fences_the_deposed_one(
    issuer: fencing.Issuer, tmp_path: object
) -> None:
    store = fencing.open_store(f"sqlite://{tmp_path}/election.db")
    resource, key = unique("elect"), unique("state")
    ttl = max(3.0, issuer.min_ttl)
    a = issuer.election(resource, candidate="host-a", ttl=ttl, fence=[(store, key)])
    b = issuer.election(resource, candidate="host-b", ttl=ttl, fence=[(store, key)])
    assert a.leader() is None and (a.resource, a.candidate) == (resource, "host-a")

    with a.campaign() as term:
        first = term.token
        # Fenced before the block ran; the other candidate sees who leads.
        assert store.mark(key) == first
        leader = b.leader()
        assert leader is not None and (leader.candidate, leader.token) == ("host-a", first)
        assert leader.holder.startswith("host-a#")
        # One leader at a time: b's campaign waits, then gives up.
        with pytest.raises(fencing.Timeout):
            with b.campaign(wait=0.3):
                pytest.fail("two leaders")
        store.put(key, b"a's work", term.token)
    # The block's end resigned: b leads at once, with a higher token.
    with b.campaign(wait=10) as term:
        assert term.token > first
        assert store.mark(key) == term.token
        assert b.leader() is not None and b.leader().candidate == "host-b"  # type: ignore[union-attr]
        # The deposed leader's late write is refused.
        with pytest.raises(fencing.StaleToken):
            store.put(key, b"a, late", first)
    assert a.leader() is None


def test_a_term_lost_is_raised_and_the_same_campaign_can_run_again(etcd: fencing.Issuer) -> None:
    election = etcd.election(unique("elect-lost"), candidate="host-a", ttl=3)
    term_lock = election.campaign()
    assert term_lock.acquire(timeout=10)
    first = term_lock.token
    # Released behind the keep-alive's back: the term is lost at its next
    # renewal, and its token can no longer be read.
    etcd.release(term_lock.held.lease)  # type: ignore[union-attr]
    held = term_lock.held
    assert held is not None
    for _ in range(200):
        if held.lost:
            break
        time.sleep(0.05)
    assert held.lost
    with pytest.raises(fencing.LeaseLost):
        held.check()
    with pytest.raises(fencing.LeaseLost):
        term_lock.release()
    with election.campaign(wait=10) as again:
        assert again.token > first


def test_an_aio_campaign_leads_and_is_cancelled_when_the_term_is_lost(etcd: fencing.Issuer) -> None:
    resource = unique("elect-aio")

    async def main() -> int:
        issuer = fencing.aio.Issuer(etcd)
        election = issuer.election(resource, candidate="host-a", ttl=3)
        assert await election.leader() is None
        async with election.campaign() as term:
            leader = await election.leader()
            assert leader is not None and leader.token == term.token
            # Lost behind the keep-alive's back: the block is cancelled.
            await issuer.release(term.lease)
            await asyncio.sleep(30)
        return 0

    with pytest.raises(fencing.LeaseLost):
        asyncio.run(asyncio.wait_for(main(), 20))
