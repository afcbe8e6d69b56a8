"""fencing.sql.fence_transaction on the connections Python programs hold
(psycopg 3, PyMySQL, sqlite3, SQLAlchemy), against PostgreSQL, MariaDB and
SQLite, and against the marks the Rust store keeps on the same tables."""

from __future__ import annotations

import multiprocessing
import os
import sqlite3
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.connection import Connection
from typing import Any

import psycopg
import pymysql
import pytest
import sqlalchemy
from sqlalchemy.orm import Session

import fencing
from fencing.sql import fence_transaction

from conftest import env, sqlite_url, unique


def pg_connect() -> psycopg.Connection[Any]:
    return psycopg.connect(env("FENCING_PG_URL"))


def mysql_connect() -> pymysql.connections.Connection[Any]:
    url = urllib.parse.urlsplit(env("FENCING_MYSQL_URL"))
    return pymysql.connect(
        host=url.hostname,
        port=url.port or 3306,
        user=url.username,
        password=url.password or "",
        database=url.path.lstrip("/"),
    )


def sqlalchemy_url(url: str) -> str:
    scheme, rest = url.split("://", 1)
    driver = {"postgres": "postgresql+psycopg", "mysql": "mysql+pymysql"}[scheme]
    return f"{driver}://{rest}"


def _serve_store(url: str, pipe: Connection) -> None:
    """The other process of `StoreInAnotherProcess`: one call per message."""
    store = fencing.open_store(url)
    pipe.send((True, None))  # the tables are there
    while True:
        try:
            name, args = pipe.recv()
        except EOFError:
            return
        try:
            value = getattr(store, name)(*args)
            if isinstance(value, fencing.Versioned):
                value = Stored(value.value, value.token)
            pipe.send((True, value))
        except fencing.FencingError as e:
            pipe.send((False, e))


class Stored:
    """A `Versioned` that crosses a pipe."""

    def __init__(self, value: bytes, token: int) -> None:
        self.value, self.token = value, token


class StoreInAnotherProcess:
    """The Rust store on a SQLite file, in a process of its own: Python's
    sqlite3 is a second copy of SQLite, and two copies in one process
    release each other's file locks (fence_transaction refuses that)."""

    def __init__(self, url: str) -> None:
        context = multiprocessing.get_context("spawn")
        self._pipe, child = context.Pipe()
        self._process = context.Process(target=_serve_store, args=(url, child), daemon=True)
        self._process.start()
        assert self._pipe.poll(60), "the store's process did not open it"
        self._pipe.recv()

    def __getattr__(self, name: str) -> Callable[..., Any]:
        def call(*args: Any) -> Any:
            self._pipe.send((name, args))
            ok, value = self._pipe.recv()
            if not ok:
                raise value
            return value

        return call

    def close(self) -> None:
        self._pipe.close()
        self._process.join(10)


class Db:
    """One driver on one database: the Rust store on the same tables, and
    transactions on the driver's own connections."""

    def __init__(self, name: str, store_url: str, transaction: Callable[[], Any]) -> None:
        self.name = name
        # Creates the tables; on SQLite, in another process.
        self.store: Any = (
            StoreInAnotherProcess(store_url) if store_url.startswith("sqlite:") else fencing.open_store(store_url)
        )
        self.transaction = transaction

    def close(self) -> None:
        if isinstance(self.store, StoreInAnotherProcess):
            self.store.close()


@contextmanager
def dbapi_transaction(connect: Callable[[], Any]) -> Iterator[Any]:
    """A DB-API connection (transactions implicit): committed at the end
    of the block, rolled back on an exception."""
    conn = connect()
    try:
        yield conn
        conn.commit()
    except BaseException:
        conn.rollback()
        raise
    finally:
        conn.close()


@contextmanager
def engine_transaction(engine: sqlalchemy.Engine) -> Iterator[Any]:
    with engine.begin() as conn:
        yield conn


@contextmanager
def session_transaction(engine: sqlalchemy.Engine) -> Iterator[Any]:
    with Session(engine) as session, session.begin():
        yield session


