//! The statements, per dialect. Every statement binds its parameters in the
//! same order on every dialect, so the code that runs them is shared.

use crate::{Dialect, Tables};

pub(crate) fn create_tables(d: Dialect, t: &Tables) -> Vec<String> {
    let (key, blob, token, time) = match d {
        // MySQL compares VARCHAR case-insensitively by default: keys are bytes.
        // DATETIME has no zone: it holds UTC_TIMESTAMP(6), never NOW(6).
        Dialect::MySql => ("VARBINARY(512)", "LONGBLOB", "BIGINT", "DATETIME(6)"),
        // An instant: comparing it with now() ignores the session's TimeZone.
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
    let expires = expiry_column(d);
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
             token {token} NOT NULL, {expires} {time}{granted})",
            t.leases
        ),
        // The store's floor, made with the tables (at -1: none) so that a
        // write always finds the row to lock: a write that found no row
        // would hold no lock for the first raise to wait for.
        match d {
            Dialect::MySql => format!(
                "INSERT IGNORE INTO {} (domain, lock_token) VALUES ('', -1)",
                t.domains
            ),
            Dialect::Postgres | Dialect::Sqlite => format!(
                "INSERT INTO {} (domain, lock_token) VALUES ('', -1) ON CONFLICT (domain) DO NOTHING",
                t.domains
            ),
        },
    ]
}

/// The store's floor (`FencedStore::raise_floor`): the mark of the empty
/// name in the domains table, a name no key and no fence domain can have.
/// Read with a share lock where the server has row locks: raising it
/// takes the row's exclusive lock, so it waits for every write that read
/// the old floor, and every write after it reads the new one. That is what
/// makes removing the marks under it safe: no write judged by an older
/// floor can land after the removal. `-1` when none was raised.
fn floor(d: Dialect, t: &Tables) -> String {
    let lock = match d {
        Dialect::Postgres => " FOR SHARE",
        Dialect::MySql => " LOCK IN SHARE MODE",
        Dialect::Sqlite => "",
    };
    format!(
        "COALESCE((SELECT lock_token FROM {} WHERE domain = ''{lock}), -1)",
        t.domains
    )
}

/// Reads the floor (`-1` or no row: none). No binds.
pub(crate) fn select_floor(t: &Tables) -> String {
    format!("SELECT lock_token FROM {} WHERE domain = ''", t.domains)
}

/// Raises the floor, never lowers it; the caller reads it back to tell a
/// refused lowering. Binds: floor.
pub(crate) fn raise_store_floor(d: Dialect, t: &Tables) -> String {
    let dt = &t.domains;
    match d {
        Dialect::MySql => format!(
            "INSERT INTO {dt} (domain, lock_token) VALUES ('', ?) \
             ON DUPLICATE KEY UPDATE lock_token = GREATEST(lock_token, VALUES(lock_token))"
        ),
        Dialect::Postgres | Dialect::Sqlite => {
            let greatest = if d == Dialect::Sqlite {
                "MAX"
            } else {
                "GREATEST"
            };
            format!(
                "INSERT INTO {dt} (domain, lock_token) VALUES ('', {}) ON CONFLICT (domain) \
                 DO UPDATE SET lock_token = {greatest}({dt}.lock_token, excluded.lock_token)",
                placeholder(d, 1)
            )
        }
    }
}

/// Removes up to the bound number of records the floor covers: no value,
/// a mark at or below it. The conditions are on the delete itself, so a
/// row written meanwhile (a value, a higher mark) is re-checked and kept.
/// Binds: the most to remove.
pub(crate) fn remove_floored(d: Dialect, t: &Tables) -> String {
    let r = &t.records;
    let covered = format!(
        "v IS NULL AND lock_token >= 0 AND lock_token <= (SELECT lock_token FROM {} WHERE domain = '')",
        t.domains
    );
    match d {
        // MariaDB has no LIMIT in an IN subquery; its DELETE takes one.
        Dialect::MySql => format!("DELETE FROM {r} WHERE {covered} LIMIT ?"),
        Dialect::Postgres | Dialect::Sqlite => format!(
            "DELETE FROM {r} WHERE {covered} AND k IN (SELECT k FROM {r} WHERE {covered} LIMIT {})",
            placeholder(d, 1)
        ),
    }
}

