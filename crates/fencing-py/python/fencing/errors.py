"""The exceptions of ``fencing``: one class per kind of failure of the Rust
``fencing_core::Error``, each with that error's fields as attributes.

Every message is the error and its causes with any secret (a password, a
SAS signature) redacted. ``retryable`` says whether repeating the same call
is safe and may succeed.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "FencingError",
    "StaleToken",
    "Unfenced",
    "LeaseLost",
    "Busy",
    "Timeout",
    "TokenOutOfRange",
    "InvalidInput",
    "UnsafeConfiguration",
    "Tls",
    "Unauthenticated",
    "Unsupported",
    "Contention",
    "OutcomeUnknown",
    "BackendError",
]


class FencingError(Exception):
    """Any failure of an issuer or a store."""

    retryable: bool

    def __init__(self, message: str, *, retryable: bool = False, **fields: Any) -> None:
        super().__init__(message)
        self.retryable = retryable
        for name, value in fields.items():
            setattr(self, name, value)


class StaleToken(FencingError):
    """The store has accepted a higher token for ``key``: this holder was
    superseded. Nothing was written; stop the work rather than retry."""

    key: str
    presented: int
    current: int


class Unfenced(FencingError):
    """``key`` holds data written without fencing, so its mark is unknown.
    Nothing was written."""

    key: str


class LeaseLost(FencingError):
    """The lease on ``resource`` is no longer held (expired, released or
    taken): stop the work it guarded."""

    resource: str
    token: int


class Busy(FencingError):
    """``resource`` is held, and ``operation`` needs it free. Nothing changed."""

    resource: str
    operation: str


class Timeout(FencingError, TimeoutError):
    """Nothing was granted or applied within the wait (``after`` seconds)."""

    operation: str
    after: float


class TokenOutOfRange(FencingError):
    """A token above what the backend can store (``max``). Nothing written."""

    token: int
    max: int


class InvalidInput(FencingError, ValueError):
    """Bad input: a malformed URL, an empty or oversize key, a value over
    the backend's limit, a token out of range. Nothing was sent."""


class UnsafeConfiguration(FencingError):
    """The backend could let a token go backwards (a Redis that can lose
    its counter, say) and the URL did not opt in."""

    backend: str


class Tls(FencingError):
    """The TLS handshake failed: the CA, the client certificate or the host
    name. Nothing was sent."""

    backend: str


class Unauthenticated(FencingError):
    """The server refused the credentials."""

    backend: str


class Unsupported(FencingError):
    """The backend cannot do ``operation``."""

    backend: str
    operation: str


class Contention(FencingError):
    """Other writers kept changing ``key`` between read and conditional
    write. Nothing of ours was applied; retrying is safe."""

    key: str
    attempts: int


class OutcomeUnknown(FencingError):
    """``operation`` was sent and its answer lost: it may have been applied.
    Read back before deciding."""

    backend: str
    operation: str


class BackendError(FencingError):
    """Any other failure of the backend (connection refused, a missing
    bucket or table). Nothing was applied."""

    backend: str
