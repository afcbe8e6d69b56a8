//! The statements without a database: release channel names, TTL units,
//! and no session-dependent clock in a lease statement.

use std::time::Duration;

use super::*;

#[test]
fn release_channels_are_identifiers_of_at_most_63_bytes() {
    assert_eq!(release_channel("fencing_leases"), "fencing_leases_released");
    for t in ["s.leases", "\"Odd\"", &"x".repeat(60)] {
        let c = release_channel(t);
        assert!(c.starts_with("fencing_released_") && c.len() <= 63, "{c}");
        assert_eq!(c, release_channel(t), "stable");
    }
    assert_ne!(release_channel("a.leases"), release_channel("b.leases"));
    assert!(release(Dialect::Postgres, "l").contains("pg_notify('l_released', resource)"));
}

#[test]
fn ttls_are_rounded_up_to_the_millisecond() {
    let ttl = Duration::from_micros(2_001);
    assert_eq!(ttl_units(Dialect::Postgres, ttl), 3);
    assert_eq!(ttl_units(Dialect::Sqlite, ttl), 3);
    assert_eq!(ttl_units(Dialect::MySql, ttl), 3_000);
    assert_eq!(ttl_units(Dialect::Postgres, Duration::from_nanos(1)), 1);
    assert_eq!(ttl_units(Dialect::Postgres, Duration::from_millis(7)), 7);
}

#[test]
fn no_lease_statement_reads_a_session_dependent_clock() {
    // PostgreSQL's now() is an instant; its column type is checked at
    // startup (`SqlIssuer::new`).
    for (d, zoned) in [
        (
            Dialect::MySql,
            ["NOW(", "SYSDATE", "CURRENT_TIMESTAMP", "LOCALTIME"],
        ),
        (
            Dialect::Sqlite,
            ["LOCALTIME", "'UTC'", "DATETIME(", "TIME("],
        ),
    ] {
        let t = "leases";
        for stmt in [
            acquire(d, t),
            renew(d, t),
            release(d, t),
            holder(d, t),
            raise_floor(d, t),
        ] {
            for clock in zoned {
                assert!(
                    !stmt.to_uppercase().contains(clock),
                    "{d:?} uses {clock}: {stmt}"
                );
            }
        }
    }
}

/// The guard's statements in a driver's style are the sqlx ones with other
/// markers: three in the upsert, one in the select, nothing else a driver
/// would read as a marker (a `%` for psycopg and PyMySQL, a `:name`).
#[test]
fn the_guard_in_a_drivers_style_differs_only_in_its_markers() {
    let t = Tables::default();
    for d in [Dialect::Postgres, Dialect::MySql, Dialect::Sqlite] {
        let native = guard_upsert(d, &t, ParamStyle::of(d));
        for style in [
            ParamStyle::Dollar,
            ParamStyle::Qmark,
            ParamStyle::Format,
            ParamStyle::Named,
        ] {
            let stmt = guard_upsert(d, &t, style);
            let mut normalised = stmt.clone();
            for n in 1..=3 {
                normalised = normalised.replacen(&style.marker(n), &format!("<{n}>"), 1);
            }
            let mut expected = native.clone();
            for n in 1..=3 {
                expected = expected.replacen(&ParamStyle::of(d).marker(n), &format!("<{n}>"), 1);
            }
            assert_eq!(normalised, expected, "{d:?} {style:?}");
            assert!(
                !normalised.contains('%')
                    && !normalised.contains(":p")
                    && !normalised.contains('$')
            );
            assert_eq!(
                normalised.matches('?').count(),
                0,
                "{d:?} {style:?}: {stmt}"
            );
            let select = select_mark_in(style, &t.records);
            assert_eq!(
                select.replace(&style.marker(1), "<1>"),
                "SELECT lock_token FROM fencing_records WHERE k = <1>"
            );
        }
    }
}