/// A key's mark and the floor, read to name what refused a write. Binds:
/// key.
pub(crate) fn select_mark_and_floor(d: Dialect, t: &Tables) -> String {
    format!(
        "SELECT (SELECT lock_token FROM {} WHERE k = {}), (SELECT lock_token FROM {} WHERE domain = '')",
        t.records,
        placeholder(d, 1),
        t.domains
    )
}

/// The lease table's expiry column. On MySQL it was `expires_at` holding
/// `NOW(6)`, the session's local time; the zone-free column has a new name
/// so that an older release fails loudly on a migrated table ("unknown
/// column") instead of misreading it.
pub(crate) fn expiry_column(d: Dialect) -> &'static str {
    match d {
        Dialect::MySql => "expires_at_utc",
        Dialect::Postgres | Dialect::Sqlite => "expires_at",
    }
}

/// The lease clock as named in messages and `verify`.
pub(crate) fn clock_name(d: Dialect) -> &'static str {
    match d {
        Dialect::Postgres => "now()",
        Dialect::MySql => "UTC_TIMESTAMP(6)",
        Dialect::Sqlite => "julianday('now')",
    }
}

/// Reads the lease table's columns as (name, type). Binds: table name.
pub(crate) fn lease_columns(d: Dialect) -> &'static str {
    match d {
        // Resolved like the statements resolve the name (search_path).
        Dialect::Postgres => {
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod) FROM pg_attribute a \
             WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped"
        }
        Dialect::MySql => {
            "SELECT CAST(COLUMN_NAME AS CHAR), CAST(DATA_TYPE AS CHAR) FROM information_schema.COLUMNS \
             WHERE TABLE_SCHEMA = DATABASE() AND TABLE_NAME = ?"
        }
        Dialect::Sqlite => "SELECT name, type FROM pragma_table_info(?)",
    }
}

/// What a fenced upsert does to the value column when it is accepted.
#[derive(Clone, Copy)]
pub(crate) enum ValueChange {
    Set,
    Keep,
    Clear,
}

/// The fenced upsert of the records table: one statement that inserts or
/// updates the row only if the token is above the store's [`floor`] and
/// the stored token is `<=` it. Binds: key, value, token, token.
///
/// The row to write is a `SELECT` of the bound values that the floor's
/// `WHERE` filters (the token is bound twice: MySQL's markers cannot name a
/// parameter twice), so a token at or below the floor writes nothing, on a
/// key that has no row too, and the statement reports no mark. Not a
/// derived table: MariaDB materialises one per statement, which made a
/// put 1.8 times the plain upsert's time here, against 1.15 for this form.
/// PostgreSQL and SQLite return the new token (no row = refused). MySQL has
/// no `WHERE` on `ON DUPLICATE KEY UPDATE`: each column is set with
/// `IF(lock_token <= new, new, old)` (assignments run left to right, so the
/// token is updated last), and `LAST_INSERT_ID(x)` hands the resulting mark
/// back in the OK packet: equal to ours = accepted, higher = refused; no
/// row affected = refused by the floor.
pub(crate) fn fenced_upsert(d: Dialect, t: &Tables, value: ValueChange) -> String {
    let m = |n| placeholder(d, n);
    let token = if d == Dialect::MySql {
        format!("LAST_INSERT_ID({})", m(3))
    } else {
        m(3)
    };
    let dual = if d == Dialect::MySql {
        " FROM DUAL"
    } else {
        ""
    };
    let row = format!(
        "SELECT {}, {}, {token}{dual} WHERE {} > {}",
        m(1),
        m(2),
        m(4),
        floor(d, t)
    );
    upsert(
        d,
        ParamStyle::of(d),
        &t.records,
        Some(value),
        Source::Select(&row),
    )
}

