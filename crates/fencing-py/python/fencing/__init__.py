"""Distributed locks made safe with fencing tokens.

A lease alone cannot stop a paused process (GC, a frozen VM, a slow
network) from writing after its lease ran out. Every lease here carries a
fencing token, every write carries it, and the store refuses a token lower
than the highest it has accepted::

    import fencing

    issuer = fencing.open_issuer("etcd://127.0.0.1:2379")
    store = fencing.open_store("postgres://app:secret@db/app")
    with issuer.lock("nightly-report", ttl=30, fence=[(store, "reports/nightly")]) as held:
        store.put("reports/nightly", b"...", held.token)

The same Rust crates as the ``fence`` tool and the Rust library, on the same
URLs; calls release the GIL while they wait.
"""

from ._native import (
    Election,
    Held,
    Holding,
    Issuer,
    Leader,
    Lease,
    Lock,
    Store,
    Versioned,
    open_issuer,
    open_store,
)
from . import errors
from .errors import *  # noqa: F403 - every exception, as listed in errors.__all__

__all__ = [
    "open_issuer",
    "open_store",
    "Issuer",
    "Lease",
    "Holding",
    "Lock",
    "Held",
    "Election",
    "Leader",
    "Store",
    "Versioned",
]
__all__ += errors.__all__
