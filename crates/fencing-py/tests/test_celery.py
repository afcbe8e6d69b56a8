"""fencing.celery with real Celery workers: separate processes, a real
broker (the tests' Redis), a real database (PostgreSQL through psycopg and
``fence_transaction``). A worker paused mid-task past its TTL is overtaken
by a second run and its late write is refused; a worker killed mid-task
keeps the next run out until its lease runs out, not longer."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from conftest import ISSUERS, env, unique

TTL = 3.0

TASKS = '''
import os, time
import psycopg
from celery import Celery
import fencing.celery
from fencing.sql import fence_transaction

app = Celery("tasks", broker=os.environ["BROKER"], backend=os.environ["BROKER"])
app.conf.update(task_acks_late=False, worker_prefetch_multiplier=1, broker_connection_retry_on_startup=True)

@app.task
@fencing.celery.singleton(os.environ["ISSUER"], key="job:{job}", ttl={ttl}, on_busy="wait", wait=30)
def job(job, who, table, signals):
    token = fencing.celery.token()
    with open(os.path.join(signals, who + ".started"), "w") as f:
        f.write(f"{token} {time.time()}")
    go = os.path.join(signals, who + ".go")
    while not os.path.exists(go):
        time.sleep(0.02)
    with psycopg.connect(os.environ["DSN"]) as conn:
        with conn.transaction():
            fence_transaction(conn, f"job:{job}", token)
            conn.execute(f"INSERT INTO {table} (job, who, token) VALUES (%s, %s, %s)", (job, who, token))
    return who
'''


class Workers:
    """Celery workers, one queue each, in processes of their own."""

    def __init__(self, tmp: Path) -> None:
        self.tmp = tmp
        self.queues = unique("q")
        (tmp / "tasks.py").write_text(textwrap.dedent(TASKS).replace("{ttl}", str(TTL)))
        self.env = {
            **os.environ,
            "BROKER": f"{env('FENCING_REDIS_URL')}/5",
            "ISSUER": ISSUERS["redis"](""),
            "DSN": env("FENCING_PG_URL"),
            "PYTHONPATH": str(tmp),
        }
        self.processes: dict[str, subprocess.Popen[bytes]] = {}
        sys.path.insert(0, str(tmp))
        self.saved = {name: os.environ.get(name) for name in ("BROKER", "ISSUER", "DSN")}
        for name in self.saved:
            os.environ[name] = self.env[name]
        import tasks  # type: ignore[import-not-found]

        self.tasks: Any = tasks

    def start(self, name: str) -> None:
        log = open(self.tmp / f"{name}.log", "wb")  # noqa: SIM115 - the worker's for its life
        self.processes[name] = subprocess.Popen(
            [sys.executable, "-m", "celery", "-A", "tasks", "worker", "--pool=solo", "-Q", self.queue(name),
             "-n", f"{name}@{self.queues}", "--without-heartbeat", "--without-mingle", "--without-gossip",
             "--loglevel=INFO"],
            cwd=self.tmp, env=self.env, stdout=log, stderr=subprocess.STDOUT,
        )

    def queue(self, name: str) -> str:
        return f"{self.queues}-{name}"

    def send(self, worker: str, job: str, who: str, table: str) -> Any:
        return self.tasks.job.apply_async(args=[job, who, table, str(self.tmp)], queue=self.queue(worker))

    def started(self, who: str, within: float = 30) -> tuple[int, float]:
        path = self.tmp / f"{who}.started"
        deadline = time.monotonic() + within
        while not path.exists() or not path.read_text():
            if time.monotonic() > deadline:
                raise AssertionError(f"{who} did not start: {self.logs()}")
            time.sleep(0.02)
        token, at = path.read_text().split()
        return int(token), float(at)

    def go(self, who: str) -> None:
        (self.tmp / f"{who}.go").touch()

    def logs(self) -> str:
        return "\n".join(f"--- {p.name}\n{p.read_text(errors='replace')[-3000:]}" for p in self.tmp.glob("*.log"))

    def stop(self) -> None:
        for process in self.processes.values():
            try:
                os.kill(process.pid, signal.SIGCONT)
            except ProcessLookupError:
                pass
            process.kill()
            process.wait(10)
        sys.path.remove(str(self.tmp))
        sys.modules.pop("tasks", None)
        for name, value in self.saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


@pytest.fixture
def workers(tmp_path: Path) -> Iterator[Workers]:
    running = Workers(tmp_path)
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture
def table() -> Iterator[str]:
    name = unique("celery_results").replace("-", "_")
    with psycopg.connect(env("FENCING_PG_URL"), autocommit=True) as conn:
        conn.execute(f"CREATE TABLE {name} (job text, who text, token bigint)")
    yield name
    with psycopg.connect(env("FENCING_PG_URL"), autocommit=True) as conn:
        conn.execute(f"DROP TABLE {name}")


def rows(table: str) -> list[tuple[str, str, int]]:
    with psycopg.connect(env("FENCING_PG_URL")) as conn:
        return [tuple(r) for r in conn.execute(f"SELECT job, who, token FROM {table} ORDER BY token")]  # type: ignore[misc]


def test_a_worker_paused_past_its_ttl_is_overtaken_and_its_late_write_refused(
    workers: Workers, table: str
) -> None:
    job = unique("job")
    workers.start("a")
    workers.start("b")
    first = workers.send("a", job, "A", table)
    a_token, _ = workers.started("A")
    # Paused mid-task, holding the lease: its renewals stop.
    os.kill(workers.processes["a"].pid, signal.SIGSTOP)
    time.sleep(TTL + 1)
    workers.go("B")
    second = workers.send("b", job, "B", table)
    assert second.get(timeout=30) == "B", workers.logs()
    b_token, _ = workers.started("B")
    assert b_token > a_token
    # Continued: it finishes its work and writes with its old token.
    workers.go("A")
    os.kill(workers.processes["a"].pid, signal.SIGCONT)
    with pytest.raises(Exception) as refused:
        first.get(timeout=30, propagate=True)
    # Celery brings the worker's exception back as fencing's own class.
    assert type(refused.value).__name__ == "StaleToken", (refused.value, workers.logs())
    assert rows(table) == [(job, "B", b_token)]


def test_a_worker_killed_mid_task_keeps_the_next_run_out_until_its_lease_runs_out(
    workers: Workers, table: str
) -> None:
    job = unique("job")
    workers.start("a")
    workers.start("b")
    workers.send("a", job, "A", table)
    a_token, _ = workers.started("A")
    # Renewed while it ran: held well past its first TTL.
    time.sleep(TTL + 0.5)
    workers.processes["a"].kill()
    killed = time.time()
    workers.go("B")
    second = workers.send("b", job, "B", table)
    assert second.get(timeout=30) == "B", workers.logs()
    b_token, b_started = workers.started("B")
    assert b_token > a_token
    # The lease was renewed about a third of its TTL before the kill at
    # most (later under load): the next run waits out the rest, and not
    # much longer.
    waited = b_started - killed
    assert TTL / 3 <= waited <= TTL + 5, (waited, workers.logs())
    assert rows(table) == [(job, "B", b_token)]


def test_a_second_run_skips_waits_or_retries_and_keys_come_from_the_arguments(
    etcd: Any, postgres: Any, tmp_path: Path
) -> None:
    """In one process, with Celery's eager mode: the key template takes the
    task's arguments by name; a second run while one holds is skipped,
    waits, or is retried as asked; the store keys of `fence` are fenced
    with the run's token before the body runs."""
    import fencing
    import fencing.celery
    from celery import Celery

    app = Celery("eager", broker="memory://", backend="cache+memory://")
    app.conf.task_always_eager = True
    day, state = unique("day"), unique("state")
    seen: list[tuple[str, int]] = []

    def body(day: str, inner: Any = None) -> str:
        seen.append((day, fencing.celery.token()))
        assert postgres.mark(state) == fencing.celery.token()
        if inner is not None:
            return str(inner(day))
        return "ran"

    def task(on_busy: str, **more: Any) -> Any:
        return fencing.celery.singleton(
            etcd, key="report:{day}", ttl=5, on_busy=on_busy, fence=[(postgres, state)], **more  # type: ignore[arg-type]
        )(body)

    skip, wait, retry = task("skip"), task("wait", wait=0.3), app.task(task("retry", retry_after=7))
    assert skip(day) == "ran" and seen[-1][0] == day
    # While one run holds report:{day}: the second is skipped, times out, or retried.
    assert skip(day, inner=lambda d: skip(d)) == "None"
    with pytest.raises(fencing.Timeout):
        skip(day, inner=lambda d: wait(d))
    from celery.exceptions import Retry

    with pytest.raises(Retry) as retried:
        skip(day, inner=lambda d: retry.apply(args=[d], throw=True).get())
    assert retried.value.when == 7
    # Another day is another lease; each run a higher token.
    assert skip(unique("day")) == "ran"
    tokens = [t for _, t in seen]
    assert tokens == sorted(tokens) and len(set(tokens)) == len(tokens)
    with pytest.raises(RuntimeError):
        fencing.celery.token()