/// The transaction guard's upsert: the same statement on the same row of
/// the records table as [`fenced_upsert`], value untouched (a row it
/// creates has no value, as a fence's), so the guard and the store share
/// one mark per name. The new mark is at least the name's mark in the
/// legacy domains table, where earlier releases kept the guard's marks: a
/// token below that one is answered with it, as stale, in the same
/// statement. (A negative legacy mark is not foreign data here; carrying
/// it over is [`carry_legacy_mark`]'s.) Binds: key, token, key, marked in
/// `style` (a driver outside sqlx may mark them its own way).
pub(crate) fn guard_upsert(d: Dialect, t: &Tables, style: ParamStyle) -> String {
    let greatest = if d == Dialect::Sqlite {
        "MAX"
    } else {
        "GREATEST"
    };
    let token = format!(
        "{greatest}({}, COALESCE((SELECT lock_token FROM {} WHERE domain = {}), 0), {} + 1)",
        style.marker(2),
        t.domains,
        style.marker(3),
        floor(d, t)
    );
    upsert(d, style, &t.records, None, Source::Values(&token))
}

/// Where an upsert's new row comes from.
enum Source<'a> {
    /// `VALUES (key, [value,] token)`, `token` being the new mark's
    /// expression.
    Values(&'a str),
    /// A whole `SELECT` of the new row.
    Select(&'a str),
}

/// The upsert of `table` from `source`; with `Values`, the key is the
/// first parameter, the value (if any) the second.
fn upsert(
    d: Dialect,
    style: ParamStyle,
    table: &str,
    value: Option<ValueChange>,
    source: Source<'_>,
) -> String {
    let cols = match value {
        None => "k, lock_token",
        Some(_) => "k, v, lock_token",
    };
    let mark = |token: &str| {
        if d == Dialect::MySql {
            format!("LAST_INSERT_ID({token})")
        } else {
            token.to_owned()
        }
    };
    let row = match source {
        Source::Values(token) => {
            let vals = match value {
                None => format!("{}, ", style.marker(1)),
                Some(_) => format!("{}, {}, ", style.marker(1), style.marker(2)),
            };
            format!("VALUES ({vals}{})", mark(token))
        }
        Source::Select(select) => select.to_owned(),
    };
    match d {
        Dialect::Postgres | Dialect::Sqlite => {
            let set_v = match value {
                Some(ValueChange::Set) => "v = excluded.v, ",
                Some(ValueChange::Clear) => "v = NULL, ",
                Some(ValueChange::Keep) | None => "",
            };
            format!(
                "INSERT INTO {table} ({cols}) {row} \
                 ON CONFLICT (k) DO UPDATE SET {set_v}lock_token = excluded.lock_token \
                 WHERE {table}.lock_token <= excluded.lock_token AND {table}.lock_token >= 0 \
                 RETURNING lock_token"
            )
        }
        Dialect::MySql => {
            // A negative mark is foreign data: never overwritten.
            let ok = "lock_token <= VALUES(lock_token) AND lock_token >= 0";
            let set_v = match value {
                Some(ValueChange::Set) => format!("v = IF({ok}, VALUES(v), v), "),
                Some(ValueChange::Clear) => format!("v = IF({ok}, NULL, v), "),
                Some(ValueChange::Keep) | None => String::new(),
            };
            // LAST_INSERT_ID carries the resulting mark back. It is
            // unsigned: a foreign negative mark is reported as `~0`
            // (u64::MAX, read back as -1) and left in place.
            format!(
                "INSERT INTO {table} ({cols}) {row} ON DUPLICATE KEY UPDATE \
                 {set_v}lock_token = IF(LAST_INSERT_ID(IF({ok}, CAST(VALUES(lock_token) AS UNSIGNED), \
                 IF(lock_token < 0, ~0, CAST(lock_token AS UNSIGNED)))) = ~0, \
                 lock_token, CAST(LAST_INSERT_ID() AS SIGNED))"
            )
        }
    }
}

/// Binds: key.
pub(crate) fn select_mark(d: Dialect, table: &str) -> String {
    select_mark_in(ParamStyle::of(d), table)
}

/// [`select_mark`] with its parameter marked in `style`.
pub(crate) fn select_mark_in(style: ParamStyle, table: &str) -> String {
    format!(
        "SELECT lock_token FROM {table} WHERE k = {}",
        style.marker(1)
    )
}

/// The legacy domains table's marks that the records table does not hold
/// yet: names with no record, or a record whose (non-negative) mark is
/// lower. Returns name, mark. Empty once carried over, so opening the
/// tables again writes nothing.
pub(crate) fn legacy_marks(d: Dialect, t: &Tables) -> String {
    // VARBINARY on MySQL: read back as text, as the guard bound it.
    let name = if d == Dialect::MySql {
        "CAST(d.domain AS CHAR)"
    } else {
        "d.domain"
    };
    format!(
        "SELECT {name}, d.lock_token FROM {} d LEFT JOIN {} r ON r.k = d.domain \
         WHERE d.domain <> '' AND (r.k IS NULL OR (r.lock_token >= 0 AND r.lock_token < d.lock_token))",
        t.domains, t.records
    )
}

/// Carries one legacy mark into the records table: the higher of the two
/// wins; a negative (foreign) legacy mark is carried only to a name with no
/// record, and a negative record is left as it is. Binds: key, mark.
pub(crate) fn carry_legacy_mark(d: Dialect, t: &Tables) -> String {
    let r = &t.records;
    match d {
        Dialect::Postgres | Dialect::Sqlite => format!(
            "INSERT INTO {r} (k, lock_token) VALUES ({}, {}) ON CONFLICT (k) DO UPDATE \
             SET lock_token = excluded.lock_token \
             WHERE {r}.lock_token >= 0 AND {r}.lock_token < excluded.lock_token",
            placeholder(d, 1),
            placeholder(d, 2)
        ),
        Dialect::MySql => format!(
            "INSERT INTO {r} (k, lock_token) VALUES (?, ?) ON DUPLICATE KEY UPDATE \
             lock_token = IF(lock_token >= 0 AND lock_token < VALUES(lock_token), VALUES(lock_token), lock_token)"
        ),
    }
}

/// Binds: key.
pub(crate) fn select_record(d: Dialect, table: &str) -> String {
    format!(
        "SELECT v, lock_token FROM {table} WHERE k = {}",
        placeholder(d, 1)
    )
}

/// The database's clock, and a TTL added to it (the TTL is bound in
/// [`ttl_units`]). Every clock here is zone-free: the session's time zone
/// (or a DST change) must not move a lease's expiry.
fn now_and_later(d: Dialect, ttl_param: usize) -> (&'static str, String) {
    let p = placeholder(d, ttl_param);
    match d {
        // now() is a timestamptz: an instant, whatever the session's TimeZone.
        Dialect::Postgres => (
            "now()",
            format!("now() + {p}::float8 * interval '1 millisecond'"),
        ),
        // NOW(6) is the session's local time; UTC_TIMESTAMP(6) is not.
        Dialect::MySql => (
            "UTC_TIMESTAMP(6)",
            format!("UTC_TIMESTAMP(6) + INTERVAL {p} MICROSECOND"),
        ),
        // julianday('now') is UTC, in whole milliseconds (ROUND undoes the
        // float's error). Its clock ticks in whole milliseconds, so "now"
        // at the grant may be up to 1 ms behind the real time: one more
        // millisecond keeps the lease from ending before the holder's
        // deadline.
        Dialect::Sqlite => {
            const NOW: &str = "CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER)";
            (NOW, format!("{NOW} + {p} + 1"))
        }
    }
}

/// A TTL in the unit the dialect's expiry arithmetic uses, from the TTL in
/// milliseconds rounded **up**: a truncated TTL would let the database end
/// the lease before the holder's local deadline.
pub fn ttl_units(d: Dialect, ttl: std::time::Duration) -> i64 {
    let millis = i64::try_from(fencing_core::adapter::ttl_millis_ceil(ttl)).unwrap_or(i64::MAX);
    match d {
        Dialect::MySql => millis.saturating_mul(1000),
        Dialect::Postgres | Dialect::Sqlite => millis,
    }
}

/// The next token of a lease row. PostgreSQL and MySQL raise an error
/// (SQLSTATE 22003) when `token + 1` overflows BIGINT; SQLite silently
/// turns it into a REAL, so there the overflow becomes a NULL that the
/// `NOT NULL` column refuses. [`crate::error::map_error`] reports both as
/// [`fencing_core::Error::TokenOutOfRange`].
fn next_token(d: Dialect, token: &str) -> String {
    match d {
        Dialect::Sqlite => format!("CASE WHEN {token} < {} THEN {token} + 1 END", i64::MAX),
        Dialect::Postgres | Dialect::MySql => format!("{token} + 1"),
    }
}

/// The database's clock in microseconds since the epoch: where a lease
/// row that does not exist starts its counter (its first grant is one
/// above). A row an operator deleted (a purge of old leases) took its
/// counter with it; made again at 1 it would grant tokens every store
/// refuses. Made at the clock, it starts above every token the deleted row
/// gave, unless that row granted more than one token per microsecond of its
/// life or a floor put it above the clock. BIGINT holds it for some 290,000
/// years. SQLite's clock is the host's: a host clock set back undoes this.
fn clock_micros(d: Dialect) -> &'static str {
    match d {
        Dialect::Postgres => "floor(extract(epoch from clock_timestamp()) * 1000000)::bigint",
        // Both sides are zone-free DATETIMEs; UNIX_TIMESTAMP() would read
        // its argument in the session's time zone.
        Dialect::MySql => "TIMESTAMPDIFF(MICROSECOND, '1970-01-01 00:00:00', UTC_TIMESTAMP(6))",
        // julianday('now') ticks in milliseconds: the micros end in 000.
        Dialect::Sqlite => {
            "(CAST(ROUND((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000)"
        }
    }
}