DRIVERS = ["psycopg", "pymysql", "sqlite3", "sqlalchemy-postgres", "sqlalchemy-mysql", "sqlalchemy-sqlite-session"]


@pytest.fixture(params=DRIVERS)
def db(request: pytest.FixtureRequest, tmp_path: os.PathLike[str]) -> Iterator[Db]:
    name = request.param
    engine: sqlalchemy.Engine | None = None
    if name == "psycopg":
        db = Db(name, env("FENCING_PG_URL"), lambda: dbapi_transaction(pg_connect))
    elif name == "pymysql":
        db = Db(name, env("FENCING_MYSQL_URL"), lambda: dbapi_transaction(mysql_connect))
    elif name == "sqlite3":
        path = f"{tmp_path}/fencing.db"
        db = Db(name, sqlite_url(str(tmp_path)), lambda: dbapi_transaction(lambda: sqlite3.connect(path, timeout=10)))
    else:
        backend = name.split("-")[1]
        if backend == "sqlite":
            store_url, engine_url = sqlite_url(str(tmp_path)), f"sqlite:///{tmp_path}/fencing.db"
        else:
            store_url = env({"postgres": "FENCING_PG_URL", "mysql": "FENCING_MYSQL_URL"}[backend])
            engine_url = sqlalchemy_url(store_url)
        engine = sqlalchemy.create_engine(engine_url)
        bound = engine
        session = name.endswith("-session")
        db = Db(name, store_url, lambda: session_transaction(bound) if session else engine_transaction(bound))
    yield db
    db.close()
    if engine is not None:
        engine.dispose()


def test_the_guard_and_the_store_refuse_each_others_lower_tokens(db: Db) -> None:
    domain = unique("orders")
    # The store's fence (an election's takeover) refuses the guard's 5.
    assert db.store.fence(domain, 6) == 6
    with pytest.raises(fencing.StaleToken) as refused:
        with db.transaction() as conn:
            fence_transaction(conn, domain, 5)
    assert (refused.value.key, refused.value.presented, refused.value.current) == (domain, 5, 6)
    assert db.store.mark(domain) == 6
    # The guard's 7 refuses the store's 6, and keeps the store's value.
    db.store.put(domain, b"kept", 6)
    with db.transaction() as conn:
        fence_transaction(conn, domain, 7)
    assert db.store.mark(domain) == 7
    with pytest.raises(fencing.StaleToken) as stale:
        db.store.put(domain, b"late", 6)
    assert (stale.value.presented, stale.value.current) == (6, 7)
    versioned = db.store.get(domain)
    assert versioned is not None and (versioned.value, versioned.token) == (b"kept", 7)
    # The same token again is the same holder: accepted.
    with db.transaction() as conn:
        fence_transaction(conn, domain, 7)
    db.store.put(domain, b"new", 7)


def test_a_name_the_store_never_saw_is_fenced_by_the_guard(db: Db) -> None:
    domain = unique("fresh")
    with db.transaction() as conn:
        fence_transaction(conn, domain, 3)
    assert db.store.mark(domain) == 3
    assert db.store.get(domain) is None  # a fence, no value
    with pytest.raises(fencing.StaleToken):
        db.store.put(domain, b"late", 2)


def test_a_refused_transactions_writes_are_rolled_back(db: Db) -> None:
    domain = unique("rollback")
    db.store.fence(domain, 9)
    # The caller's own write after a refused fence never commits: the
    # exception leaves the block, which rolls back. The store's fence call
    # on another name stands in for "a write in the same transaction".
    other = unique("other")
    with pytest.raises(fencing.StaleToken):
        with db.transaction() as conn:
            fence_transaction(conn, other, 4)  # succeeds, uncommitted
            fence_transaction(conn, domain, 8)  # refused
    assert db.store.mark(other) is None


