"""Bad input raises the typed exceptions, and no message shows a secret."""

from __future__ import annotations

import pytest

import fencing
from conftest import env, unique


@pytest.mark.parametrize(
    "url",
    [
        "",
        "nope://x",
        "postgres://u:p@127.0.0.1:5432/db?sslmode=sometimes",
        "etcd://127.0.0.1:2379?timeout=forever",
        "s3://",
    ],
)
def test_a_bad_url_is_invalid_input(url: str) -> None:
    with pytest.raises(fencing.InvalidInput):
        fencing.open_store(url) if url.startswith(("s3", "nope")) else fencing.open_issuer(url)


def test_a_wrong_password_is_unauthenticated_and_not_shown() -> None:
    # MariaDB checks passwords (this machine's PostgreSQL trusts local users).
    good = env("FENCING_MYSQL_URL")
    bad = good.replace("fencing:fencing@", "fencing:not-the-s3cret@")
    assert bad != good
    with pytest.raises(fencing.Unauthenticated) as refused:
        fencing.open_store(bad)
    assert "not-the-s3cret" not in str(refused.value)
    assert "not-the-s3cret" not in repr(refused.value.args)
    assert refused.value.backend == "mysql" and not refused.value.retryable


def test_a_server_that_is_down_is_a_retryable_backend_error() -> None:
    # A port nothing listens on (the one below Redis's TLS port is unused).
    with pytest.raises(fencing.BackendError) as down:
        fencing.open_issuer("redis://127.0.0.1:1?prefix=x:")
    assert down.value.retryable


@pytest.mark.parametrize("token", [-1, 2**64, "34", 3.5, True])
def test_a_token_out_of_range_or_of_another_type_is_invalid_input(token: object) -> None:
    store = fencing.open_store("sqlite::memory:")
    with pytest.raises(fencing.InvalidInput):
        store.put(unique("key"), b"x", token)  # type: ignore[arg-type]


@pytest.mark.parametrize("ttl", [-1.0, float("nan"), float("inf")])
def test_a_bad_ttl_is_invalid_input(etcd: fencing.Issuer, ttl: float) -> None:
    with pytest.raises(fencing.InvalidInput):
        etcd.acquire(unique("res"), ttl=ttl)


def test_an_empty_key_is_invalid_input_and_nothing_is_written() -> None:
    store = fencing.open_store("sqlite::memory:")
    with pytest.raises(fencing.InvalidInput):
        store.put("", b"x", 1)


def test_a_held_resource_times_out_as_timeout(etcd: fencing.Issuer) -> None:
    resource = unique("res")
    lease = etcd.acquire(resource, ttl=10)
    with pytest.raises(fencing.Timeout) as waited:
        etcd.acquire(resource, ttl=10, wait=0.3)
    assert isinstance(waited.value, TimeoutError) and waited.value.retryable
    etcd.release(lease)


def test_no_password_shows_in_a_repr() -> None:
    # This machine's PostgreSQL trusts local users: the password is never
    # checked, so the store opens and its repr can be looked at.
    url = env("FENCING_PG_URL").replace("fencing:fencing@", "fencing:s3cret-pw@")
    store = fencing.open_store(url)
    assert "s3cret-pw" not in repr(store), repr(store)
    assert "127.0.0.1" in repr(store)


def test_a_wait_too_long_for_the_clock_waits_as_long_as_it_takes(issuer: fencing.Issuer) -> None:
    """`wait=1e19` (longer than the clock can add): granted at once when
    free, never the overflow panic it was on etcd and the memory issuer."""
    lease = issuer.acquire(unique("res"), ttl=5, wait=1e19)
    issuer.release(lease)