/// Takes the lease row if it is free, expired or already ours; a new holder
/// gets `token + 1` (a new row starts one above `clock_micros`), the same
/// live holder keeps its token. Binds: resource,
/// holder, ttl. Returns the token (PostgreSQL, SQLite; no row = held), or on
/// MySQL puts it in `LAST_INSERT_ID`, with [`MYSQL_HELD_BIT`] set when the
/// lease is held by someone else (MySQL ignores `LAST_INSERT_ID(0)`, so
/// "not granted" needs a non-zero value).
pub fn acquire(d: Dialect, t: &str) -> String {
    let (now, later) = now_and_later(d, 3);
    match d {
        Dialect::Postgres | Dialect::Sqlite => {
            let (p1, p2) = (placeholder(d, 1), placeholder(d, 2));
            let (next, clock) = (next_token(d, &format!("{t}.token")), clock_micros(d));
            format!(
                "INSERT INTO {t} (resource, holder, token, expires_at) VALUES ({p1}, {p2}, {clock} + 1, {later}) \
                 ON CONFLICT (resource) DO UPDATE SET \
                 token = CASE WHEN {t}.holder = excluded.holder AND {t}.expires_at > {now} \
                         THEN {t}.token ELSE {next} END, \
                 holder = excluded.holder, expires_at = excluded.expires_at \
                 WHERE {t}.holder IS NULL OR {t}.expires_at <= {now} OR {t}.holder = excluded.holder \
                 RETURNING token"
            )
        }
        // UTC_TIMESTAMP(6) is read once per statement, so the new row's
        // token and the LAST_INSERT_ID reporting it are the same number.
        // Assignments run left to right and see the columns already set:
        // the token first (from the old holder and expiry), then the
        // holder, then the expiry and the result keyed off the new holder.
        Dialect::MySql => {
            let (next, clock) = (next_token(d, "token"), clock_micros(d));
            format!(
                "INSERT INTO {t} (resource, holder, token, expires_at_utc, granted) \
             VALUES (?, ?, {clock} + 1, {later}, LAST_INSERT_ID({clock} + 1)) ON DUPLICATE KEY UPDATE \
             token = IF(holder <=> VALUES(holder) AND expires_at_utc > {now}, token, \
                        IF(holder IS NULL OR expires_at_utc <= {now}, {next}, token)), \
             holder = IF(holder IS NULL OR expires_at_utc <= {now} OR holder <=> VALUES(holder), VALUES(holder), holder), \
             expires_at_utc = IF(holder <=> VALUES(holder), VALUES(expires_at_utc), expires_at_utc), \
             granted = LAST_INSERT_ID(token | IF(holder <=> VALUES(holder), 0, {MYSQL_HELD_BIT}))"
            )
        }
    }
}

