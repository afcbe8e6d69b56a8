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
"""

from __future__ import annotations

import inspect
import threading
from typing import Any

from ._native import Lease, SqlGuard, sqlite_file_in_use
from .errors import InvalidInput, UnsafeConfiguration

__all__ = ["fence_transaction"]

# One guard per (dialect, paramstyle, prefix): the statements are rendered once.
_guards: dict[tuple[str, str, str], SqlGuard] = {}
_guards_lock = threading.Lock()

# SQLAlchemy's dialect names, to the guard's.
_SQLALCHEMY_DIALECTS = {"postgresql": "postgres", "mysql": "mysql", "mariadb": "mysql", "sqlite": "sqlite"}

# The status bit PyMySQL reports while a transaction is open.
_MYSQL_IN_TRANS = 1


def _guard(dialect: str, paramstyle: str, table_prefix: str) -> SqlGuard:
    key = (dialect, paramstyle, table_prefix)
    with _guards_lock:
        guard = _guards.get(key)
        if guard is None:
            guard = _guards[key] = SqlGuard(dialect, paramstyle, table_prefix)
        return guard


def _root(obj: object) -> str:
    return type(obj).__module__.split(".")[0]


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
    or a SQLAlchemy ``Connection`` or ``Session`` (on PostgreSQL, MySQL,
    MariaDB or SQLite). ``table_prefix`` names the tables as the store's
    ``fencing_table_prefix`` URL option does.

    Raises ``StaleToken`` (``presented``, ``current``): a higher token fenced
    the domain; roll back. ``InvalidInput``: an empty domain, one over 512
    bytes or holding NUL, a token that is not an int or a ``Lease``, a
    connection in autocommit mode, or one of another driver.
    ``TokenOutOfRange`` above 2**63 - 1. ``BackendError`` if the row holds
    a negative mark (another program's data). ``UnsafeConfiguration`` if the
    upsert wrote nothing and no higher mark explains it (a trigger or rule
    drops writes): the domain was not fenced.
    """
    if inspect.iscoroutinefunction(getattr(conn, "execute", None)):
        raise InvalidInput("an async connection: fence_transaction takes a synchronous one")
    root = _root(conn)
    if root == "sqlalchemy":
        _fence_sqlalchemy(conn, domain, token, table_prefix)
        return
    dialect, paramstyle = {
        "psycopg": ("postgres", "format"),
        "pymysql": ("mysql", "format"),
        "sqlite3": ("sqlite", "qmark"),
    }.get(root, ("", ""))
    if not dialect:
        raise InvalidInput(
            f"fence_transaction takes a psycopg, PyMySQL, sqlite3 or SQLAlchemy connection, "
            f"got {type(conn).__module__}.{type(conn).__qualname__}"
        )
    given_cursor = not callable(getattr(conn, "cursor", None))
    _refuse_autocommit(conn.connection if given_cursor else conn)
    guard = _guard(dialect, paramstyle, table_prefix)
    params = guard.upsert_params(domain, token)
    cursor = conn if given_cursor else conn.cursor()
    try:
        cursor.execute(guard.upsert, params)
        if dialect == "mysql":
            guard.verdict(domain, token, SqlGuard.mark_from_insert_id(cursor.lastrowid))
            return
        row = cursor.fetchone()
        if row is not None:
            guard.verdict(domain, token, row[0])
            return
        cursor.execute(guard.select_mark, guard.select_params(domain))
        row = cursor.fetchone()
        guard.verdict(domain, token, None, None if row is None else row[0])
    finally:
        if not given_cursor:
            cursor.close()


def _refuse_autocommit(dbapi_connection: Any) -> None:
    """InvalidInput if a statement on ``dbapi_connection`` would commit on
    its own: the fence would hold for that statement only."""
    root = _root(dbapi_connection)
    autocommit = False
    if root == "psycopg":
        # IDLE: no transaction open (INTRANS inside `with conn.transaction()`).
        autocommit = bool(dbapi_connection.autocommit) and int(dbapi_connection.info.transaction_status) == 0
    elif root == "pymysql":
        in_transaction = bool(dbapi_connection.server_status & _MYSQL_IN_TRANS)
        autocommit = bool(dbapi_connection.get_autocommit()) and not in_transaction
    elif root == "sqlite3":
        if not dbapi_connection.in_transaction:
            # Python 3.12's `autocommit` (True: no implicit BEGIN); before it,
            # isolation_level None turns the implicit BEGIN off.
            mode = getattr(dbapi_connection, "autocommit", None)
            autocommit = mode is True or (mode not in (True, False) and dbapi_connection.isolation_level is None)
    if root == "sqlite3":
        _refuse_second_sqlite(dbapi_connection)
    if autocommit:
        raise InvalidInput(
            "the connection is in autocommit mode: the fence would commit on its own and fence "
            "nothing; open a transaction first (psycopg: `with conn.transaction():`, PyMySQL: "
            "`conn.begin()`, sqlite3: `BEGIN IMMEDIATE`)"
        )


def _refuse_second_sqlite(connection: Any) -> None:
    """UnsafeConfiguration if this process also has a fencing store or
    issuer open on the file: Python's sqlite3 and the wheel are two copies
    of SQLite, and two copies in one process release each other's POSIX
    locks whenever either closes the file (SQLite's "How To Corrupt An
    SQLite Database File", 2.2.1): reads go stale and locks stop holding."""
    for _, name, path in connection.execute("PRAGMA database_list").fetchall():
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
    name = bind.dialect.name
    dialect = _SQLALCHEMY_DIALECTS.get(name)
    if dialect is None:
        raise InvalidInput(f"fence_transaction runs on PostgreSQL, MySQL, MariaDB or SQLite, not {name}")
    if bind.get_execution_options().get("isolation_level") == "AUTOCOMMIT":
        raise InvalidInput(
            "the connection is in AUTOCOMMIT isolation: the fence would commit on its own and "
            "fence nothing"
        )
    _refuse_autocommit(bind.connection.dbapi_connection)
    guard = _guard(dialect, "named", table_prefix)
    result = bind.execute(text(guard.upsert), guard.upsert_params(domain, token))
    if dialect == "mysql":
        guard.verdict(domain, token, SqlGuard.mark_from_insert_id(result.lastrowid))
        return
    row = result.fetchone()
    if row is not None:
        guard.verdict(domain, token, row[0])
        return
    row = bind.execute(text(guard.select_mark), guard.select_params(domain)).fetchone()
    guard.verdict(domain, token, None, None if row is None else row[0])
