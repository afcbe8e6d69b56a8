//! The statements, per dialect. Every statement binds its parameters in the
//! same order on every dialect, so the code that runs them is shared.

use crate::{Dialect, Tables};

pub(crate) fn create_tables(d: Dialect, t: &Tables) -> Vec<String> {
    let (key, blob, token, time) = match d {
        // MySQL compares VARCHAR case-insensitively by default: keys are bytes.
        Dialect::MySql => ("VARBINARY(512)", "LONGBLOB", "BIGINT", "DATETIME(6)"),
        Dialect::Postgres => ("VARCHAR(512)", "BYTEA", "BIGINT", "TIMESTAMPTZ"),
        // SQLite keeps lease expiry as integer milliseconds of its own clock.
        Dialect::Sqlite => ("TEXT", "BLOB", "INTEGER", "INTEGER"),
    };
    let granted = if d == Dialect::MySql {
        ", granted BIGINT UNSIGNED NOT NULL DEFAULT 0"
    } else {
        ""
    };
    // Not LONGBLOB on MariaDB: after `holder = IF(.., VALUES(holder), holder)`
    // a BLOB column compares equal to VALUES(holder) even when unchanged
    // (seen on MariaDB 10.11), which would hand a held lease to anyone.
    let holder = if d == Dialect::MySql {
        "VARBINARY(256)"
    } else {
        blob
    };
    vec![
        format!(
            "CREATE TABLE IF NOT EXISTS {} (k {key} NOT NULL PRIMARY KEY, v {blob}, lock_token {token} NOT NULL)",
            t.records
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {} (domain {key} NOT NULL PRIMARY KEY, lock_token {token} NOT NULL)",
            t.domains
        ),
        format!(
            "CREATE TABLE IF NOT EXISTS {} (resource {key} NOT NULL PRIMARY KEY, holder {holder}, \
             token {token} NOT NULL, expires_at {time}{granted})",
            t.leases
        ),
    ]
}

/// What a fenced upsert does to the value column when it is accepted.
#[derive(Clone, Copy)]
pub(crate) enum ValueChange {
    Set,
    Keep,
    Clear,
}

/// The fenced upsert: one statement that inserts or updates the row only if
/// the stored token is `<=` the presented one. Binds: key, value, token
/// (key, token without a value column).
///
/// PostgreSQL and SQLite return the new token (no row = refused). MySQL has
/// no `WHERE` on `ON DUPLICATE KEY UPDATE`: each column is set with
/// `IF(lock_token <= new, new, old)` (assignments run left to right, so the
/// token is updated last), and `LAST_INSERT_ID(x)` hands the resulting mark
/// back in the OK packet: equal to ours = accepted, higher = refused.
pub(crate) fn fenced_upsert(
    d: Dialect,
    table: &str,
    key_col: &str,
    value: Option<ValueChange>,
) -> String {
    match d {
        Dialect::Postgres | Dialect::Sqlite => {
            let p = |n| placeholder(d, n);
            let (cols, vals, set_v) = match value {
                None => (
                    format!("{key_col}, lock_token"),
                    format!("{}, {}", p(1), p(2)),
                    "",
                ),
                Some(change) => (
                    format!("{key_col}, v, lock_token"),
                    format!("{}, {}, {}", p(1), p(2), p(3)),
                    match change {
                        ValueChange::Set => "v = excluded.v, ",
                        ValueChange::Keep => "",
                        ValueChange::Clear => "v = NULL, ",
                    },
                ),
            };
            format!(
                "INSERT INTO {table} ({cols}) VALUES ({vals}) \
                 ON CONFLICT ({key_col}) DO UPDATE SET {set_v}lock_token = excluded.lock_token \
                 WHERE {table}.lock_token <= excluded.lock_token RETURNING lock_token"
            )
        }
        Dialect::MySql => {
            let ok = "lock_token <= VALUES(lock_token)";
            let (cols, vals, set_v) = match value {
                None => (
                    format!("{key_col}, lock_token"),
                    "?, LAST_INSERT_ID(?)",
                    String::new(),
                ),
                Some(change) => (
                    format!("{key_col}, v, lock_token"),
                    "?, ?, LAST_INSERT_ID(?)",
                    match change {
                        ValueChange::Set => format!("v = IF({ok}, VALUES(v), v), "),
                        ValueChange::Keep => String::new(),
                        ValueChange::Clear => format!("v = IF({ok}, NULL, v), "),
                    },
                ),
            };
            format!(
                "INSERT INTO {table} ({cols}) VALUES ({vals}) ON DUPLICATE KEY UPDATE \
                 {set_v}lock_token = LAST_INSERT_ID(IF({ok}, VALUES(lock_token), lock_token))"
            )
        }
    }
}