/// Raises a free resource's counter to at least the floor (a live holder's
/// row is left alone: its token is its lease). A row that does not exist
/// is made at the floor or the database's clock ([`clock_micros`]),
/// whichever is higher, as a grant would make it: a floor raised after an
/// operator deleted the row must not bring its tokens back down. A row
/// that exists keeps its counter if that is higher. Binds: resource,
/// floor, floor. One row changed or inserted = raised (or already above).
pub(crate) fn raise_floor(d: Dialect, t: &str) -> String {
    let (now, _) = now_and_later(d, 9);
    let clock = clock_micros(d);
    match d {
        Dialect::Postgres | Dialect::Sqlite => {
            let (p1, p2, p3) = (placeholder(d, 1), placeholder(d, 2), placeholder(d, 3));
            let greatest = if d == Dialect::Sqlite {
                "MAX"
            } else {
                "GREATEST"
            };
            format!(
                "INSERT INTO {t} (resource, holder, token, expires_at) VALUES ({p1}, NULL, {greatest}({p2}, {clock}), NULL) \
                 ON CONFLICT (resource) DO UPDATE SET token = {greatest}({t}.token, {p3}) \
                 WHERE {t}.holder IS NULL OR {t}.expires_at <= {now} RETURNING token"
            )
        }
        // The token is only raised while the lease is free; LAST_INSERT_ID
        // reports whether it was (the held bit) as for acquire.
        Dialect::MySql => format!(
            "INSERT INTO {t} (resource, holder, token, expires_at_utc, granted) VALUES (?, NULL, GREATEST(?, {clock}), NULL, LAST_INSERT_ID(1)) \
             ON DUPLICATE KEY UPDATE \
             granted = LAST_INSERT_ID(IF(holder IS NULL OR expires_at_utc <= {now}, 1, {MYSQL_HELD_BIT})), \
             token = IF(holder IS NULL OR expires_at_utc <= {now}, GREATEST(token, ?), token)"
        ),
    }
}

