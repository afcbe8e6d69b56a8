"""Type stubs of ``fencing._native``, the Rust half of ``fencing``."""

from os import PathLike
from types import TracebackType
from typing import Any, Coroutine, Sequence, final

__all__ = [
    "Held",
    "Holding",
    "Issuer",
    "Lease",
    "Lock",
    "SqlGuard",
    "Store",
    "Versioned",
    "open_issuer",
    "open_store",
    "sqlite_file_in_use",
]

@final
class Lease:
    """A lease: the resource, its fencing token, its holder and its TTL."""

    @property
    def token(self) -> int: ...
    @property
    def resource(self) -> str: ...
    @property
    def holder(self) -> str: ...
    @property
    def ttl(self) -> float: ...
    @property
    def remaining(self) -> float: ...
    @property
    def expired(self) -> bool: ...

@final
class Holding:
    """Who holds a resource, and the token of their lease."""

    @property
    def holder(self) -> str: ...
    @property
    def token(self) -> int: ...

@final
class Versioned:
    """A value and its key's mark."""

    @property
    def value(self) -> bytes: ...
    @property
    def token(self) -> int: ...

@final
class Store:
    """A fenced store: a write with a token lower than the key's mark is
    refused (``StaleToken``) with nothing written."""

    @property
    def name(self) -> str: ...
    def put(self, key: str, value: bytes, token: int | Lease) -> None: ...
    def get(self, key: str) -> Versioned | None: ...
    def fence(self, key: str, token: int | Lease) -> int: ...
    def mark(self, key: str) -> int | None: ...
    def delete(self, key: str, token: int | Lease) -> None: ...

@final
class SqlGuard:
    """The statements and the verdict of the Rust transaction guard, for
    ``fencing.sql`` to run on a Python driver's connection."""

    def __new__(cls, dialect: str, paramstyle: str, table_prefix: str = "fencing_") -> SqlGuard: ...
    @property
    def dialect(self) -> str: ...
    @property
    def upsert(self) -> str: ...
    @property
    def select_mark(self) -> str: ...
    def upsert_params(self, domain: str, token: int | Lease) -> tuple[str, int, str] | dict[str, str | int]: ...
    def select_params(self, domain: str) -> tuple[str] | dict[str, str]: ...
    @staticmethod
    def mark_from_insert_id(insert_id: int) -> int: ...
    def verdict(self, domain: str, token: int | Lease, written: int | None, read: int | None = None) -> None: ...

@final
class Held:
    """The lease a ``with issuer.lock(...)`` block holds, renewed in the
    background until the block ends."""

    @property
    def token(self) -> int: ...
    @property
    def lease(self) -> Lease: ...
    @property
    def lost(self) -> bool: ...
    def check(self) -> None: ...

@final
class Lock:
    """A lock to take with ``with``: what ``Issuer.lock`` returns."""

    def __enter__(self) -> Held: ...
    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> bool: ...
    def __aenter__(self) -> Coroutine[Any, Any, Held]: ...
    def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        traceback: TracebackType | None,
    ) -> Coroutine[Any, Any, bool]: ...

@final
class Issuer:
    """A lock service: grants leases with fencing tokens on resources."""

    @property
    def name(self) -> str: ...
    @property
    def min_ttl(self) -> float: ...
    def lock(
        self,
        resource: str,
        *,
        ttl: float = 30.0,
        wait: float | None = None,
        fence: Sequence[tuple[Store, str]] = ...,
    ) -> Lock: ...
    def acquire(self, resource: str, *, ttl: float = 30.0, wait: float = 0.0) -> Lease: ...
    def try_acquire(self, resource: str, *, ttl: float = 30.0) -> Lease | None: ...
    def renew(self, lease: Lease) -> Lease: ...
    def release(self, lease: Lease) -> None: ...
    def holder(self, resource: str) -> Holding | None: ...
    def raise_floor(self, resource: str, floor: int) -> None: ...

def open_issuer(url: str) -> Issuer: ...
def open_store(url: str) -> Store: ...

def sqlite_file_in_use(path: str | PathLike[str]) -> bool:
    """Whether this process opened a store or an issuer on that SQLite file."""