/// Binds: key.
pub(crate) fn select_mark(d: Dialect, table: &str, key_col: &str) -> String {
    format!(
        "SELECT lock_token FROM {table} WHERE {key_col} = {}",
        placeholder(d, 1)
    )
}

/// Binds: key.
pub(crate) fn select_record(d: Dialect, table: &str) -> String {
    format!(
        "SELECT v, lock_token FROM {table} WHERE k = {}",
        placeholder(d, 1)
    )
}

/// The database's clock, and a TTL added to it (the TTL is bound in
/// [`ttl_units`]).
fn now_and_later(d: Dialect, ttl_param: usize) -> (&'static str, String) {
    let p = placeholder(d, ttl_param);
    match d {
        Dialect::Postgres => (
            "now()",
            format!("now() + {p}::float8 * interval '1 millisecond'"),
        ),
        Dialect::MySql => ("NOW(6)", format!("NOW(6) + INTERVAL {p} MICROSECOND")),
        Dialect::Sqlite => {
            const NOW: &str = "CAST((julianday('now') - 2440587.5) * 86400000.0 AS INTEGER)";
            (NOW, format!("{NOW} + {p}"))
        }
    }
}

/// A TTL in the unit the dialect's expiry arithmetic uses.
pub(crate) fn ttl_units(d: Dialect, ttl: std::time::Duration) -> i64 {
    let units = match d {
        Dialect::MySql => ttl.as_micros(),
        Dialect::Postgres | Dialect::Sqlite => ttl.as_millis().max(1),
    };
    i64::try_from(units).unwrap_or(i64::MAX)
}

/// Takes the lease row if it is free, expired or already ours; a new holder
/// gets `token + 1`, the same live holder keeps its token. Binds: resource,
/// holder, ttl. Returns the token (PostgreSQL, SQLite; no row = held), or on
/// MySQL puts it in `LAST_INSERT_ID`, with [`MYSQL_HELD_BIT`] set when the
/// lease is held by someone else (MySQL ignores `LAST_INSERT_ID(0)`, so
/// "not granted" needs a non-zero value).
pub(crate) fn acquire(d: Dialect, t: &str) -> String {
    let (now, later) = now_and_later(d, 3);
    match d {
        Dialect::Postgres | Dialect::Sqlite => {
            let (p1, p2) = (placeholder(d, 1), placeholder(d, 2));
            format!(
                "INSERT INTO {t} (resource, holder, token, expires_at) VALUES ({p1}, {p2}, 1, {later}) \
                 ON CONFLICT (resource) DO UPDATE SET \
                 token = CASE WHEN {t}.holder = excluded.holder AND {t}.expires_at > {now} \
                         THEN {t}.token ELSE {t}.token + 1 END, \
                 holder = excluded.holder, expires_at = excluded.expires_at \
                 WHERE {t}.holder IS NULL OR {t}.expires_at <= {now} OR {t}.holder = excluded.holder \
                 RETURNING token"
            )
        }
        // Assignments run left to right and see the columns already set:
        // the token first (from the old holder and expiry), then the
        // holder, then the expiry and the result keyed off the new holder.
        Dialect::MySql => format!(
            "INSERT INTO {t} (resource, holder, token, expires_at, granted) \
             VALUES (?, ?, 1, {later}, LAST_INSERT_ID(1)) ON DUPLICATE KEY UPDATE \
             token = IF(holder <=> VALUES(holder) AND expires_at > {now}, token, \
                        IF(holder IS NULL OR expires_at <= {now}, token + 1, token)), \
             holder = IF(holder IS NULL OR expires_at <= {now} OR holder <=> VALUES(holder), VALUES(holder), holder), \
             expires_at = IF(holder <=> VALUES(holder), VALUES(expires_at), expires_at), \
             granted = LAST_INSERT_ID(token | IF(holder <=> VALUES(holder), 0, {MYSQL_HELD_BIT}))"
        ),
    }
}