/// Tokens fit in 63 bits, so the top bit can say "held by someone else".
pub const MYSQL_HELD_BIT: u64 = 1 << 63;

/// Binds: ttl, resource, holder, token. One row changed = renewed.
pub(crate) fn renew(d: Dialect, t: &str) -> String {
    let (now, later) = now_and_later(d, 1);
    let p = |n| placeholder(d, n);
    let e = expiry_column(d);
    format!(
        "UPDATE {t} SET {e} = {later} WHERE resource = {} AND holder = {} AND token = {} AND {e} > {now}",
        p(2),
        p(3),
        p(4)
    )
}

/// Binds: resource, holder, token. One row changed = released.
///
/// On PostgreSQL the same statement also sends `NOTIFY` on
/// `release_channel` with the resource as payload: delivered only if the
/// release commits, and waiters need it only to wake early.
pub fn release(d: Dialect, t: &str) -> String {
    let (now, _) = now_and_later(d, 9);
    let p = |n| placeholder(d, n);
    let e = expiry_column(d);
    // The expiry becomes the release's time: how long the row has been
    // idle (`remove_idle`) counts from there.
    let update = format!(
        "UPDATE {t} SET holder = NULL, {e} = {now} \
         WHERE resource = {} AND holder = {} AND token = {} AND {e} > {now}",
        p(1),
        p(2),
        p(3)
    );
    match d {
        // A SELECT's row count is the released rows: one row = released.
        Dialect::Postgres => format!(
            "WITH released AS ({update} RETURNING resource) \
             SELECT pg_notify('{}', resource) FROM released",
            release_channel(t)
        ),
        Dialect::MySql | Dialect::Sqlite => update,
    }
}

/// The PostgreSQL channel releases on lease table `t` notify: one per
/// table, the resource in the payload. `{t}_released` when that is a plain
/// identifier of at most 63 bytes (the server truncates longer ones), else
/// a stable hash of `t` (`Tables`' names are public and may hold a schema).
/// Two tables sharing a channel cost only spurious wake-ups.
pub(crate) fn release_channel(t: &str) -> String {
    let plain = format!("{t}_released");
    if plain.len() <= 63
        && plain
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'_')
    {
        return plain;
    }
    // FNV-1a: the same in every process and Rust release.
    let hash = t.bytes().fold(0xcbf2_9ce4_8422_2325_u64, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01b3)
    });
    format!("fencing_released_{hash:016x}")
}

