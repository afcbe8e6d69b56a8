"""The contract from Python, on every issuer and store: tokens only go up,
a lower token is refused with nothing written, a lock fences its keys."""

from __future__ import annotations

import time

import pytest

import fencing
from conftest import STORES, unique


def test_each_grant_has_a_higher_token_and_a_held_resource_is_not_granted(issuer: fencing.Issuer) -> None:
    resource = unique("res")
    first = issuer.acquire(resource, ttl=10)
    assert first.resource == resource and first.token > 0 and not first.expired
    assert issuer.try_acquire(resource, ttl=10) is None
    held = issuer.holder(resource)
    assert held is not None and held.token == first.token and held.holder == first.holder
    renewed = issuer.renew(first)
    assert renewed.token == first.token
    issuer.release(renewed)
    second = issuer.acquire(resource, ttl=10, wait=5)
    assert second.token > first.token
    issuer.release(second)
    with pytest.raises(fencing.LeaseLost) as lost:
        issuer.renew(second)
    assert lost.value.resource == resource and lost.value.token == second.token


def test_a_lower_token_is_refused_and_nothing_is_written(store: fencing.Store) -> None:
    key = unique("key")
    assert store.get(key) is None and store.mark(key) is None
    store.put(key, b"from 34", 34)
    with pytest.raises(fencing.StaleToken) as stale:
        store.put(key, b"from 33", 33)
    assert (stale.value.key, stale.value.presented, stale.value.current) == (key, 33, 34)
    assert not stale.value.retryable
    read = store.get(key)
    assert read is not None and (read.value, read.token) == (b"from 34", 34)
    assert store.fence(key, 40) == 40
    with pytest.raises(fencing.StaleToken):
        store.delete(key, 39)
    store.delete(key, 40)
    assert store.get(key) is None and store.mark(key) == 40
    with pytest.raises(fencing.StaleToken):
        store.put(key, b"late", 35)


def test_a_lock_fences_its_keys_before_the_block_and_releases_after(issuer: fencing.Issuer) -> None:
    store = fencing.open_store("sqlite::memory:")
    resource, key = unique("res"), unique("key")
    with issuer.lock(resource, ttl=10, wait=10, fence=[(store, key)]) as held:
        assert store.mark(key) == held.token
        assert not held.lost
        held.check()
        store.put(key, b"work", held.token)
        assert issuer.try_acquire(resource, ttl=10) is None
    with pytest.raises(fencing.FencingError, match="ended"):
        held.token
    after = issuer.acquire(resource, ttl=10, wait=5)
    assert after.token > held_token(store, key)
    issuer.release(after)


def held_token(store: fencing.Store, key: str) -> int:
    read = store.get(key)
    assert read is not None
    return read.token


def test_a_lease_is_a_token_too(store: fencing.Store, etcd: fencing.Issuer) -> None:
    key, lease = unique("key"), etcd.acquire(unique("res"), ttl=10)
    store.put(key, b"x", lease)
    assert store.mark(key) == lease.token
    etcd.release(lease)


def test_one_lock_object_is_one_with_at_a_time(etcd: fencing.Issuer) -> None:
    """A Lock shared by two threads: the second `with` is refused while the
    first holds it, so a block's exit can only release its own lease."""
    import threading

    lock = etcd.lock(unique("res"), ttl=10, wait=5)
    entered, leave = threading.Event(), threading.Event()
    first: list[int] = []

    def hold() -> None:
        with lock as held:
            first.append(held.token)
            entered.set()
            leave.wait(10)

    holder = threading.Thread(target=hold)
    holder.start()
    assert entered.wait(10)
    with pytest.raises(fencing.InvalidInput, match="one `with` at a time"):
        lock.__enter__()
    leave.set()
    holder.join()
    with lock as again:
        assert again.token > first[0]


def test_remove_idle_keeps_a_held_name_and_removes_an_idle_one_without_a_token_going_back(
    issuer: fencing.Issuer,
) -> None:
    resource = unique("idle")
    try:
        assert issuer.remove_idle(resource, 1.0) == "absent"
    except fencing.Unsupported:
        # No safe removal there: etcd keeps nothing per name, GCS's client
        # has no conditional delete. (ZooKeeper removes: the fixture's
        # issuer is token=czxid under a prefix of its own, and the name has
        # no `/`.)
        assert issuer.name in ("etcd", "gcs"), issuer.name
        return
    with pytest.raises(fencing.InvalidInput):
        issuer.remove_idle(resource, 0.0)
    first = issuer.acquire(resource, ttl=10)
    assert issuer.remove_idle(resource, 1.0) == "in-use"
    issuer.release(first)
    # Past the idle second, and the counter a second below the clock.
    time.sleep(2.5)
    assert issuer.remove_idle(resource, 1.0) == "removed"
    second = issuer.acquire(resource, ttl=10, wait=5)
    assert second.token > first.token
    issuer.release(second)


def test_a_store_floor_refuses_on_every_key_and_its_marks_can_go(
    store: fencing.Store, tmp_path: object
) -> None:
    try:
        store.floor()
    except fencing.Unsupported:
        # One conditional write names one object (or item): no store-wide
        # floor can be checked in it, so none is kept and the marks stay.
        assert store.name in ("s3", "gcs", "azure"), store.name
        with pytest.raises(fencing.Unsupported):
            store.raise_floor(5)
        with pytest.raises(fencing.Unsupported):
            store.remove_floored_marks()
        return
    # A floor refuses on every key of its store: tables of this test's own
    # (DynamoDB's URL names a new table each time).
    url = STORES[{"mysql": "mariadb"}.get(store.name, store.name)](str(tmp_path))
    if store.name != "dynamodb":
        prefix = unique("floor").replace("-", "_").replace("/", "_") + "_"
        url = f"{url}{'&' if '?' in url else '?'}fencing_table_prefix={prefix}"
    store = fencing.open_store(url)
    assert store.floor() is None
    store.put("live", b"kept", 10)
    store.fence("only-fenced", 20)
    assert store.raise_floor(50) == 50
    with pytest.raises(fencing.InvalidInput):
        store.raise_floor(40)
    with pytest.raises(fencing.StaleToken):
        store.put("never-written", b"zombie", 50)
    removed = 0
    while (batch := store.remove_floored_marks(1)) > 0:
        removed += batch
    assert removed == 1
    assert store.mark("only-fenced") is None
    with pytest.raises(fencing.StaleToken):
        store.put("only-fenced", b"zombie", 20)
    got = store.get("live")
    assert got is not None and (got.value, got.token) == (b"kept", 10)
    store.put("live", b"next", 51)