@pytest.mark.parametrize("connect", [pg_connect, mysql_connect], ids=["postgres", "mariadb"])
def test_a_zombie_transaction_waits_for_the_holder_and_is_refused(
    connect: Callable[[], Any], postgres: fencing.Store
) -> None:
    """The holder's transaction fences 8 and keeps going; a zombie with 7
    blocks on the domain's row, and is refused once the holder commits."""
    if connect is mysql_connect:
        fencing.open_store(env("FENCING_MYSQL_URL"))  # the tables
    domain = unique("zombie")
    holder = connect()
    fence_transaction(holder, domain, 8)
    outcome: list[BaseException | str] = []
    finished = threading.Event()

    def zombie() -> None:
        try:
            with dbapi_transaction(connect) as conn:
                fence_transaction(conn, domain, 7)
            outcome.append("committed")
        except BaseException as e:  # noqa: BLE001 - recorded for the assertion
            outcome.append(e)
        finished.set()

    thread = threading.Thread(target=zombie)
    thread.start()
    assert not finished.wait(1.0), f"the zombie did not wait for the holder: {outcome}"
    committed_at = time.monotonic()
    holder.commit()
    holder.close()
    assert finished.wait(30), "the zombie never finished"
    thread.join()
    assert time.monotonic() >= committed_at
    assert len(outcome) == 1 and isinstance(outcome[0], fencing.StaleToken), outcome
    assert (outcome[0].presented, outcome[0].current) == (7, 8)


def test_a_higher_token_waits_for_the_holder_and_then_wins(postgres: fencing.Store) -> None:
    domain = unique("takeover")
    old = pg_connect()
    fence_transaction(old, domain, 4)
    done = threading.Event()

    def newer() -> None:
        with dbapi_transaction(pg_connect) as conn:
            fence_transaction(conn, domain, 5)
        done.set()

    thread = threading.Thread(target=newer)
    thread.start()
    assert not done.wait(1.0), "the newer holder did not wait for the old transaction"
    old.rollback()
    old.close()
    assert done.wait(30)
    thread.join()
    assert postgres.mark(domain) == 5


def test_autocommit_connections_are_refused(tmp_path: os.PathLike[str], postgres: fencing.Store) -> None:
    fencing.open_store(env("FENCING_MYSQL_URL"))
    domain = unique("autocommit")
    with psycopg.connect(env("FENCING_PG_URL"), autocommit=True) as pg:
        with pytest.raises(fencing.InvalidInput, match="autocommit"):
            fence_transaction(pg, domain, 1)
        # An explicit transaction on an autocommit connection is one.
        with pg.transaction():
            fence_transaction(pg, domain, 1)
    assert postgres.mark(domain) == 1
    my = mysql_connect()
    my.autocommit(True)
    with pytest.raises(fencing.InvalidInput, match="autocommit"):
        fence_transaction(my, domain, 1)
    my.close()
    StoreInAnotherProcess(sqlite_url(str(tmp_path))).close()  # the tables
    lite = sqlite3.connect(f"{tmp_path}/fencing.db", isolation_level=None)
    with pytest.raises(fencing.InvalidInput, match="autocommit"):
        fence_transaction(lite, domain, 1)
    lite.execute("BEGIN IMMEDIATE")
    fence_transaction(lite.cursor(), domain, 2)
    lite.execute("COMMIT")
    lite.close()
    engine = sqlalchemy.create_engine(sqlalchemy_url(env("FENCING_PG_URL")))
    with engine.connect().execution_options(isolation_level="AUTOCOMMIT") as conn:
        with pytest.raises(fencing.InvalidInput, match="AUTOCOMMIT"):
            fence_transaction(conn, unique("never"), 1)
    engine.dispose()


def test_bad_input_is_refused_before_any_statement(postgres: fencing.Store) -> None:
    with dbapi_transaction(pg_connect) as conn:
        with pytest.raises(fencing.InvalidInput):
            fence_transaction(conn, "", 1)
        with pytest.raises(fencing.InvalidInput):
            fence_transaction(conn, "x" * 513, 1)
        with pytest.raises(fencing.InvalidInput):
            fence_transaction(conn, "a\0b", 1)
        with pytest.raises(fencing.InvalidInput):
            fence_transaction(conn, "d", "7")  # type: ignore[arg-type]
        with pytest.raises(fencing.InvalidInput):
            fence_transaction(conn, "d", True)
        with pytest.raises(fencing.TokenOutOfRange):
            fence_transaction(conn, "d", 2**63)
        with pytest.raises(fencing.InvalidInput):
            fence_transaction(conn, "d", 1, table_prefix="x; DROP TABLE y")
        # Nothing ran: the transaction is still usable and empty.
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
    with pytest.raises(fencing.InvalidInput, match="psycopg, PyMySQL, sqlite3 or SQLAlchemy"):
        fence_transaction(object(), "d", 1)