/// Deletes an idle lease row: no live holder, its lease ended (expired or
/// released) at least the idle time ago, and its counter at least the idle
/// time below the database's clock ([`clock_micros`]), so the row a later
/// grant makes starts above every token this one gave even if that clock
/// then trails this one by less (a failover, a step back). A row with no
/// time (made by a floor, or released by a release before this one kept
/// the time) counts as idle: its counter's margin still holds. Binds:
/// resource, idle (in [`ttl_units`]), idle in microseconds. One row
/// deleted = removed.
pub(crate) fn remove_idle(d: Dialect, t: &str) -> String {
    format!(
        "DELETE FROM {t} WHERE resource = {} AND {} AND token < {} - {}",
        placeholder(d, 1),
        idle(d, 2),
        clock_micros(d),
        placeholder(d, 3)
    )
}

/// Whether a lease row is idle: no live holder, and its lease ended
/// (expired or released) at least the idle time ago, bound as parameter
/// `n` (in [`ttl_units`]); a row with no time counts as idle.
fn idle(d: Dialect, n: usize) -> String {
    let (now, _) = now_and_later(d, 9);
    let e = expiry_column(d);
    let idle = placeholder(d, n);
    let ended_before = match d {
        Dialect::Postgres => format!("{now} - {idle}::float8 * interval '1 millisecond'"),
        Dialect::MySql => format!("{now} - INTERVAL {idle} MICROSECOND"),
        Dialect::Sqlite => format!("{now} - {idle}"),
    };
    format!("(holder IS NULL OR {e} <= {now}) AND ({e} IS NULL OR {e} <= {ended_before})")
}

/// Binds: idle (in [`ttl_units`]), resource: in the order they appear,
/// as `?` binds them. Returns the row's token, the database's clock in
/// microseconds and whether the row is idle (1 or 0): why [`remove_idle`]
/// kept a row.
pub(crate) fn why_kept(d: Dialect, t: &str) -> String {
    // A BIGINT on every dialect, as the other two columns.
    let integer = if d == Dialect::MySql {
        "SIGNED"
    } else {
        "BIGINT"
    };
    format!(
        "SELECT token, {}, CAST(CASE WHEN {} THEN 1 ELSE 0 END AS {integer}) FROM {t} WHERE resource = {}",
        clock_micros(d),
        idle(d, 1),
        placeholder(d, 2)
    )
}

/// Binds: resource. Returns holder, token of a live lease.
pub(crate) fn holder(d: Dialect, t: &str) -> String {
    let (now, _) = now_and_later(d, 9);
    format!(
        "SELECT holder, token FROM {t} WHERE resource = {} AND holder IS NOT NULL AND {} > {now}",
        placeholder(d, 1),
        expiry_column(d)
    )
}

fn placeholder(d: Dialect, n: usize) -> String {
    ParamStyle::of(d).marker(n)
}

/// How a statement marks its parameters: sqlx's way for each dialect, or
/// a driver's (the paramstyles of Python's DB-API, PEP 249), for running
/// [`GuardStatements`](crate::GuardStatements) outside sqlx.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum ParamStyle {
    /// `$1`, `$2`, …: PostgreSQL's own (sqlx, asyncpg).
    Dollar,
    /// `?`: SQLite's and MySQL's own (sqlx, Python's sqlite3).
    Qmark,
    /// `%s`: psycopg, PyMySQL, mysqlclient.
    Format,
    /// `:p1`, `:p2`, …: named after their position (SQLAlchemy's `text()`,
    /// sqlite3's named style).
    Named,
}

impl ParamStyle {
    /// The style sqlx uses for `dialect`.
    pub fn of(dialect: Dialect) -> Self {
        match dialect {
            Dialect::Postgres => Self::Dollar,
            Dialect::MySql | Dialect::Sqlite => Self::Qmark,
        }
    }

    /// The marker of the `n`th parameter (from 1).
    pub fn marker(self, n: usize) -> String {
        match self {
            Self::Dollar => format!("${n}"),
            Self::Qmark => "?".to_owned(),
            Self::Format => "%s".to_owned(),
            Self::Named => format!(":p{n}"),
        }
    }
}

#[cfg(test)]
mod tests;
