"""Fence a transaction on a database connection your program already holds.

``fence_transaction(conn, domain, token)`` is the Rust
``fencing_sql::fence_transaction`` for psycopg 3, PyMySQL, sqlite3 and
SQLAlchemy: one statement, first in the transaction, raises the domain's
mark to ``token`` and keeps its row locked until the transaction ends, or
raises ``StaleToken`` if a higher token fenced the domain (roll back). The
statement and the verdict come from the Rust crate; the marks are the ones
a ``Store`` on the same database keeps, so a ``store.fence(domain, 6)``
refuses this guard's 5 and this guard's 6 refuses ``store.put(domain, …,
5)``::

    import psycopg
    from fencing.sql import fence_transaction

    with psycopg.connect(dsn) as conn:  # a transaction until the block ends
        fence_transaction(conn, "orders", held.token)
        conn.execute("UPDATE orders SET status = 'shipped' WHERE id = %s", (7,))

Every write the transaction makes after the fence commits only if no
higher token fenced the domain first; a zombie's transaction waits for the
current holder's to end and is then refused. A connection in autocommit
mode (outside an explicit transaction) is refused with ``InvalidInput``:
the fence would commit on its own and fence nothing. Errors of the
connection itself are the driver's own exceptions.

On SQLite begin the transaction with ``BEGIN IMMEDIATE`` when other writers
share the file (or let the fence be its first statement).

Fence in the outermost transaction, not inside a savepoint (psycopg's
nested ``conn.transaction()``, SQLAlchemy's ``begin_nested()``): rolling
back to the savepoint undoes the fence (the domain's mark, and on
PostgreSQL its row lock) while the transaction goes on unfenced.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

from ._native import Lease, SqlGuard, sqlite_file_in_use
from .errors import InvalidInput, UnsafeConfiguration

__all__ = ["fence_transaction"]

# The drivers under SQLAlchemy whose transaction state is checked.
_SQLALCHEMY_DRIVERS = {"psycopg": "psycopg", "pymysql": "pymysql", "pysqlite": "sqlite3"}

# Each driver: its dialect and parameter style.
_DRIVERS = {"psycopg": ("postgres", "format"), "pymysql": ("mysql", "format"), "sqlite3": ("sqlite", "qmark")}

# The status bit MySQL reports while a transaction is open.
_MYSQL_IN_TRANS = 1

_OUTSIDE = (
    "open a transaction first (psycopg: `with conn.transaction():` or autocommit off, PyMySQL: "
    "`conn.begin()` or autocommit off, sqlite3: `BEGIN IMMEDIATE` or the default isolation)"
)


def _driver(obj: object) -> str | None:
    """The driver of a DB-API connection: its class's, or a base class's
    (a subclass, a `factory=`)."""
    for cls in type(obj).__mro__:
        root = cls.__module__.split(".")[0]
        if root in _DRIVERS:
            return root
    return None


def fence_transaction(
    conn: Any,
    domain: str,
    token: int | Lease,
    *,
    table_prefix: str = "fencing_",
) -> None:
    """Fences the transaction open on ``conn`` with ``token`` in ``domain``.

    ``conn`` is a psycopg 3 ``Connection`` or ``Cursor``, a PyMySQL
    ``Connection`` or ``Cursor``, a ``sqlite3.Connection`` or ``Cursor``,
    or a SQLAlchemy ``Connection`` or ``Session`` on one of those drivers
    (PostgreSQL, MySQL, MariaDB or SQLite). The fence runs on a cursor of
    its own on the same connection, so the caller's cursor and row factory
    are left alone. ``table_prefix`` names the tables as the store's
    ``fencing_table_prefix`` URL option does.

    Raises ``StaleToken`` (``presented``, ``current``): a higher token fenced
    the domain; roll back. ``InvalidInput``: an empty domain, one over 512
    bytes or holding NUL, a token that is not an int or a ``Lease``, a
    connection outside a transaction (autocommit), or one this function
    does not know. ``TokenOutOfRange`` above 2**63 - 1. ``BackendError`` if
    the row holds a negative mark (another program's data).
    ``UnsafeConfiguration`` if the upsert wrote nothing and no higher mark
    explains it (a trigger or rule drops writes): the domain was not fenced.
    The connection's own errors are the driver's exceptions.
    """
    if inspect.iscoroutinefunction(getattr(conn, "execute", None)):
        raise InvalidInput("an async connection: fence_transaction takes a synchronous one")
    if _driver(conn) is None and type(conn).__module__.split(".")[0] == "sqlalchemy":
        if hasattr(conn, "raw_connection"):
            raise InvalidInput(
                "a SQLAlchemy Engine is not a transaction: pass the Connection of `with engine.begin() "
                "as conn:` (or a Session)"
            )
        if hasattr(conn, "dbapi_connection"):  # engine.raw_connection()
            conn = conn.dbapi_connection
        else:
            _fence_sqlalchemy(conn, domain, token, table_prefix)
            return
    # A cursor: the fence runs on a cursor of its own on the same connection.
    connection = conn if callable(getattr(conn, "cursor", None)) else getattr(conn, "connection", None)
    driver = _driver(connection)
    if driver is None:
        raise InvalidInput(
            f"fence_transaction takes a psycopg, PyMySQL, sqlite3 or SQLAlchemy connection, "
            f"got {type(conn).__module__}.{type(conn).__qualname__}"
        )
    dialect, paramstyle = _DRIVERS[driver]
    _refuse_outside_transaction(connection, driver)
    guard = SqlGuard(dialect, paramstyle, table_prefix)
    cursor = _plain_cursor(connection, driver)

    def execute(sql: str, params: Any) -> Any:
        cursor.execute(sql, params)  # PyMySQL returns a row count, not the cursor
        return cursor

    try:
        _run(guard, domain, token, execute, connection, driver)
    finally:
        cursor.close()


def _run(
    guard: SqlGuard,
    domain: str,
    token: int | Lease,
    execute: Callable[[str, Any], Any],
    dbapi_connection: Any,
    driver: str,
) -> None:
    """The guard's statements through ``execute(sql, params)``, whose answer
    has ``fetchone()`` and ``lastrowid`` (a DB-API cursor, a SQLAlchemy
    result), then the verdict."""
    params = guard.upsert_params(domain, token)  # bad input: nothing has run
    answer = execute(guard.upsert, params)
    written = (
        SqlGuard.mark_from_insert_id(answer.lastrowid) if guard.dialect == "mysql" else _first(answer.fetchone())
    )
    _check_inside_transaction(dbapi_connection, driver)
    read = None if written is not None else _first(execute(guard.select_mark, guard.select_params(domain)).fetchone())
    guard.verdict(domain, token, written, read)


def _first(row: Any) -> int | None:
    return None if row is None else int(row[0])


def _plain_cursor(connection: Any, driver: str) -> Any:
    """A cursor with rows as tuples and the driver's own parameter style,
    whatever the connection's factories make."""
    if driver == "psycopg":
        import psycopg
        from psycopg.rows import tuple_row

        return psycopg.Cursor(connection, row_factory=tuple_row)
    if driver == "pymysql":
        # Only `lastrowid` is read: any PyMySQL cursor class reports it.
        return connection.cursor()
    cursor = connection.cursor()
    cursor.row_factory = None
    return cursor


def _refuse_outside_transaction(connection: Any, driver: str) -> None:
    """InvalidInput before anything runs if a statement on ``connection``
    would commit on its own: the fence would hold for that statement only."""
    outside = False
    if driver == "psycopg":
        if int(connection.info.pipeline_status) != 0:
            raise InvalidInput("a psycopg connection in pipeline mode: fence outside the pipeline")
        # IDLE: no transaction open (INTRANS inside `with conn.transaction()`).
        outside = bool(connection.autocommit) and int(connection.info.transaction_status) == 0
    elif driver == "pymysql":
        in_transaction = bool(connection.server_status & _MYSQL_IN_TRANS)
        outside = bool(connection.get_autocommit()) and not in_transaction
    elif driver == "sqlite3":
        import sqlite3

        _refuse_second_sqlite(connection)
        if not connection.in_transaction:
            # Python 3.12's `autocommit`: with True no BEGIN is implicit; with
            # False one opens only at connect and after commit()/rollback(),
            # so none is coming now. Before it (or with the legacy control),
            # isolation_level None turns the implicit BEGIN off.
            legacy = getattr(sqlite3, "LEGACY_TRANSACTION_CONTROL", -1)
            mode = getattr(connection, "autocommit", legacy)
            outside = mode != legacy or connection.isolation_level is None
    if outside:
        raise InvalidInput(
            f"the connection is in autocommit mode: the fence would commit on its own and fence nothing; {_OUTSIDE}"
        )


def _check_inside_transaction(connection: Any, driver: str) -> None:
    """After the upsert: a transaction must be open, or the fence committed
    on its own (a state the checks before it could not see)."""
    if driver == "psycopg":
        inside = int(connection.info.transaction_status) == 2  # INTRANS
    elif driver == "pymysql":
        inside = bool(connection.server_status & _MYSQL_IN_TRANS)  # from the upsert's OK packet
    else:
        inside = bool(connection.in_transaction)
    if not inside:
        raise InvalidInput(
            "the fence ran outside a transaction and committed on its own: the domain's mark is "
            f"raised, but nothing this connection writes next is fenced; {_OUTSIDE}"
        )


def _refuse_second_sqlite(connection: Any) -> None:
    """UnsafeConfiguration if this process also has a fencing store or
    issuer open on the file: Python's sqlite3 and the wheel are two copies
    of SQLite, and two copies in one process release each other's POSIX
    locks whenever either closes the file (SQLite's "How To Corrupt An
    SQLite Database File", 2.2.1): reads go stale and locks stop holding."""
    cursor = connection.cursor()
    cursor.row_factory = None
    try:
        rows = cursor.execute("PRAGMA database_list").fetchall()
    finally:
        cursor.close()
    for _, name, path in rows:
        if name == "main" and path and sqlite_file_in_use(path):
            reason = (
                f"this process has a fencing store or issuer open on {path} and a sqlite3 connection "
                "to it: two copies of SQLite in one process release each other's file locks; "
                "keep the fencing store in another process, or fence with fence_transaction alone"
            )
            raise UnsafeConfiguration(reason, backend="sqlite")


def _fence_sqlalchemy(conn: Any, domain: str, token: int | Lease, table_prefix: str) -> None:
    from sqlalchemy import text

    # A Session's connection begins the session's transaction if none is.
    bind = conn.connection() if callable(getattr(conn, "connection", None)) else conn
    driver = _SQLALCHEMY_DRIVERS.get(bind.dialect.driver)
    if driver is None:
        raise InvalidInput(
            f"fence_transaction runs under SQLAlchemy on psycopg, pymysql or pysqlite (whose "
            f"transactions it can check), not {bind.dialect.name}+{bind.dialect.driver}"
        )
    if bind.get_execution_options().get("isolation_level") == "AUTOCOMMIT":
        raise InvalidInput(
            "the connection is in AUTOCOMMIT isolation: the fence would commit on its own and fence nothing"
        )
    dbapi_connection = bind.connection.dbapi_connection
    _refuse_outside_transaction(dbapi_connection, driver)
    guard = SqlGuard(_DRIVERS[driver][0], "named", table_prefix)
    _run(guard, domain, token, lambda sql, params: bind.execute(text(sql), params), dbapi_connection, driver)