def test_an_async_connection_is_refused() -> None:
    async def attempt() -> None:
        conn = await psycopg.AsyncConnection.connect(env("FENCING_PG_URL"))
        try:
            with pytest.raises(fencing.InvalidInput, match="async"):
                fence_transaction(conn, "d", 1)
        finally:
            await conn.close()

    import asyncio

    asyncio.run(attempt())


@pytest.mark.parametrize("connect", [pg_connect, mysql_connect], ids=["postgres", "mariadb"])
def test_a_negative_mark_is_another_programs_and_left_alone(
    connect: Callable[[], Any], postgres: fencing.Store
) -> None:
    fencing.open_store(env("FENCING_MYSQL_URL"))
    domain = unique("foreign")
    with dbapi_transaction(connect) as conn:
        marker = "%s"
        conn.cursor().execute(
            f"INSERT INTO fencing_records (k, lock_token) VALUES ({marker}, -5)", (domain,)
        )
    with pytest.raises(fencing.BackendError, match="not written by fencing") as foreign:
        with dbapi_transaction(connect) as conn:
            fence_transaction(conn, domain, 1)
    assert not foreign.value.retryable
    with dbapi_transaction(connect) as conn:
        cursor = conn.cursor()
        cursor.execute("SELECT lock_token FROM fencing_records WHERE k = %s", (domain,))
        assert cursor.fetchone()[0] == -5


def test_sqlite3_and_a_store_on_one_file_in_one_process_are_refused(tmp_path: os.PathLike[str]) -> None:
    """Two copies of SQLite in one process (Python's sqlite3 and the
    wheel's) release each other's locks when either closes the file: seen
    here as the store reading a mark the file no longer holds. So the guard
    refuses to run beside a store on the same file, and says why."""
    path = f"{tmp_path}/fencing.db"
    store = fencing.open_store(sqlite_url(str(tmp_path)))
    store.fence("d", 1)
    conn = sqlite3.connect(path)
    with pytest.raises(fencing.UnsafeConfiguration, match="two copies of SQLite") as refused:
        fence_transaction(conn, "d", 2)
    assert refused.value.backend == "sqlite"
    conn.close()
    # Another file is fine.
    other = sqlite3.connect(f"{tmp_path}/other.db")
    other.execute("CREATE TABLE fencing_records (k TEXT PRIMARY KEY, v BLOB, lock_token INTEGER NOT NULL)")
    other.execute("CREATE TABLE fencing_domains (domain TEXT PRIMARY KEY, lock_token INTEGER NOT NULL)")
    fence_transaction(other, "d", 2)
    other.commit()
    assert other.execute("SELECT lock_token FROM fencing_records WHERE k = 'd'").fetchone() == (2,)
    other.close()


def test_the_guard_object_renders_the_rust_statements() -> None:
    from fencing._native import SqlGuard

    guard = SqlGuard("postgres", "named", "app_")
    assert guard.upsert.startswith("INSERT INTO app_records (k, lock_token) VALUES (:p1, GREATEST(:p2")
    assert guard.upsert_params("d", 3) == {"p1": "d", "p2": 3, "p3": "d"}
    assert guard.select_params("d") == {"p1": "d"}
    assert SqlGuard("mysql", "format").upsert_params("d", 3) == ("d", 3, "d")
    assert SqlGuard.mark_from_insert_id(2**64 - 1) == -1
    with pytest.raises(fencing.InvalidInput):
        SqlGuard("oracle", "format")
    with pytest.raises(fencing.InvalidInput):
        SqlGuard("postgres", "pyformat")
    with pytest.raises(fencing.UnsafeConfiguration):
        guard.verdict("d", 3, None, None)