/// Raises a free resource's counter to at least the floor (a live holder's
/// row is left alone: its token is its lease). Binds: resource, floor.
/// One row changed or inserted = raised (or already above).
pub(crate) fn raise_floor(d: Dialect, t: &str) -> String {
    let (now, _) = now_and_later(d, 9);
    match d {
        Dialect::Postgres | Dialect::Sqlite => {
            let (p1, p2) = (placeholder(d, 1), placeholder(d, 2));
            let greatest = if d == Dialect::Sqlite {
                "MAX"
            } else {
                "GREATEST"
            };
            format!(
                "INSERT INTO {t} (resource, holder, token, expires_at) VALUES ({p1}, NULL, {p2}, NULL) \
                 ON CONFLICT (resource) DO UPDATE SET token = {greatest}({t}.token, excluded.token) \
                 WHERE {t}.holder IS NULL OR {t}.expires_at <= {now} RETURNING token"
            )
        }
        // The token is only raised while the lease is free; LAST_INSERT_ID
        // reports whether it was (the held bit) as for acquire.
        Dialect::MySql => format!(
            "INSERT INTO {t} (resource, holder, token, expires_at, granted) VALUES (?, NULL, ?, NULL, LAST_INSERT_ID(1)) \
             ON DUPLICATE KEY UPDATE \
             granted = LAST_INSERT_ID(IF(holder IS NULL OR expires_at <= {now}, 1, {MYSQL_HELD_BIT})), \
             token = IF(holder IS NULL OR expires_at <= {now}, GREATEST(token, VALUES(token)), token)"
        ),
    }
}

/// Tokens fit in 63 bits, so the top bit can say "held by someone else".
pub(crate) const MYSQL_HELD_BIT: u64 = 1 << 63;

/// Binds: ttl, resource, holder, token. One row changed = renewed.
pub(crate) fn renew(d: Dialect, t: &str) -> String {
    let (now, later) = now_and_later(d, 1);
    let p = |n| placeholder(d, n);
    format!(
        "UPDATE {t} SET expires_at = {later} WHERE resource = {} AND holder = {} AND token = {} AND expires_at > {now}",
        p(2),
        p(3),
        p(4)
    )
}

/// Binds: resource, holder, token. One row changed = released.
pub(crate) fn release(d: Dialect, t: &str) -> String {
    let (now, _) = now_and_later(d, 9);
    let p = |n| placeholder(d, n);
    format!(
        "UPDATE {t} SET holder = NULL, expires_at = NULL \
         WHERE resource = {} AND holder = {} AND token = {} AND expires_at > {now}",
        p(1),
        p(2),
        p(3)
    )
}

/// Binds: resource. Returns holder, token of a live lease.
pub(crate) fn holder(d: Dialect, t: &str) -> String {
    let (now, _) = now_and_later(d, 9);
    format!(
        "SELECT holder, token FROM {t} WHERE resource = {} AND holder IS NOT NULL AND expires_at > {now}",
        placeholder(d, 1)
    )
}

fn placeholder(d: Dialect, n: usize) -> String {
    match d {
        Dialect::Postgres => format!("${n}"),
        Dialect::MySql | Dialect::Sqlite => "?".to_owned(),
    }
}
