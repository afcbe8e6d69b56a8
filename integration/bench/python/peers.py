"""The Python rows of the bench: a `fencing` lock against the locks Python
users hold today, and a fenced put against a plain psycopg upsert, on the
same servers, interleaved (fenced then plain, then plain then fenced, …).

Run by the bench (`bench --only python`) with a Python that has the
`fencing` wheel and the test extra installed (integration/python.sh leaves
one in target/python-venv). Prints one JSON object: the rows, each with
both sides' times in seconds.
"""

from __future__ import annotations

import json
import os
import sys
import time
import uuid
from collections.abc import Callable
from importlib.metadata import version
from typing import Any

import kazoo.client
import kazoo.recipe.lock
import psycopg
import redis

import fencing


def timed(one: Callable[[], object]) -> float:
    started = time.perf_counter()
    one()
    return time.perf_counter() - started


def cycle(lock: Any) -> Callable[[], None]:
    """One acquire (one try) and release of `lock`: fencing's, redis-py's
    and kazoo's take the same calls."""

    def run() -> None:
        assert lock.acquire(blocking=False)
        lock.release()

    return run


def interleaved(iterations: int, warmup: int, fenced: Callable[[], object], plain: Callable[[], object]) -> tuple[list[float], list[float]]:
    for _ in range(warmup):
        fenced()
        plain()
    a, b = [], []
    for i in range(iterations):
        if i % 2 == 0:
            a.append(timed(fenced))
            b.append(timed(plain))
        else:
            b.append(timed(plain))
            a.append(timed(fenced))
    return a, b


def main() -> None:
    iterations, warmup = int(sys.argv[1]), int(sys.argv[2])
    run = uuid.uuid4().hex[:12]
    rows = []

    # Redis: the append-only server the fencing issuer requires; redis-py's
    # Lock on the same server.
    url = os.environ["FENCING_REDIS_AOF_URL"]
    issuer = fencing.open_issuer(f"{url}?prefix=bench-{run}:")
    ours = issuer.lock(f"py-{run}", ttl=10)
    theirs = redis.Redis.from_url(url).lock(f"bench-{run}:redis-py", timeout=10)

    fenced, plain = interleaved(iterations, warmup, cycle(ours), cycle(theirs))
    rows.append({
        "backend": "redis", "operation": "Python: Lock acquire + release vs redis-py's Lock",
        "fenced": fenced, "plain": plain,
        "notes": f"fencing {version('fencing')} `issuer.lock(…).acquire()` + `release()` (a renewed lease, its token) "
                 f"vs redis-py {version('redis')} `Redis.lock(…).acquire()` + `release()` (no token, no renewal), same server",
    })

    # ZooKeeper: kazoo's Lock recipe on the same server.
    zk_addr = os.environ["FENCING_ZK_ADDR"]
    issuer = fencing.open_issuer(f"zk://{zk_addr}/bench-{run}")
    ours = issuer.lock("py", ttl=10)
    client = kazoo.client.KazooClient(hosts=zk_addr)
    client.start(timeout=10)
    theirs_zk = client.Lock(f"/bench-{run}-kazoo/lock", "bench")

    fenced, plain = interleaved(iterations, warmup, cycle(ours), cycle(theirs_zk))
    client.stop()
    rows.append({
        "backend": "zookeeper", "operation": "Python: Lock acquire + release vs kazoo's Lock",
        "fenced": fenced, "plain": plain,
        "notes": f"fencing `issuer.lock(…)` vs kazoo {version('kazoo')} `client.Lock(…)` (a session the client keeps), "
                 "same server",
    })

    # PostgreSQL: a fenced put against the same upsert without a token.
    dsn = os.environ["FENCING_PG_URL"]
    store = fencing.open_store(dsn)
    table = f"bench_plain_{run}"
    conn = psycopg.connect(dsn, autocommit=True)
    conn.execute(f"CREATE TABLE {table} (key text PRIMARY KEY, value bytea)")
    value = os.urandom(1024)
    key = f"py-{run}"

    def fenced_put() -> None:
        store.put(key, value, 7)

    def plain_upsert() -> None:
        conn.execute(
            f"INSERT INTO {table} (key, value) VALUES (%s, %s) ON CONFLICT (key) DO UPDATE SET value = EXCLUDED.value",
            (key, value),
        )

    try:
        fenced, plain = interleaved(iterations, warmup, fenced_put, plain_upsert)
    finally:
        conn.execute(f"DROP TABLE {table}")
        conn.close()
    rows.append({
        "backend": "postgres", "operation": "Python: fenced put vs psycopg upsert",
        "fenced": fenced, "plain": plain, "payload": 1024,
        "notes": f"`Store.put` (the fenced upsert, its pool's connection check included) vs psycopg {version('psycopg')} "
                 "`INSERT … ON CONFLICT DO UPDATE` on one autocommit connection, same server",
    })
    print(json.dumps({"python": sys.version.split()[0], "rows": rows}))


if __name__ == "__main__":
    main()