def test_what_users_pass_runs_on_a_cursor_of_its_own(tmp_path: os.PathLike[str], postgres: fencing.Store) -> None:
    """Dict rows, a server-side cursor, a DictCursor, a subclassed sqlite3
    connection, a raw SQLAlchemy connection: the fence runs on a plain
    cursor of its own on the same connection, and refuses as it should."""
    from psycopg.rows import dict_row

    mysql = fencing.open_store(env("FENCING_MYSQL_URL"))
    domain = unique("shapes")
    postgres.fence(domain, 6)
    mysql.fence(domain, 6)
    with psycopg.connect(env("FENCING_PG_URL"), row_factory=dict_row) as conn:
        with pytest.raises(fencing.StaleToken):
            fence_transaction(conn, domain, 5)
        conn.rollback()
        fence_transaction(conn.cursor(name="server-side"), domain, 7)
    assert postgres.mark(domain) == 7
    my = mysql_connect()
    fence_transaction(my.cursor(pymysql.cursors.DictCursor), domain, 8)
    my.commit()
    my.close()
    assert mysql.mark(domain) == 8

    class Mine(sqlite3.Connection):
        pass

    path = f"{tmp_path}/fencing.db"
    StoreInAnotherProcess(sqlite_url(str(tmp_path))).close()  # the tables
    lite = sqlite3.connect(path, factory=Mine)
    lite.row_factory = sqlite3.Row
    fence_transaction(lite, domain, 3)
    lite.commit()
    lite.close()
    engine = sqlalchemy.create_engine(sqlalchemy_url(env("FENCING_PG_URL")))
    with pytest.raises(fencing.InvalidInput, match="Engine"):
        fence_transaction(engine, domain, 9)
    raw = engine.raw_connection()
    fence_transaction(raw, domain, 9)
    raw.commit()
    raw.close()
    engine.dispose()
    assert postgres.mark(domain) == 9


def test_autocommit_set_on_the_engine_or_a_pipeline_is_refused(postgres: fencing.Store) -> None:
    domain = unique("engine-autocommit")
    engine = sqlalchemy.create_engine(sqlalchemy_url(env("FENCING_PG_URL")), isolation_level="AUTOCOMMIT")
    with engine.connect() as conn, conn.begin():
        with pytest.raises(fencing.InvalidInput, match="autocommit"):
            fence_transaction(conn, domain, 1)
    engine.dispose()
    with psycopg.connect(env("FENCING_PG_URL"), autocommit=True) as pg:
        with pg.pipeline():
            pg.execute("SELECT 1")
            with pytest.raises(fencing.InvalidInput, match="pipeline"):
                fence_transaction(pg, domain, 1)
    assert postgres.mark(domain) is None


def test_a_percent_encoded_sqlite_path_is_the_same_file(tmp_path: os.PathLike[str]) -> None:
    path = f"{tmp_path}/my db.db"
    store = fencing.open_store(f"sqlite://{tmp_path}/my%20db.db?mode=rwc")
    store.fence("d", 1)
    conn = sqlite3.connect(path)
    with pytest.raises(fencing.UnsafeConfiguration):
        fence_transaction(conn, "d", 2)
    conn.close()


def test_a_domain_holding_markers_and_separators_is_only_a_value(db: Db) -> None:
    """A domain with every parameter marker and separator the styles use
    (`%s`, `?`, `:p1`, `$1`, `/`, `%`): bound, never read as SQL, and the
    same row as the store's key of that name."""
    domain = unique("a/b:%s?:p1$1%") + "%"
    with db.transaction() as conn:
        fence_transaction(conn, domain, 3)
    assert db.store.mark(domain) == 3
    with pytest.raises(fencing.StaleToken):
        db.store.put(domain, b"late", 2)
    db.store.fence(domain, 5)
    with pytest.raises(fencing.StaleToken) as stale:
        with db.transaction() as conn:
            fence_transaction(conn, domain, 4)
    assert stale.value.key == domain
