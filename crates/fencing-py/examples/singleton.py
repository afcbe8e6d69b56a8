"""A scheduler singleton, as Celery beat or a cron host needs one: run this
on every host; one at a time holds the lock and runs the ticks, the others
wait in `issuer.lock` and take over within a TTL when it dies.

Each tick records itself in the store with the holder's token, so a
scheduler that was paused (GC, a frozen VM) and wakes up after another took
over is refused at the store instead of running the tick twice.

    python singleton.py ISSUER_URL STORE_URL [NAME] [TICKS]
"""

from __future__ import annotations

import json
import os
import sys
import time

import fencing

TTL = 3.0  # seconds; renewed every TTL/3 while the holder lives
EVERY = 0.2  # seconds between ticks


def run(issuer_url: str, store_url: str, name: str = "beat", ticks: int = 10) -> None:
    issuer = fencing.open_issuer(issuer_url)
    store = fencing.open_store(store_url)
    key = f"{name}/last-tick"
    with issuer.lock(name, ttl=TTL, fence=[(store, key)]) as held:
        print(json.dumps({"leader": os.getpid(), "token": held.token}), flush=True)
        for tick in range(ticks):
            held.check()  # LeaseLost: stop, another scheduler has taken over
            record = {"pid": os.getpid(), "tick": tick, "at": time.time()}
            try:
                store.put(key, json.dumps(record).encode(), held.token)
            except fencing.StaleToken as stale:
                # Paused past the TTL: the next scheduler wrote with a higher token.
                print(json.dumps({"superseded_by": stale.current}), flush=True)
                return
            print(json.dumps({"tick": tick}), flush=True)
            time.sleep(EVERY)


if __name__ == "__main__":
    args = sys.argv[1:]
    if len(args) < 2:
        sys.exit(__doc__)
    run(args[0], args[1], *(args[2:3]), *(int(a) for a in args[3:4]))
